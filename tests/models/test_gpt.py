"""The ensemble-first GPT: members are independent models; Sec. 2 forward against a slow literal
implementation of the seed's equations; seed 001's post-LN model (Eqs. 15-18) and seed 003's
attention-only models against slow references; inits (standard, local-to-global, γ); activation
cache; existing configurations pinned to the numbers they gave before the seed-001/003 options."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
from pydantic import ValidationError

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer, next_token_loss

F64 = torch.float64
TASK = MarkovChain(0.3, 0.6)


def _tokens(E, B, T, seed=0):
    return torch.randint(0, 2, (E, B, T), generator=torch.Generator().manual_seed(seed))


# --- a slow, literal Sec. 2 forward pass ----------------------------------------------------------


def sec2_reference(model: GPT, m: int, tokens: torch.Tensor) -> torch.Tensor:
    """P(x_{n+1} = 1 | x_1^n) for member m, written position by position from the Sec. 2 equations:

    x_n = x_n e + p_n
    y_n = x_n + W_O sum_{i<=n} att_{n,i} W_V x_i,  att_{n,.} = softmax_i(<W_Q x_n, W_K x_i>/sqrt(d_h) [+ r_{n-i}])
    z_n = y_n + W_2 ReLU(W_1 y_n)
    P(x_{n+1}=1 | x_1^n) = sigmoid(<e, z_n> + b)
    """
    cfg = model.cfg
    st = {k: v.double() for k, v in model.member_state(m).items()}
    e, b = st["e"], st.get("b", torch.zeros((), dtype=F64))
    a = e if cfg.tie_weights else st["a"]
    H, dh = cfg.heads, cfg.attn_width // cfg.heads
    B, T = tokens.shape
    out = torch.empty(B, T, dtype=F64)
    for bi in range(B):
        xs = [float(tokens[bi, n]) * e + (st["wpe"][n] if "wpe" in st else 0.0) for n in range(T)]
        for layer in range(cfg.layers):
            p = f"blocks.{layer}."
            WQ, WK, WV = (st[p + f"attn.{w}.weight"] for w in ("W_Q", "W_K", "W_V"))
            ys = []
            for n in range(T):
                heads = []
                for h in range(H):
                    sl = slice(h * dh, (h + 1) * dh)
                    qn = (WQ @ xs[n])[sl]
                    scores = []
                    for i in range(n + 1):
                        s = float(qn @ (WK @ xs[i])[sl]) / math.sqrt(dh)
                        if p + "attn.rel_bias" in st:
                            s += float(st[p + "attn.rel_bias"][h, n - i])
                        if p + "attn.rel_k" in st:  # Shaw et al. 2018: <q_n, a^K_{clip(n-i)}>/sqrt(d_h)
                            s += float(qn @ st[p + "attn.rel_k"][min(n - i, cfg.rel_clip)]) / math.sqrt(dh)
                        scores.append(s)
                    mx = max(scores)
                    w = [math.exp(s - mx) for s in scores]
                    Z = sum(w)
                    rel_v = st.get(p + "attn.rel_v")
                    vals = [
                        (WV @ xs[i])[sl] + (rel_v[min(n - i, cfg.rel_clip)] if rel_v is not None else 0.0)
                        for i in range(n + 1)
                    ]
                    heads.append(sum((w[i] / Z) * vals[i] for i in range(n + 1)))
                att = torch.cat(heads)
                if p + "attn.W_O.weight" in st:
                    att = st[p + "attn.W_O.weight"] @ att
                ys.append(xs[n] + att)
            if p + "mlp.W_1.weight" not in st:  # attention-only (seed 003): the block ends here
                xs = ys
                continue
            W1, W2 = st[p + "mlp.W_1.weight"], st[p + "mlp.W_2.weight"]
            xs = [y + W2 @ torch.relu(W1 @ y) for y in ys]
        for n in range(T):
            out[bi, n] = 1.0 / (1.0 + math.exp(-(float(a @ xs[n]) + float(b))))
    return out


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(positions="relative"),
        dict(positions="both", heads=2),
        dict(positions="relative", rel_encoding="kv", rel_clip=3),
        dict(positions="both", rel_encoding="kv", heads=2, rel_clip=4),
        dict(positions="none", out_proj=False),
        dict(tie_weights=False, layers=2),
        dict(init="local-to-global"),
        # seed 003 attention-only blocks (no MLP, no LayerNorm) and the attention width option
        dict(mlp=False, layers=3),
        dict(mlp=False, layers=2, heads=2, positions="relative", rel_encoding="kv", rel_clip=3, head_bias=False),
        dict(d_attn=6, heads=2, layers=2),
        dict(d_attn=2, d_ff=5, init="gamma", init_gamma=0.3),
    ],
    ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default",
)
def test_sec2_forward_matches_the_literal_equations(kw):
    cfg = GPTConfig(arch="sec2", d=4, max_len=16, init_std=0.5, **kw)
    model = GPT(cfg, member_seeds(3, 3)).double()
    tokens = _tokens(3, 2, 9)
    logits = model(tokens)
    assert logits.shape == (3, 2, 9, 2)
    assert torch.equal(logits[..., 0], torch.zeros_like(logits[..., 0]))  # logits (0, logit_n)
    prob1 = logits.softmax(-1)[..., 1]
    for m in (0, 2):
        torch.testing.assert_close(prob1[m], sec2_reference(model, m, tokens[m]), rtol=1e-9, atol=1e-10)
    # The cached (explicit softmax) path gives the same output as the fused attention kernel.
    out_cached, _ = model.run_with_cache(tokens)
    torch.testing.assert_close(out_cached, logits.detach(), rtol=1e-9, atol=1e-10)


def test_sec2_float32_forward_matches_reference():
    model = GPT(GPTConfig(arch="sec2", d=8, max_len=16, init_std=0.3), member_seeds(0, 2))
    tokens = _tokens(2, 2, 16, seed=4)
    prob1 = model(tokens).softmax(-1)[..., 1].double()
    torch.testing.assert_close(prob1[1], sec2_reference(model, 1, tokens[1]), rtol=1e-5, atol=1e-6)


def test_gpt2_head_is_tied_to_the_token_table():
    model = GPT(GPTConfig(arch="gpt2", d=8, vocab=5, max_len=16, heads=2), member_seeds(1, 2))
    tokens = torch.randint(0, 5, (2, 3, 10), generator=torch.Generator().manual_seed(0))
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (2, 3, 10, 5)
    torch.testing.assert_close(logits, torch.einsum("ebtd,evd->ebtv", cache["final"], model.wte.detach()))
    # Embedding = wte[token] + wpe[position].
    ref = model.wte.detach()[torch.arange(2)[:, None, None], tokens] + model.wpe.detach()[:, None, :10]
    torch.testing.assert_close(cache["embed"], ref)


# --- initialisation -------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sec2", "gpt2"])
def test_each_member_is_initialised_from_its_own_seed(arch):
    cfg = GPTConfig(arch=arch, d=8, max_len=32)
    seeds = member_seeds(5, 4)
    ens = GPT(cfg, seeds)
    for i in (0, 3):
        alone = GPT(cfg, [seeds[i]])
        for k, v in alone.state_dict().items():
            assert torch.equal(ens.state_dict()[k][i], v[0]), k
    assert not torch.equal(ens.blocks[0].attn.W_Q.weight[0], ens.blocks[0].attn.W_Q.weight[1])


def test_standard_init_is_gaussian_with_init_std():
    model = GPT(GPTConfig(arch="gpt2", d=8, max_len=256, init_std=0.02), member_seeds(0, 2))
    vals = torch.cat([p.detach().reshape(-1) for n, p in model.named_parameters() if "ln_" not in n])
    assert abs(vals.mean().item()) < 3 * 0.02 / math.sqrt(vals.numel())
    assert vals.std().item() == pytest.approx(0.02, rel=0.05)
    # LayerNorm starts at (1, 0), as GPT-2.
    assert torch.equal(model.ln_f.weight, torch.ones_like(model.ln_f.weight))
    assert torch.equal(model.blocks[0].ln_1.bias, torch.zeros_like(model.blocks[0].ln_1.bias))


@pytest.mark.parametrize("arch", ["sec2", "gpt2"])
def test_local_to_global_init_sets_e_w1_w2_and_keeps_the_rest(arch):
    seeds = member_seeds(2, 3)
    std = GPT(GPTConfig(arch=arch, d=4, max_len=16, layers=2), seeds)
    l2g = GPT(GPTConfig(arch=arch, d=4, max_len=16, layers=2, init="local-to-global"), seeds)
    if arch == "sec2":
        assert torch.equal(l2g.e, torch.full_like(l2g.e, 0.5))
    else:
        torch.testing.assert_close(l2g.wte[:, 1] - l2g.wte[:, 0], torch.full((3, 4), 0.5))
    for blk in l2g.blocks:
        assert torch.equal(blk.mlp.W_1.weight, torch.ones_like(blk.mlp.W_1.weight))
        assert torch.equal(blk.mlp.W_2.weight, -torch.ones_like(blk.mlp.W_2.weight))
    # Attention and positions are the same draws as the standard init.
    for k, v in std.state_dict().items():
        if "mlp" not in k and k not in ("e", "wte"):
            assert torch.equal(l2g.state_dict()[k], v), k


# --- cache -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(arch="sec2"), dict(arch="gpt2", heads=2), dict(arch="sec2", positions="relative")])
def test_attention_pattern_is_a_causal_stochastic_matrix(kw):
    model = GPT(GPTConfig(d=8, max_len=16, init_std=0.5, **kw), member_seeds(0, 2))
    tokens = _tokens(2, 3, 12)
    out, cache = model.run_with_cache(tokens)
    pat = cache["blocks.0.attn.pattern"]
    assert pat.shape == (2, 3, model.cfg.heads, 12, 12)
    torch.testing.assert_close(pat.sum(-1), torch.ones(pat.shape[:-1]))
    upper = torch.ones(12, 12, dtype=torch.bool).triu(1)
    assert torch.equal(pat[..., upper], torch.zeros_like(pat[..., upper]))
    assert bool((pat[..., ~upper] > 0).all())
    assert pat[..., 0, 0].eq(1).all()  # the first position attends to itself only
    assert all(n in cache for n in ("embed", "blocks.0.out", "blocks.0.mlp.pre", "final"))  # short names answer too
    assert not out.requires_grad
    # Only named activations when asked for; nothing cached outside the block.
    _, few = model.run_with_cache(tokens, names=["final"])
    assert set(few) == {"final"}
    assert not any(p.active for p in model.hook_points().values())  # the readers are gone


def test_relative_positions_run_and_differ_from_absolute():
    seeds = member_seeds(4, 2)
    tokens = _tokens(2, 2, 16)
    rel = GPT(GPTConfig(d=4, max_len=16, positions="relative", init_std=0.5), seeds)
    ab = GPT(GPTConfig(d=4, max_len=16, positions="absolute", init_std=0.5), seeds)
    assert rel.wpe is None and rel.blocks[0].attn.rel_bias.shape == (2, 1, 16)
    out_rel, out_abs = rel(tokens), ab(tokens)
    assert torch.isfinite(out_rel).all()
    assert (out_rel - out_abs).abs().max() > 1e-3
    # The relative bias is a function of n - i only: shifting the bias at distance 0 changes the
    # attention of every position except the first (which attends to itself alone).
    _, c1 = rel.run_with_cache(tokens)
    with torch.no_grad():
        rel.blocks[0].attn.rel_bias[:, :, 0] += 1.0
    _, c2 = rel.run_with_cache(tokens)
    d = (c1["blocks.0.attn.pattern"] - c2["blocks.0.attn.pattern"]).abs().amax(dim=(0, 1, 2, 4))
    assert d[0] == 0 and bool((d[1:] > 0).all())


def test_relative_key_value_embeddings_are_clipped_shared_across_heads_and_per_member():
    seeds = member_seeds(5, 3)
    cfg = GPTConfig(
        arch="gpt2", d=8, heads=2, max_len=16, positions="relative", rel_encoding="kv", rel_clip=3, init_std=0.5
    )
    model = GPT(cfg, seeds)
    attn = model.blocks[0].attn
    assert model.wpe is None and attn.rel_bias is None
    assert attn.rel_k.shape == attn.rel_v.shape == (3, 4, 4)  # (E, rel_clip + 1, d_h): shared across heads
    tokens = _tokens(3, 2, 12)
    out = model(tokens)
    # Member i of the ensemble is the model built from seed i alone (the member axis is respected).
    for i in range(3):
        alone = GPT(cfg, seeds[i : i + 1])
        torch.testing.assert_close(alone(tokens[i : i + 1]), out[i : i + 1].detach())
    # Distances beyond rel_clip share the last embedding: changing it moves only positions n >= 3,
    # and changing another member's embeddings leaves member 0 alone.
    with torch.no_grad():
        attn.rel_k[1:, 3] += 1.0
        attn.rel_v[1:, 3] -= 1.0
    out2 = model(tokens)
    torch.testing.assert_close(out2[0], out[0])
    diff = (out2[1:] - out[1:]).abs().amax(dim=(0, 1, 3))
    assert bool((diff[:3] == 0).all()) and bool((diff[3:] > 1e-4).all())
    # Gradients reach the relative embeddings of each member.
    model(tokens).sum().backward()
    assert bool((attn.rel_k.grad.abs().sum(dim=(1, 2)) > 0).all()) and bool(
        (attn.rel_v.grad.abs().sum(dim=(1, 2)) > 0).all()
    )


# --- members are independent ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sec2", "gpt2"])
def test_members_never_share_gradients(arch):
    model = GPT(GPTConfig(arch=arch, d=4, max_len=16, init_std=0.3), member_seeds(1, 3))
    x = _tokens(3, 2, 13)

    def grads(tokens):
        model.zero_grad()
        next_token_loss(model(tokens[..., :-1]), tokens[..., 1:]).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    g0 = grads(x)
    x2 = x.clone()
    x2[0] = 1 - x2[0]  # perturb member 0's input only
    g1 = grads(x2)
    for n in g0:
        assert torch.equal(g0[n][1:], g1[n][1:]), n  # members 1 and 2 unaffected
    assert any(not torch.equal(g0[n][0], g1[n][0]) for n in g0)  # member 0 did change
    # Each member's gradient equals that of the same member trained alone.
    alone = GPT(model.cfg, [model.seeds[2]])
    next_token_loss(alone(x[2:, :, :-1]), x[2:, :, 1:]).sum().backward()
    for n, p in alone.named_parameters():
        torch.testing.assert_close(p.grad[0], g0[n][2], rtol=1e-5, atol=1e-7)


def _fit(arch, seeds, chunk="auto", steps=4):
    cfg = GPTConfig(arch=arch, d=4, max_len=16)
    tc = TrainConfig(steps=steps, batch=4, seq_len=16, eval_every=2, eval_batches=1, log_every=1, chunk=chunk)
    return Trainer(tc, progress=False).fit(lambda s: GPT(cfg, s), seeds, TASK)


@pytest.mark.parametrize("arch", ["sec2", "gpt2"])
def test_member_of_an_ensemble_of_8_equals_the_model_trained_alone(arch):
    seeds = member_seeds(2024, 8)
    ens = _fit(arch, seeds)
    i = 5
    alone = _fit(arch, [seeds[i]])
    mine = {(s, n): v for s, m, n, v in ens.rows if m == i}
    solo = {(s, n): v for s, m, n, v in alone.rows}
    assert set(mine) == set(solo) and {m for _, m, _, _ in alone.rows} == {0}
    for k in solo:
        assert mine[k] == pytest.approx(solo[k], rel=1e-5, abs=1e-6), k
    assert len(ens.states) == 8 and len(alone.states) == 1
    for k, v in alone.states[0].items():
        torch.testing.assert_close(ens.states[i][k], v, rtol=1e-5, atol=1e-6)
    # Members really are different models (different seeds -> different losses and weights).
    finals = [v for s, m, n, v in ens.rows if n == "test_loss" and s == 4]
    assert len(set(finals)) == 8
    # Training moved the parameters away from the init.
    init = GPT(GPTConfig(arch=arch, d=4, max_len=16), [seeds[i]]).member_state(0)
    assert any(not torch.allclose(init[k], v) for k, v in alone.states[0].items())


def test_chunked_training_gives_the_same_numbers():
    seeds = member_seeds(7, 8)
    full = _fit("sec2", seeds, chunk=8)
    chunked = _fit("sec2", seeds, chunk=3)
    a = {(s, m, n): v for s, m, n, v in full.rows}
    b = {(s, m, n): v for s, m, n, v in chunked.rows}
    assert set(a) == set(b) and {m for _, m, _ in a} == set(range(8))
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), k
    for sa, sb in zip(full.states, chunked.states, strict=True):
        for k in sa:
            torch.testing.assert_close(sb[k], sa[k], rtol=1e-5, atol=1e-6)


def test_single_member_ensemble_and_input_checks():
    model = GPT(GPTConfig(d=4, max_len=8), [11])
    assert model.members == 1 and model(_tokens(1, 2, 8)).shape == (1, 2, 8, 2)
    with pytest.raises(ValueError, match="members"):
        model(_tokens(2, 2, 8))
    with pytest.raises(ValueError, match="max_len"):
        model(_tokens(1, 2, 9))
    with pytest.raises(ValueError, match="seed"):
        GPT(GPTConfig(d=4), [])
    with pytest.raises(ValueError, match="vocab"):
        GPTConfig(arch="sec2", vocab=3)
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(d=6, heads=4)


# --- seed 001: the post-LN transformer of App. A.2 (Eqs. 15-18) ------------------------------------

# The seed's model scaled down (A.3: V 200, d_m 200, d_k 64, d_ff 512, 2 layers, 1 head, L = 9).
SEED001 = dict(
    arch="gpt2",
    vocab=7,
    d=6,
    d_attn=4,
    d_ff=10,
    layers=2,
    heads=1,
    max_len=9,
    norm="post",
    activation="relu",
    tie_weights=False,
    head_bias=True,
    init="gamma",
    init_gamma=0.3,
)
ATTN_ONLY = dict(
    arch="gpt2", vocab=5, d=6, d_attn=4, heads=2, layers=3, max_len=12, mlp=False, norm="none", init_std=0.5
)


def _ln(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance, as LayerNorm
    return (x - mu) / torch.sqrt(var + eps) * g + b


def gpt_reference(model: GPT, m: int, seq: torch.Tensor, placement: str, mlp: bool, act: str) -> torch.Tensor:
    """Logits ``(T, V)`` of member m on one sequence, in seed 001's row-vector notation (App. A.2):

        X^(1) = W^emb[X] + W^pos                                              (15)
        Q = X W^Q, K = X W^K, V = X W^V  (W^Q, W^K, W^V in R^{d_m x d_k})     (16)
        Attn = softmax(mask(Q K^T / sqrt(d_k))),  X^qkv = Attn V              (17)
        X^ao = LN(X + X^qkv W^O),  X^(l+1) = LN(MLP(X^ao) + X^ao)             (18)   [placement "post"]
        logits = X^(L+1) W^out + b

    ``placement`` "pre" reads X^ao = X + Attn(LN(X)) W^O, X' = X^ao + MLP(LN(X^ao)); "none" drops the
    LNs; ``mlp=False`` ends each block at X^ao. Heads split d_k (seed 001 has one). A torch weight
    ``(out, in)`` is the seed's ``W`` transposed; biases, where the model has them, are added.
    """
    st = {k: v.double() for k, v in model.member_state(m).items()}
    H = model.cfg.heads
    T = seq.shape[0]
    X = st["wte"][seq] + st["wpe"][:T]  # (15)
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def lin(name, x):
        return x @ st[name + ".weight"].T + st.get(name + ".bias", torch.zeros((), dtype=F64))

    def ln(name, x):
        return _ln(x, st[name + ".weight"], st[name + ".bias"]) if placement != "none" else x

    def mlp_f(name, x):
        h = lin(name + ".W_1", x)
        h = torch.relu(h) if act == "relu" else 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
        return lin(name + ".W_2", h)

    for layer in range(model.cfg.layers):
        p = f"blocks.{layer}."
        inp = X if placement in ("post", "none") else ln(p + "ln_1", X)
        Q, K, V = (lin(p + f"attn.{w}", inp) for w in ("W_Q", "W_K", "W_V"))  # (16)
        dk = Q.shape[1] // H
        heads = []
        for h in range(H):
            sl = slice(h * dk, (h + 1) * dk)
            S = (Q[:, sl] @ K[:, sl].T) / math.sqrt(dk)
            S = torch.where(mask, S, torch.full_like(S, -math.inf))
            A = torch.exp(S - S.max(-1, keepdim=True).values)
            heads.append((A / A.sum(-1, keepdim=True)) @ V[:, sl])  # (17)
        Xqkv = torch.cat(heads, dim=1)
        att = lin(p + "attn.W_O", Xqkv) if p + "attn.W_O.weight" in st else Xqkv  # out_proj=False: no W^O
        Xao = ln(p + "ln_1", X + att) if placement == "post" else X + att  # (18), first half
        if not mlp:
            X = Xao
        elif placement == "post":
            X = ln(p + "ln_2", mlp_f(p + "mlp", Xao) + Xao)  # (18), second half
        else:
            X = Xao + mlp_f(p + "mlp", ln(p + "ln_2", Xao))
    if "ln_f.weight" in st:
        X = _ln(X, st["ln_f.weight"], st["ln_f.bias"])
    W_out = st["lm_head"] if "lm_head" in st else st["wte"]
    return X @ W_out.T + st.get("lm_bias", torch.zeros((), dtype=F64))


def _randomise_layernorms(model: GPT, seed: int = 0) -> None:
    """LayerNorm starts at (1, 0); move it so the reference checks that gains and shifts are applied."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, prm in model.named_parameters():
            if ".ln_" in f".{n}":
                prm.add_(0.3 * torch.randn(prm.shape, generator=g, dtype=prm.dtype))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),  # seed 001's layout
        dict(heads=2, bias=True, activation="gelu", tie_weights=True, head_bias=False, final_norm=True),
        dict(layers=1, d_attn=None, init_fan="in", init_gamma=0.1),
    ],
    ids=["seed001", "heads2-bias-gelu-tied-finalLN", "dattn=d-fanin"],
)
def test_post_ln_forward_matches_eqs_15_to_18(kw):
    cfg = GPTConfig(**{**SEED001, **kw})
    model = GPT(cfg, member_seeds(6, 3)).double()
    _randomise_layernorms(model)
    # The seed's model: post-LN blocks, no final LayerNorm (A.2 projects X^do(L) directly), untied
    # output layer with bias, no biases on Q/K/V/O and the MLP.
    if not kw:
        assert model.ln_f is None and model.lm_head is not None and model.lm_bias.shape == (3, 7)
        attn = model.blocks[0].attn
        assert attn.W_Q.weight.shape == (3, 4, 6) and attn.W_O.weight.shape == (3, 6, 4)  # d_m x d_k, d_k x d_m
        assert model.blocks[1].mlp.W_1.weight.shape == (3, 10, 6)
        assert all(lin.bias is None for lin in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O, model.blocks[0].mlp.W_1))
    tokens = torch.randint(0, 7, (3, 2, 9), generator=torch.Generator().manual_seed(2))
    logits = model(tokens)
    assert logits.shape == (3, 2, 9, 7)
    for m in (0, 2):
        for bi in range(2):
            ref = gpt_reference(model, m, tokens[m, bi], "post", mlp=True, act=cfg.act)
            torch.testing.assert_close(logits[m, bi], ref, rtol=1e-10, atol=1e-12)
    out_cached, cache = model.run_with_cache(tokens)  # explicit-softmax path = fused kernel
    torch.testing.assert_close(out_cached, logits.detach(), rtol=1e-10, atol=1e-12)
    # blocks.{l}.mid is X^ao = LN(X + Attn V W^O) of the first block (Eq. 18), X = the recorded embedding.
    ln1 = model.blocks[0].ln_1
    mid = cache["blocks.0.mid"]
    torch.testing.assert_close(
        mid,
        _ln(
            cache["embed"] + model.blocks[0].attn(cache["embed"]).detach(),
            ln1.weight.detach()[:, None, None],
            ln1.bias.detach()[:, None, None],
        ),
    )


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(heads=1, d_attn=None, out_proj=False, layers=2), dict(norm="pre", final_norm=False)],
    ids=["default", "no-out-proj", "pre-LN-no-MLP"],
)
def test_attention_only_forward_matches_reference(kw):
    """Seed 003, "depth without non-linearities": x_{l+1} = x_l + W_O Attn(x_l), no MLP, no LayerNorm."""
    cfg = GPTConfig(**{**ATTN_ONLY, **kw})
    model = GPT(cfg, member_seeds(8, 2)).double()
    _randomise_layernorms(model)
    for blk in model.blocks:
        assert blk.mlp is None and blk.ln_2 is None
        assert (blk.ln_1 is None) == (cfg.norm == "none")
    assert model.ln_f is None and not any("mlp" in n for n, _ in model.named_parameters())
    tokens = torch.randint(0, 5, (2, 2, 12), generator=torch.Generator().manual_seed(3))
    logits, cache = model.run_with_cache(tokens)
    assert not any(".mlp." in k for k in cache)
    for m in (0, 1):
        ref = gpt_reference(model, m, tokens[m, 1], cfg.norm_placement, mlp=False, act="relu")
        torch.testing.assert_close(logits[m, 1], ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model(tokens).detach(), logits, rtol=1e-10, atol=1e-12)


