"""The seed-004 topic-attention model (§3.3, Eqs. 5-7) against a per-column loop written from the
equations, ensemble semantics, frozen parts, hidden keys and config validation."""

import math

import pytest
import torch
from pydantic import ValidationError

from tdlab.models.topic_attention import TopicAttention, TopicModelConfig, thm1_bias

F64 = torch.float64


def reference_f(state: dict, cfg: TopicModelConfig, tokens: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """``f(X̃)`` of one member on one document, one column at a time, in the paper's column layout.

    ``state``: ``member_state(e)``; ``tokens``, ``visible``: ``(N,)``. Returns ``(N, V)`` (row j = column j).
    """
    V, N = cfg.vocab, tokens.shape[0]
    X = torch.zeros(V, N, dtype=F64)
    X[tokens, torch.arange(N)] = 1.0  # one-hot X̃
    W_E = state["W_E"]
    Z = W_E @ X  # d x N
    if cfg.authors_compat:  # LayerNorm(W^E X̃ + t) per column, eps 1e-12
        Z = Z + state["token_type"][:, None]
        mu = Z.mean(0, keepdim=True)
        var = ((Z - mu) ** 2).mean(0, keepdim=True)
        Z = (Z - mu) / torch.sqrt(var + 1e-12) * state["ln.weight"][:, None] + state["ln.bias"][:, None]
    zero = lambda n: torch.zeros(n, dtype=F64)  # noqa: E731
    b_K = state.get("b_K", zero(cfg.d_attn))
    b_Q = state.get("b_Q", zero(cfg.d_attn))
    b_V = state.get("b_V", zero(cfg.d_model))
    b_pred = state.get("b_pred", zero(V))
    out = torch.zeros(N, V, dtype=F64)
    for j in range(N):
        q = state["W_Q"] @ Z[:, j] + b_Q
        keys = [i for i in range(N) if visible[i]]
        s = torch.stack([(state["W_K"] @ Z[:, i] + b_K) @ q / math.sqrt(cfg.d_attn) for i in keys])
        a = torch.exp(s - s.max())
        a = a / a.sum()  # column softmax over the visible keys (Eq. 5)
        h = sum(a[k] * (state["W_V"] @ Z[:, i] + b_V) for k, i in enumerate(keys))
        out[j] = W_E.T @ h + b_pred  # Eq. 6 (W^E = I gives Eq. 7)
    return out


def docs(E, B, N, V, seed=0, pad=True):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (E, B, N), generator=g)
    visible = torch.ones(E, B, N, dtype=torch.bool)
    if pad:  # variable lengths: document b keeps N - b positions
        for b in range(B):
            visible[:, b, N - b :] = False
    return tokens, visible


@pytest.mark.parametrize(
    "kw",
    [
        dict(onehot=True),  # Eq. 7
        dict(onehot=True, bias_qk=False, bias_v=False, bias_pred=False),
        dict(d=5, d_a=3),  # Eq. 6 with trained W^E, d != V, d_a != d
        dict(d=6, authors_compat=True),
        dict(onehot=True, authors_compat=True),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
@pytest.mark.parametrize("N", [6, 11])  # V = 7 >= N: per-position path; V < N: keys merged by token
def test_forward_matches_per_column_loop(kw, N):
    cfg = TopicModelConfig(vocab=7, init_scale=0.7, **kw)
    model = TopicAttention(cfg, [3]).double()
    with torch.no_grad():  # nonzero biases and a non-trivial LayerNorm, so every term is exercised
        for name, p in model.named_parameters():
            if name.startswith("b_") or name.startswith("ln."):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name)), dtype=F64) * 0.5)
    tokens, visible = docs(1, 3, N, 7)
    out = model(tokens, visible)
    state = model.member_state(0)
    for b in range(3):
        ref = reference_f(state, cfg, tokens[0, b], visible[0, b])
        assert torch.allclose(out[0, b], ref, atol=1e-12, rtol=0)


def test_member_e_equals_single_model_with_seed_e():
    cfg = TopicModelConfig(vocab=11, d=6)
    seeds = [5, 17, 2]
    ens = TopicAttention(cfg, seeds)
    tokens, visible = docs(3, 4, 9, 11, seed=1)
    out = ens(tokens, visible)
    for e, s in enumerate(seeds):
        single = TopicAttention(cfg, [s])
        for k, v in single.member_state(0).items():
            assert torch.equal(v, ens.member_state(e)[k]), k
        assert torch.allclose(single(tokens[e : e + 1], visible[e : e + 1])[0], out[e], atol=1e-6, rtol=0)
    assert not torch.equal(ens.W_V[0], ens.W_V[1])  # members differ


def trained_and_frozen(model):
    return {n for n, _ in model.named_parameters()}, {n for n, _ in model.named_buffers()}


