"""Emb-MLP (Def. 1) and the Def. 2 model of seed 001: members are independent models, the forward
pass against a literal per-sequence implementation, γ-init per parameter kind, and Props. 1–3: at
γ = 2 the autograd gradient of w^{emb,s} matches Eq. 20 (Emb-MLP) and Eq. 28 (Def. 2)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from tdlab.models.emb_mlp import Def2Config, Def2Transformer, EmbMLP, EmbMLPConfig, def2_paper_matrices
from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.theory.anchors import eq20_embedding_flow, eq28_embedding_flow

F64 = torch.float64
SMALL = EmbMLPConfig(d_m=16, d_f=24, vocab=200, gamma=0.5)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def test_members_equal_single_models():
    gammas = [0.3, 0.5, 0.8]
    ens = EmbMLP(SMALL, [4, 5, 6], gammas)
    tok = torch.randint(0, 200, (3, 7, 3), generator=torch.Generator().manual_seed(0))
    out = ens(tok)
    assert out.shape == (3, 7, 200)
    for e in range(3):
        one = EmbMLP(SMALL, [[4, 5, 6][e]], [gammas[e]])
        for k, v in one.member_state(0).items():
            assert torch.equal(v, ens.member_state(e)[k])
        assert torch.allclose(one(tok[e : e + 1])[0], out[e], atol=1e-6)


def test_forward_matches_def1_literally():
    m = EmbMLP(SMALL, [1])
    st = {k: v.double() for k, v in m.member_state(0).items()}
    W_emb, W1, W2 = st["W_emb"], st["W_1.weight"].T, st["W_2.weight"].T  # paper: W^(1) (d_m, d_f), W^(2) (d_f, V)
    tok = torch.randint(0, 200, (1, 5, 3), generator=torch.Generator().manual_seed(1))
    got = m.double()(tok)[0]
    for b in range(5):
        pooled = sum(W_emb[int(s)] for s in tok[0, b])  # Σ_{s in X} w^{emb,s}
        want = torch.tanh(pooled @ W1) @ W2  # G(X) = σ(Σ w W^(1)) W^(2)
        assert torch.allclose(got[b], want, atol=1e-12)
    with m.cache() as c:
        m(tok)
    assert set(c) == {"embed", "pooled", "hidden.pre", "hidden"} and c["pooled"].shape == (1, 5, 16)


@pytest.mark.parametrize("fan", ["out", "in"])
def test_gamma_init_std_per_parameter_kind(fan):
    cfg = EmbMLPConfig(fan=fan)  # A.3 widths: vocab 200, d_m 200, d_f 512
    m = EmbMLP(cfg, [0, 1], [0.5, 0.8])
    # (parameter, output width, input width) in the paper's sense
    kinds = [(m.W_emb, 200, 200), (m.W_1.weight, 512, 200), (m.W_2.weight, 200, 512)]
    for e, g in enumerate([0.5, 0.8]):
        for w, d_out, d_in in kinds:
            want = (d_out if fan == "out" else d_in) ** -g
            assert float(w[e].detach().std()) == pytest.approx(want, rel=0.02)
    d2 = Def2Transformer(Def2Config(d_k=64, d_f=512, fan=fan, gamma=0.8), [3])
    for name, d_out, d_in in [
        ("W_Q", 64, 200),
        ("W_V", 64, 200),
        ("W_O", 200, 64),
        ("W_f1", 512, 200),
        ("W_f2", 200, 512),
    ]:
        want = (d_out if fan == "out" else d_in) ** -0.8
        assert float(getattr(d2, name).weight[0].detach().std()) == pytest.approx(want, rel=0.02)
    assert float(d2.W_emb[0].detach().std()) == pytest.approx(200**-0.8, rel=0.02)


def _label_counts(tokens: torch.Tensor, labels: torch.Tensor, s: int, V: int) -> tuple[torch.Tensor, int]:
    """Σ over sequences containing s (with multiplicity) of one-hot labels, and that count."""
    mult = (tokens == s).sum(1)
    counts = torch.zeros(V, dtype=F64).index_add_(0, labels, mult.to(F64))
    return counts, int(mult.sum())


def test_eq20_gradient_at_small_init():
    task = Anchors(AnchorsConfig(L=3))  # the Emb-MLP task: [z, a1, a2]
    data = task.dataset(torch.Generator().manual_seed(0), 1500)
    m = EmbMLP(EmbMLPConfig(gamma=2.0), [7]).double()
    tok, y = data["tokens"], data["label"]
    loss = F.cross_entropy(m(tok[None])[0], y)  # mean over n sequences
    loss.backward()
    W1, W2 = m.W_1.weight[0].detach().T, m.W_2.weight[0].detach().T
    for s in (1, 5, 11, 15, 20, 21, 77, 120):
        counts, n_s = _label_counts(tok, y, s, 200)
        flow = eq20_embedding_flow(counts, n_s, len(y), W1, W2)
        assert _cos(-m.W_emb.grad[0, s], flow) >= 0.999


def test_eq28_gradient_at_small_init():
    # Anchors never last (p_max = L - q - 1): their gradient comes only from the attention term of
    # Eq. 28, (1/L)(y - 1/d_m)(W^VO W^f + W^VO)^T; keys also sit last (the residual term).
    cfg = AnchorsConfig(p_max=6)
    data = Anchors(cfg).dataset(torch.Generator().manual_seed(1), 1200)
    m = Def2Transformer(Def2Config(d_k=32, d_f=64, gamma=2.0), [2]).double()
    tok, y = data["tokens"], data["label"]
    F.cross_entropy(m(tok[None])[0], y).backward()
    st = {k: v.double() for k, v in m.member_state(0).items()}
    W_VO = st["W_V.weight"].T @ st["W_O.weight"].T
    W_f = st["W_f1.weight"].T @ st["W_f2.weight"].T
    last = tok[:, -1]
    for s in (3, 11, 14, 20, 21, 60, 120):
        ca, na = _label_counts(tok, y, s, 200)
        cl = torch.zeros(200, dtype=F64).index_add_(0, y, (last == s).to(F64))
        flow = eq28_embedding_flow(ca, na, cl, int((last == s).sum()), len(y), cfg.L, W_VO, W_f)
        assert _cos(-m.W_emb.grad[0, s], flow) >= 0.999


def test_def2_forward_literal_and_lemma1():
    m = Def2Transformer(Def2Config(vocab=50, d_m=50, d_k=8, d_f=12, gamma=0.3), [0]).double()
    tok = torch.randint(0, 50, (1, 4, 6), generator=torch.Generator().manual_seed(2))
    st = m.member_state(0)
    got = m(tok)[0]
    for b in range(4):
        X = st["W_emb"][tok[0, b]]  # (L, d_m)
        S = (X @ st["W_Q.weight"].T) @ (X @ st["W_K.weight"].T).T / math.sqrt(8)
        a = torch.softmax(S[-1], 0)  # last row, causal mask is void there
        u = (a @ X) @ st["W_V.weight"].T @ st["W_O.weight"].T + X[-1]
        want = torch.tanh(u @ st["W_f1.weight"].T) @ st["W_f2.weight"].T + u
        assert torch.allclose(got[b], want, atol=1e-12)
    # Lemma 1 at γ = 2: the attention at init is 1/j on row j
    small = Def2Transformer(Def2Config(gamma=2.0, d_k=64, d_f=64), [1])
    _, c = small.run_with_cache(tok, names=["attn.pattern"])
    A = c["attn.pattern"][0]
    j = torch.arange(1, 7, dtype=A.dtype)[:, None]
    assert torch.allclose(A, torch.ones(6, 6).tril() / j, atol=1e-3)


def test_def2_paper_matrices_are_the_models_maps_as_row_vectors():
    # y = x W in the paper's layout is the model's own linear map applied to x (torch stores W transposed)
    m = Def2Transformer(Def2Config(vocab=50, d_m=50, d_k=8, d_f=12, gamma=0.3), [0, 1]).double()
    x = torch.randn(2, 5, 50, generator=torch.Generator().manual_seed(4), dtype=F64)  # (E, n, d_m)
    with torch.no_grad():
        v, o = m.W_V(x), m.W_O(m.W_V(x))
        f = m.W_f2(m.W_f1(x))
    for e in range(2):
        P = def2_paper_matrices(m.member_state(e))
        assert P["W_emb"].dtype == F64 and torch.equal(P["W_emb"], m.W_emb[e].detach())
        assert P["W_V"].shape == (50, 8) and P["W_O"].shape == (8, 50) and P["W2"].shape == (50, 8)
        assert torch.allclose(x[e] @ P["W_V"], v[e], atol=1e-12)
        assert torch.allclose(x[e] @ P["W_VO"], o[e], atol=1e-12)
        assert torch.allclose(x[e] @ P["W_f"], f[e], atol=1e-12)
        # W2 = (W^O W^f + W^O)ᵀ: a d_k-vector z goes to z W^O (W^f + I), the output the value path adds to u
        z = torch.randn(3, 8, generator=torch.Generator().manual_seed(e), dtype=F64)
        with torch.no_grad():
            zo = z @ m.W_O.weight[e].T
            want = zo @ m.W_f1.weight[e].T @ m.W_f2.weight[e].T + zo
        assert torch.allclose(z @ P["W2"].T, want, atol=1e-12)


def test_bad_input():
    with pytest.raises(ValidationError, match="d_m"):
        Def2Config(vocab=200, d_m=100)
    with pytest.raises(ValidationError, match="gamma"):
        EmbMLPConfig(gamma=-1.0)
    m = EmbMLP(SMALL, [0, 1])
    with pytest.raises(ValueError, match="members"):
        m(torch.zeros(3, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="shape"):
        m(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="gammas"):
        EmbMLP(SMALL, [0, 1], [0.5])