def test_auto_options_resolve_to_the_seed_000_layouts():
    sec2, gpt2 = GPTConfig(arch="sec2"), GPTConfig(arch="gpt2")
    assert (sec2.norm_placement, sec2.has_final_norm, sec2.act, sec2.has_head_bias) == ("none", False, "relu", True)
    assert (gpt2.norm_placement, gpt2.has_final_norm, gpt2.act, gpt2.has_head_bias) == ("pre", True, "gelu", False)
    assert (gpt2.attn_width, gpt2.ff_width) == (8, 32)
    post = GPTConfig(arch="gpt2", norm="post")
    assert not post.has_final_norm and GPTConfig(arch="gpt2", norm="post", final_norm=True).has_final_norm


# --- γ-init (seed 001 Sec. 3.4, App. B.4) ----------------------------------------------------------


@pytest.mark.parametrize("gamma", [0.3, 0.8])
@pytest.mark.parametrize("fan", ["out", "in"])
def test_gamma_init_std_is_width_to_the_minus_gamma(gamma, fan):
    """W in R^{d1 x d2} (in, out): W_ij ~ N(0, (d2^-γ)^2) for fan "out" (Sec. 3.4), d1^-γ for "in";
    embeddings d_m^-γ either way (B.4); LayerNorm (1, 0); biases 0."""
    V, d, dk, dff = 300, 256, 128, 512
    cfg = GPTConfig(
        arch="gpt2",
        vocab=V,
        d=d,
        d_attn=dk,
        d_ff=dff,
        heads=2,
        layers=1,
        max_len=256,
        norm="post",
        tie_weights=False,
        head_bias=True,
        bias=True,
        init="gamma",
        init_gamma=gamma,
        init_fan=fan,
    )
    model = GPT(cfg, member_seeds(1, 2))
    # (d_in, d_out) of each matrix in the seed's layout; embedding tables by their row width.
    dims = {
        "attn.W_Q": (d, dk),
        "attn.W_K": (d, dk),
        "attn.W_V": (d, dk),
        "attn.W_O": (dk, d),
        "mlp.W_1": (d, dff),
        "mlp.W_2": (dff, d),
    }
    expected = {"wte": d**-gamma, "wpe": d**-gamma, "lm_head": (d if fan == "in" else V) ** -gamma}
    for k, (di, do) in dims.items():
        expected[f"blocks.0.{k}.weight"] = (di if fan == "in" else do) ** -gamma
    seen = set()
    for name, prm in model.named_parameters():
        w = prm.detach().double()
        if ".ln_" in f".{name}":
            assert torch.equal(prm, torch.ones_like(prm) if name.endswith("weight") else torch.zeros_like(prm)), name
        elif name == "lm_bias" or name.endswith(".bias"):
            assert torch.equal(prm, torch.zeros_like(prm)), name
        else:
            assert w.numel() >= 65536, name  # std error of the std <= 1/sqrt(2n) ~ 0.3%: 2% is ~7 sigma
            assert w.std().item() == pytest.approx(expected[name], rel=0.02), name
            assert abs(w.mean().item()) < 5 * expected[name] / math.sqrt(w.numel()), name
            seen.add(name)
    assert seen == set(expected)
    # The two fans differ where the widths do: W_Q (d -> d_k) by (d_k / d)^γ.
    other = GPT(cfg.updated({"init_fan": "in" if fan == "out" else "out"}), member_seeds(1, 2))
    ratio = (model.blocks[0].attn.W_Q.weight.std() / other.blocks[0].attn.W_Q.weight.std()).item()
    assert ratio == pytest.approx((dk / d if fan == "in" else d / dk) ** gamma, rel=0.02)