@pytest.mark.parametrize(
    "kw, wv, params, buffers",
    [
        (dict(onehot=True), None, {"W_K", "W_Q", "b_K", "b_Q", "W_V", "b_V", "b_pred"}, {"W_E"}),
        (dict(onehot=True, uniform_attn=True), None, {"W_V", "b_V", "b_pred"}, {"W_E", "W_K", "W_Q"}),
        (dict(uniform_attn=True, embed_only=True, bias_v=False), None, {"W_E"}, {"W_K", "W_Q", "W_V", "b_pred"}),
        (
            dict(onehot=True, frozen_wv="block", bias_v=False),
            "block",
            {"W_K", "W_Q", "b_K", "b_Q", "b_pred"},
            {"W_E", "W_V"},
        ),
        (
            dict(onehot=True, frozen_wv="diag", bias_v=False),
            "diag",
            {"W_K", "W_Q", "b_K", "b_Q", "b_pred"},
            {"W_E", "W_V"},
        ),
    ],
)
def test_frozen_parts_are_buffers_and_never_move(kw, wv, params, buffers):
    V, E = 7, 2
    topic = (torch.arange(V) - 1).clamp_min(0) // 3
    block = (
        (topic[:, None] == topic[None, :]) & (torch.arange(V)[:, None] > 0) & (torch.arange(V)[None, :] > 0)
    ).float()
    matrix = {"block": 0.3 * block, "diag": torch.diag(torch.arange(V, dtype=torch.float32)), None: None}[wv]
    model = TopicAttention(TopicModelConfig(vocab=V, **kw), list(range(E)), wv=matrix)
    assert trained_and_frozen(model) == (params, buffers)
    before = {n: b.clone() for n, b in model.named_buffers()}
    tokens, visible = docs(E, 3, 5, V)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, weight_decay=0.1)
    model(tokens, visible).pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    opt.step()
    for n, b in model.named_buffers():
        assert not b.requires_grad and torch.equal(b, before[n]), n
    if wv is not None:
        assert torch.equal(model.W_V[1], matrix)
    if kw.get("embed_only"):
        assert torch.equal(model.W_V[0], torch.eye(V))
        assert torch.allclose(model.b_pred, torch.full((E, V), thm1_bias(V, 0.15, 0.1, 0.1)))


def test_thm1_bias_at_paper_settings():
    # -p_m p_r / ((1 - (1 - p_c) p_m) T v) with T = v = 10: -0.015 / (0.865 * 100).
    assert thm1_bias(101, 0.15, 0.1, 0.1) == pytest.approx(-1.7341040462427746e-4, rel=1e-12)
    assert TopicModelConfig().b_pred_thm1 == pytest.approx(-1.7341040462427746e-4, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(onehot=True), dict(d=5), dict(onehot=True, uniform_attn=True)])
@pytest.mark.parametrize("N, keep", [(8, 5), (16, 12)])  # V = 9 >= N, and V < N
def test_hidden_keys_get_zero_attention_and_match_the_truncated_document(kw, N, keep):
    V = 9
    model = TopicAttention(TopicModelConfig(vocab=V, init_scale=0.5, **kw), [0, 1]).double()
    tokens, _ = docs(2, 3, N, V, seed=4, pad=False)
    visible = torch.zeros(2, 3, N, dtype=torch.bool)
    visible[..., :keep] = True
    out, cache = model.run_with_cache(tokens, key_mask=visible, names=["attn.pattern"])
    A = cache["attn.pattern"]
    assert torch.all(A[..., keep:, :] == 0)  # hidden keys: exactly zero, every query
    assert torch.allclose(A.sum(-2), torch.ones(2, 3, N, dtype=F64), atol=1e-12)  # columns sum to one
    short = model(tokens[..., :keep])  # the same documents without the hidden tail
    assert torch.allclose(out[..., :keep, :], short, atol=1e-12, rtol=0)
    # Changing the hidden tokens changes nothing at the visible positions.
    other = tokens.clone()
    other[..., keep:] = (other[..., keep:] + 1) % V
    assert torch.allclose(model(other, visible)[..., :keep, :], out[..., :keep, :], atol=1e-12, rtol=0)


def test_uniform_attention_is_one_over_visible_length():
    model = TopicAttention(TopicModelConfig(vocab=7, onehot=True, uniform_attn=True), [0])
    tokens, visible = docs(1, 3, 6, 7)
    _, cache = model.run_with_cache(tokens, key_mask=visible)
    A = cache["attn.pattern"][0]
    for b in range(3):
        n = int(visible[0, b].sum())
        expect = torch.zeros(6, 6)
        expect[:n, :] = 1.0 / n
        assert torch.allclose(A[b], expect)


