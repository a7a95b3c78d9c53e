"""The ensemble-first GPT: members are independent models; Sec. 2 forward against a slow literal
implementation of the seed's equations; inits; activation cache."""

from __future__ import annotations

import math

import pytest
import torch

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
    e, b = st["e"], st["b"]
    a = e if cfg.tie_weights else st["a"]
    H, dh = cfg.heads, cfg.d // cfg.heads
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
                    val = lambda i: (WV @ xs[i])[sl] + (st[p + "attn.rel_v"][min(n - i, cfg.rel_clip)]  # noqa: E731
                                                        if p + "attn.rel_v" in st else 0.0)
                    heads.append(sum((w[i] / Z) * val(i) for i in range(n + 1)))
                att = torch.cat(heads)
                if p + "attn.W_O.weight" in st:
                    att = st[p + "attn.W_O.weight"] @ att
                ys.append(xs[n] + att)
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
    assert {"embed", "blocks.0.out", "blocks.0.mlp.pre", "final"} <= set(cache)
    assert not out.requires_grad
    # Only named activations when asked for; nothing cached outside the block.
    _, few = model.run_with_cache(tokens, names=["final"])
    assert set(few) == {"final"}
    assert model._cache is None


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
    cfg = GPTConfig(arch="gpt2", d=8, heads=2, max_len=16, positions="relative", rel_encoding="kv", rel_clip=3, init_std=0.5)
    model = GPT(cfg, seeds)
    attn = model.blocks[0].attn
    assert model.wpe is None and attn.rel_bias is None
    assert attn.rel_k.shape == attn.rel_v.shape == (3, 4, 4)  # (E, rel_clip + 1, d_h): shared across heads
    tokens = _tokens(3, 2, 12)
    out = model(tokens)
    # Member i of the ensemble is the model built from seed i alone (the member axis is respected).
    for i in range(3):
        alone = GPT(cfg, seeds[i:i + 1])
        torch.testing.assert_close(alone(tokens[i:i + 1]), out[i:i + 1].detach())
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
    assert bool((attn.rel_k.grad.abs().sum(dim=(1, 2)) > 0).all()) and bool((attn.rel_v.grad.abs().sum(dim=(1, 2)) > 0).all())


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