def test_gamma_std_of_the_sec2_parameters():
    """sec2: e is the embedding (d^-γ); the untied head a maps d -> 1 (std 1 for fan out); b is a bias."""
    for fan, a_std in (("out", 1.0), ("in", 8**-0.5)):
        m = GPT(GPTConfig(arch="sec2", d=8, tie_weights=False, init="gamma", init_gamma=0.5, init_fan=fan), [0])
        assert m.gamma_std("e") == pytest.approx(8**-0.5) and m.gamma_std("a") == pytest.approx(a_std)
        assert m.gamma_std("b") == 0.0 and torch.equal(m.b, torch.zeros(1))


def test_lemma_1_small_init_attention_is_uniform():
    """Seed 001 Lemma 1 at the seed's sizes (d_m 200, d_k 64, V 200, L 9): at γ = 2 the first layer's
    attention at init is 1/j within 1e-3; at γ = 0.3 it is not (the check can fail)."""
    base = dict(SEED001, vocab=200, d=200, d_attn=64, d_ff=512)
    tokens = torch.randint(0, 200, (2, 8, 9), generator=torch.Generator().manual_seed(0))
    uniform = torch.ones(9, 9).tril() / torch.arange(1, 10)[:, None]
    errs = {}
    for gamma in (2.0, 0.3):
        model = GPT(GPTConfig(**{**base, "init_gamma": gamma}), member_seeds(3, 2))
        _, cache = model.run_with_cache(tokens, names=["blocks.0.attn.pattern"])
        errs[gamma] = (cache["blocks.0.attn.pattern"] - uniform).abs().max().item()
    assert errs[2.0] <= 1e-3 and errs[0.3] > 1e-3