@pytest.mark.parametrize("N", [5, 12])
def test_document_with_no_visible_key_is_finite(N):
    model = TopicAttention(TopicModelConfig(vocab=7), [0])
    tokens, visible = docs(1, 2, N, 7, pad=False)
    visible[0, 1] = False
    out = model(tokens, visible)
    assert torch.isfinite(out).all()
    # zero attention: f = W^Eᵀ b^V + b^pred at every position (both start at zero in the normal init)
    assert torch.allclose(out[0, 1], torch.zeros(N, 7))
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("init", ["normal", "uniform", "pytorch"])
def test_initialisation_schemes(init):
    s, d = 0.05, 40
    model = TopicAttention(TopicModelConfig(vocab=d, init=init, init_scale=s), [0, 1])
    W = torch.cat([model.W_K.flatten(), model.W_Q.flatten(), model.W_V.flatten()])
    if init == "uniform":  # U[0, s): the authors' near-zero init
        assert W.min() >= 0 and W.max() < s and abs(W.mean().item() - s / 2) < 0.02 * s
        assert torch.all(model.b_V == 0) and torch.all(model.b_K == 0)
    elif init == "normal":
        assert abs(W.std().item() - s) < 0.02 * s and torch.all(model.b_V == 0)
    else:  # nn.Linear: U(±1/sqrt(d)), biases too; nn.Embedding: N(0, 1)
        bound = 1 / math.sqrt(d)
        assert W.abs().max() <= bound and abs(W.std().item() - bound / math.sqrt(3)) < 0.03 * bound
        assert model.b_V.abs().max() <= bound and model.b_V.abs().max() > 0
        assert abs(model.W_E.std().item() - 1.0) < 0.03
    assert torch.all(model.b_pred == 0)


def test_authors_compat_defaults_to_pytorch_init_and_has_token_type_and_layernorm():
    cfg = TopicModelConfig(vocab=7, onehot=True, authors_compat=True)
    assert cfg.init_scheme == "pytorch" and TopicModelConfig(vocab=7).init_scheme == "normal"
    assert TopicModelConfig(vocab=7, authors_compat=True, init="uniform").init_scheme == "uniform"
    params, buffers = trained_and_frozen(TopicAttention(cfg, [0]))
    assert {"token_type", "ln.weight", "ln.bias"} <= params and buffers == {"W_E"}


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(onehot=True, d=50), "d"),
        (dict(vocab=1), "vocab"),
        (dict(d=0), "d"),
        (dict(p_c=0.6, p_r=0.5), "p_r"),
        (dict(p_m=0.0), "p_m"),
        (dict(init_scale=0.0), "init_scale"),
        (dict(init="xavier"), "init"),
        (dict(frozen_wv="full"), "frozen_wv"),
        (dict(embed_only=True, bias_v=False), "uniform_attn"),
        (dict(embed_only=True, uniform_attn=True), "bias_v"),
        (dict(embed_only=True, uniform_attn=True, bias_v=False, onehot=True), "embed_only"),
        (dict(embed_only=True, uniform_attn=True, bias_v=False, bias_pred=False), "bias_pred"),
        (dict(embed_only=True, uniform_attn=True, bias_v=False, frozen_wv="block"), "frozen_wv"),
        (dict(onehot=1), "onehot"),
        (dict(width=3), "width"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValidationError) as err:
        TopicModelConfig(**kw)
    assert field in str(err.value)


def test_bad_frozen_value_matrix_is_refused():
    with pytest.raises(ValueError, match="wv"):
        TopicAttention(TopicModelConfig(vocab=5, onehot=True, frozen_wv="block"), [0])  # no matrix
    with pytest.raises(ValueError, match="diagonal"):
        TopicAttention(TopicModelConfig(vocab=5, onehot=True, frozen_wv="diag"), [0], wv=torch.ones(5, 5))
    with pytest.raises(ValueError, match="shape"):
        TopicAttention(TopicModelConfig(vocab=5, onehot=True, frozen_wv="block"), [0], wv=torch.ones(4, 4))
    with pytest.raises(ValueError, match="frozen_wv is unset"):
        TopicAttention(TopicModelConfig(vocab=5, onehot=True), [0], wv=torch.eye(5))
    with pytest.raises(ValueError, match="members"):
        TopicAttention(TopicModelConfig(vocab=5), [0, 1])(torch.zeros(3, 1, 4, dtype=torch.long))


@pytest.mark.parametrize("kw", [dict(d=5), dict(onehot=True, uniform_attn=True)])
def test_recorded_activations_reproduce_the_output(kw):
    # Per-position activations (built for the cache) against the output of the fast path (V < N here).
    cfg = TopicModelConfig(vocab=7, init_scale=0.5, **kw)
    model = TopicAttention(cfg, [0, 1]).double()
    tokens, visible = docs(2, 3, 12, 7, seed=2)
    out, c = model.run_with_cache(tokens, key_mask=visible)
    A, Z = c["attn.pattern"], c["embed"]
    assert A.shape == (2, 3, 12, 12) and torch.allclose(A.sum(-2), torch.ones(2, 3, 12, dtype=F64))
    assert torch.all(A[~visible[..., :, None].expand_as(A)] == 0)
    values = Z @ model.W_V.transpose(1, 2)[:, None] + model.b_V[:, None, None, :]
    assert torch.allclose(c["attn.values"], values, atol=1e-12)
    assert torch.allclose(c["attn.out"], A.transpose(-1, -2) @ values, atol=1e-12)
    W_E = model.W_E.detach()
    assert torch.allclose(out, c["attn.out"] @ W_E[:, None] + model.b_pred[:, None, None, :], atol=1e-12)
    assert torch.equal(c["out"], out)