# --- new options: members, gradients, bad input ----------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [SEED001, ATTN_ONLY, dict(ATTN_ONLY, positions="both", rel_encoding="kv", init="gamma")],
    ids=["seed001", "attention-only", "attention-only-kv-gamma"],
)
def test_member_of_an_ensemble_equals_the_model_built_alone_new_options(kw):
    cfg = GPTConfig(**kw)
    seeds = member_seeds(9, 3)
    ens = GPT(cfg, seeds)
    tokens = torch.randint(0, cfg.vocab, (3, 2, 9), generator=torch.Generator().manual_seed(5))
    out = ens(tokens)
    for e in range(3):
        alone = GPT(cfg, [seeds[e]])
        for k, v in alone.state_dict().items():
            assert torch.equal(ens.state_dict()[k][e], v[0]), k
        torch.testing.assert_close(alone(tokens[e : e + 1]), out[e : e + 1].detach(), rtol=1e-5, atol=1e-6)

    # Gradients: perturbing member 0's input leaves the other members' gradients untouched.
    def grads(t):
        ens.zero_grad()
        next_token_loss(ens(t[..., :-1]), t[..., 1:]).sum().backward()
        return {n: p.grad.clone() for n, p in ens.named_parameters()}

    g0 = grads(tokens)
    t2 = tokens.clone()
    t2[0] = (t2[0] + 1) % cfg.vocab
    g1 = grads(t2)
    for n in g0:
        assert torch.equal(g0[n][1:], g1[n][1:]), n
    assert any(not torch.equal(g0[n][0], g1[n][0]) for n in g0)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(d=8, d_attn=6, heads=4), "d_attn=6 must be divisible by heads=4"),
        (dict(d=8, d_attn=4, out_proj=False), "d_attn=4 differs from d=8: needs out_proj=True"),
        (dict(init="local-to-global", mlp=False), "needs mlp=True"),
        (dict(init="gamma", positions="relative"), "rel_encoding='bias'"),
        (dict(d_attn=0), "d_attn"),
        (dict(d_ff=0), "d_ff"),
        (dict(init_gamma=-0.1), "init_gamma"),
        (dict(init_gamma=11.0), "init_gamma"),
        (dict(init_fan="both"), "init_fan"),
        (dict(norm="mid"), "norm"),
        (dict(activation="tanh"), "activation"),
        (dict(final_norm=1), "final_norm"),
        (dict(head_bias="yes"), "head_bias"),
        (dict(mlp=0), "mlp"),
    ],
)
def test_bad_new_options_name_the_field(kw, field):
    with pytest.raises(ValidationError) as info:
        GPTConfig(**kw)
    msg = str(info.value)
    assert field in msg
    if not field[0].isupper() and "=" not in field and " " not in field:  # a field error: pydantic's location
        assert any(err["loc"] and err["loc"][0] == field for err in info.value.errors()), msg


# --- existing configurations are unchanged ---------------------------------------------------------

# Recorded from src/tdlab/models/gpt.py at commit 57b60f7 (before the seed-001/003 options), by building
# each configuration with member_seeds(11, 2): sha256 over (state_dict key, float32 bytes) of every
# parameter, and the float64 forward pass on fixed tokens: sum of logits, a weighted sum, and the
# logits of member 1, sequence 1, last position.
PINNED_CONFIGS = {
    "sec2-default": dict(arch="sec2", d=8, max_len=16),
    "sec2-l2g-both-untied": dict(
        arch="sec2",
        d=8,
        max_len=16,
        heads=2,
        layers=2,
        positions="both",
        tie_weights=False,
        init="local-to-global",
        init_std=0.3,
    ),
    "sec2-relbias": dict(arch="sec2", d=4, max_len=16, positions="relative", init_std=0.5),
    "gpt2-tied": dict(arch="gpt2", vocab=5, d=8, heads=2, layers=2, max_len=16, init_std=0.3),
    "gpt2-relkv-untied": dict(
        arch="gpt2",
        vocab=3,
        d=8,
        heads=2,
        max_len=16,
        positions="relative",
        rel_encoding="kv",
        rel_clip=3,
        tie_weights=False,
        init_std=0.3,
    ),
    "gpt2-nooutproj-both-l2g": dict(
        arch="gpt2",
        vocab=2,
        d=6,
        heads=3,
        max_len=16,
        positions="both",
        out_proj=False,
        init="local-to-global",
        init_std=0.3,
    ),
}
PINNED = {
    "sec2-default": (
        "f1cf3592a88abb484b8ae9ab1d5d2675611f829c5d63ad9c21aa96d10e829d96",
        -0.504204383184286,
        -0.0281382911195484,
        [0.0, -0.010885947410591169],
    ),
    "sec2-l2g-both-untied": (
        "525001ad3c64a648294a244b30fc57569488c497e30a5886a603bd0ade0d8641",
        -57954.5589117968,
        1187.1080866344155,
        [0.0, -16.322827982736474],
    ),
    "sec2-relbias": (
        "28f0b6ae08a0b797d2bd239ca80488dc4c29900691289dd2d952a1b64999f8d4",
        -20.638778594080613,
        -4.469746946302944,
        [0.0, -0.6901529332198607],
    ),
    "gpt2-tied": (
        "1e2f3a6b38c99b749d08af32f3449125b3a98d2ced1ce89917ebe967a933abec",
        49.14477908650229,
        -6.105401742220086,
        [0.23525262941438335, 0.08195699599427542, -0.9465204253890224, -0.2917520220817369, 0.039899893403654685],
    ),
    "gpt2-relkv-untied": (
        "9a2c23d6b68cbac706f5934366d6e7f8a80b89e2f6ff00e9c610deaa1eda2fa5",
        0.3071166908130569,
        -33.27851486622815,
        [-0.9497975320442167, -1.798094211174239, 0.36711820414037],
    ),
    "gpt2-nooutproj-both-l2g": (
        "c254b4735fc84b81cc23dbdcccd32a17d467edfac68ef3cd18ebf91720c2b232",
        105.32927101313393,
        -31.021177072259476,
        [0.005295839238902783, 0.005295811464472],
    ),
}


@pytest.mark.parametrize("name", list(PINNED_CONFIGS))
def test_existing_configurations_give_the_recorded_parameters_and_outputs(name):
    """Parameters bit for bit (same draws in the same order, same names); outputs to float64 rounding
    (a BLAS may sum in another order on another machine; any change of the computation is O(1))."""
    cfg = GPTConfig(**PINNED_CONFIGS[name])
    model = GPT(cfg, member_seeds(11, 2))
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    digest, total, weighted, last = PINNED[name]
    assert h.hexdigest() == digest
    tokens = torch.randint(0, cfg.vocab, (2, 2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model.double()(tokens)
    w = torch.linspace(-1, 1, out.numel(), dtype=F64).reshape(out.shape)
    assert out.sum().item() == pytest.approx(total, rel=1e-12, abs=1e-12)
    assert (out * w).sum().item() == pytest.approx(weighted, rel=1e-12, abs=1e-12)
    torch.testing.assert_close(out[1, 1, -1], torch.tensor(last, dtype=F64), rtol=1e-12, atol=1e-14)


# --- seed 004 (real text): the bidirectional encoder option --------------------------------------


def _encoder(causal, **kw):
    cfg = GPTConfig(arch="gpt2", vocab=11, d=16, layers=2, heads=2, max_len=12, norm="post", causal=causal, **kw)
    return GPT(cfg, [3, 4]).double()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_bidirectional_encoder_sees_later_tokens_and_causal_does_not(norm):
    """causal=False: changing the last token changes the output at position 0; causal=True: positions before
    the change are untouched (to the last bit), the changed position itself moves."""
    x = torch.randint(0, 11, (2, 3, 8), generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[..., -1] = (y[..., -1] + 1) % 11
    for causal in (False, True):
        m = GPT(
            GPTConfig(arch="gpt2", vocab=11, d=16, layers=2, heads=2, max_len=12, norm=norm, causal=causal), [3, 4]
        ).double()
        a, b = m(x), m(y)
        if causal:
            assert torch.equal(a[..., :-1, :], b[..., :-1, :])
        else:
            assert (a[..., 0, :] - b[..., 0, :]).abs().amax(-1).min() > 1e-6  # every member and sequence
        assert (a[..., -1, :] - b[..., -1, :]).abs().max() > 1e-6


def test_bidirectional_attention_matches_a_slow_reference_with_key_mask():
    """The encoder's pattern is softmax(QK'/sqrt(dh)) over every unmasked key (no triangle); the SDPA path and
    the cached explicit path give the same outputs; a hidden key gets weight 0 and changing it changes nothing."""
    m = _encoder(False)
    x = torch.randint(0, 11, (2, 2, 7), generator=torch.Generator().manual_seed(2))
    keep = torch.ones(2, 2, 7, dtype=torch.bool)
    keep[:, 1, 5:] = False
    fast = m(x, key_mask=keep)
    with m.cache(["blocks.0.attn.pattern", "embed"]) as c:
        slow = m(x, key_mask=keep)
    torch.testing.assert_close(fast, slow)
    att = c["blocks.0.attn.pattern"]  # (E, B, H, T, T)
    h = c["embed"]
    blk = m.blocks[0].attn
    dh = 8
    for e in range(2):
        q = h[e] @ blk.W_Q.weight[e].T
        k = h[e] @ blk.W_K.weight[e].T
        for head in range(2):
            sl = slice(head * dh, (head + 1) * dh)
            s = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(dh)  # (B, T, T)
            s = s.masked_fill(~keep[e][:, None, :], float("-inf"))
            torch.testing.assert_close(att[e, :, head], s.softmax(-1))
    assert float(att[:, 1, :, :, 5:].abs().max()) == 0.0
    z = x.clone()
    z[:, 1, 5:] = (z[:, 1, 5:] + 3) % 11
    torch.testing.assert_close(m(z, key_mask=keep)[:, 1, :5], fast[:, 1, :5])


def test_queries_gather_the_output_layer_and_bad_encoder_options_are_refused():
    m = _encoder(False)
    x = torch.randint(0, 11, (2, 3, 9), generator=torch.Generator().manual_seed(5))
    full = m(x)
    q = torch.tensor([[2, 0], [8, 8], [1, 4]]).expand(2, 3, 2)
    got = m(x, queries=q)
    torch.testing.assert_close(got, torch.gather(full, 2, q.unsqueeze(-1).expand(2, 3, 2, 11)))
    with pytest.raises(ValueError, match="causal=False"):
        _encoder(True)(x, key_mask=torch.ones(2, 3, 9, dtype=torch.bool))
    with pytest.raises(ValidationError, match="causal"):
        GPTConfig(arch="gpt2", vocab=11, d=16, causal=False, positions="relative")
