"""Context-matching probe (seed 003 Part II): mask against brute force, scores on hand-built patterns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.attention import (
    AttentionWeightProbe,
    attention_patterns,
    average_operator_error,
    context_match_mask,
    context_matching_score,
    median_average_operator_error,
    plot_attention_maps,
    wv_flow,
)
from tdlab.probes.spectrum import wv_spectrum

X = [0, 1, 1, 0, 1, 1, 0]


def brute_mask(x: list[int], k: int) -> torch.Tensor:
    T = len(x)
    m = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        for i in range(k, t + 1):
            if t - k + 1 >= 0 and x[i - k : i] == x[t - k + 1 : t + 1]:
                m[t, i] = True
    return m


@pytest.mark.parametrize("k", [1, 2, 3])
def test_mask_matches_brute_force(k):
    g = torch.Generator().manual_seed(k)
    for x in [X, torch.randint(0, 2, (40,), generator=g).tolist(), torch.randint(0, 3, (30,), generator=g).tolist()]:
        V = max(x) + 1 if max(x) > 1 else 2
        assert torch.equal(context_match_mask(torch.tensor(x), k, V), brute_mask(x, k))


def test_mask_by_hand_k1():
    m = context_match_mask(torch.tensor(X), 1)
    # query t=4 (x_4 = 1): keys i with x_{i-1} = 1 among 1..4 are i = 2 (x_1 = 1) and i = 3 (x_2 = 1)
    assert m[4].nonzero().flatten().tolist() == [2, 3]
    assert m[6].nonzero().flatten().tolist() == [1, 4]  # x_6 = 0: x_0 = 0 and x_3 = 0
    assert not m[1].any()  # x_1 = 1 has no earlier context 1 followed by a token


def test_score_on_hand_built_patterns_is_exact():
    x = torch.tensor(X)
    T = len(X)
    m = brute_mask(X, 1)
    rows = [t for t in range(T) if m[t].any()]  # 2, 3, 4, 5, 6
    assert rows == [2, 3, 4, 5, 6]
    # Uniform causal attention: score = chance = mean of #matches/(t+1).
    uni = torch.tril(torch.ones(T, T, dtype=torch.float64))
    uni = uni / uni.sum(-1, keepdim=True)
    score, chance = context_matching_score(uni, x, 1)
    want = (1 / 3 + 1 / 4 + 2 / 5 + 3 / 6 + 2 / 7) / 5
    assert math.isclose(float(chance), want, rel_tol=1e-12) and math.isclose(float(score), want, rel_tol=1e-12)
    # An ideal induction head: all mass on the latest matching key -> 1.
    ind = torch.zeros(T, T)
    for t in range(T):
        ind[t, int(m[t].nonzero().max()) if m[t].any() else t] = 1.0
    score, _ = context_matching_score(ind, x, 1)
    assert float(score) == 1.0
    # Half on the diagonal, half on key 0 (never a match for k = 1): the diagonal key t matches
    # when x_{t-1} = x_t, at t = 2 and t = 5 of the 5 rows with a match: (0.5 + 0.5) / 5.
    half = 0.5 * torch.eye(T, dtype=torch.float64)
    half[:, 0] += 0.5
    score, _ = context_matching_score(half, x, 1)
    assert math.isclose(float(score), 1.0 / 5, rel_tol=1e-12)


def test_score_keeps_member_dims_and_broadcasts_heads():
    E, B, H, T = 2, 3, 2, 12
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (E, B, T), generator=g)
    att = torch.rand(E, B, H, T, T, generator=g).tril()
    att = att / att.sum(-1, keepdim=True)
    score, chance = context_matching_score(att, x[:, :, None, :], 2, keep_dims=1)
    assert score.shape == chance.shape == (E,)
    for e in range(E):  # member e's value equals the score of its slice alone
        s_e, c_e = context_matching_score(att[e], x[e][:, None, :], 2)
        assert math.isclose(float(score[e]), float(s_e), rel_tol=1e-12)
        assert math.isclose(float(chance[e]), float(c_e), rel_tol=1e-12)


def test_patterns_from_a_model_and_the_figure():
    m = GPT(GPTConfig(arch="gpt2", d=8, layers=2, max_len=16, positions="relative"), [0, 1])
    x = torch.randint(0, 2, (2, 3, 16))
    pats = attention_patterns(m, x)
    assert len(pats) == 2 and pats[0].shape == (2, 3, 1, 16, 16)
    torch.testing.assert_close(pats[1].sum(-1), torch.ones(2, 3, 1, 16))
    fig = plot_attention_maps(
        [p[0, 0, 0] for p in pats], x[0, 0].tolist(), ["layer 0", "layer 1"], context_match_mask(x[0, 0], 1)
    )
    assert len(fig.axes) >= 2


def test_score_needs_a_match():
    with pytest.raises(ValueError):
        context_matching_score(torch.eye(3), torch.tensor([0, 1, 0]), 2)
    with pytest.raises(ValueError):
        context_match_mask(torch.tensor([0, 1]), 0)


def test_average_operator_error_on_built_matrices():
    T = 4
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64)) / torch.arange(1, T + 1)[:, None]
    assert torch.allclose(average_operator_error(uniform), torch.zeros(2 + 3 + 4, dtype=torch.float64))
    one_hot = torch.eye(T)  # each row attends to itself only
    err = average_operator_error(one_hot[None])
    want = []
    for j in range(2, T + 1):  # 1-based rows j >= 2, k <= j
        for k in range(1, j + 1):
            want.append(abs((1.0 if k == j else 0.0) - 1 / j) * j)
    assert err.shape == (1, 9) and torch.allclose(err[0], torch.tensor(want, dtype=torch.float64))


def test_wv_flow_is_the_spectrum_of_each_members_own_gradient(one_thread, anchors_gpt):
    model = anchors_gpt(0.8, [3, 4])
    g = torch.Generator().manual_seed(5)
    tokens, labels = torch.randint(1, 31, (2, 6, 9), generator=g), torch.randint(21, 60, (2, 6), generator=g)
    emb = model.wte.detach()
    rsn, mem = slice(11, 21), slice(1, 11)
    got = wv_flow(model, tokens, labels, emb, rsn, mem)
    assert all(p.grad is None or not bool(p.grad.any()) for p in model.parameters())  # gradients cleared after
    flows = []
    for e, seed in enumerate((3, 4)):  # each member alone: its mean last-position cross-entropy, differentiated
        alone = anchors_gpt(0.8, [seed])
        F.cross_entropy(alone(tokens[e : e + 1])[0, :, -1], labels[e]).backward()
        flows.append(-alone.blocks[0].attn.W_V.weight.grad[0])
    want = wv_spectrum(torch.stack(flows), emb, rsn, mem)
    for k in ("sv_ratio", "rsn_align", "mem_align"):
        assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), k


def test_weight_probe_rotation_matches_the_closed_form_and_restarts_per_model():
    """W^V_t = cos(ωt) A + sin(ωt) B with orthonormal A, B (as vectors): cos(W_t, W_{t-lag}) = cos(ω lag), so the
    rotation is (1 − cos(ω lag))/2 from step lag on; norms are 1 for W^V and the planted ones for W^K, W^Q."""
    cfg = GPTConfig(arch="gpt2", vocab=7, d=4, layers=2, heads=2, max_len=8, causal=False)
    model = GPT(cfg, [1, 2]).double()
    A = torch.zeros(16, dtype=torch.float64)
    A[0] = 1.0
    B = torch.zeros(16, dtype=torch.float64)
    B[5] = 1.0
    w, lag = 0.07, 3
    probe = AttentionWeightProbe(lag)
    out = []
    for t in range(6):
        with torch.no_grad():
            for blk in model.blocks:
                blk.attn.W_V.weight[:] = (math.cos(w * t) * A + math.sin(w * t) * B).reshape(4, 4)
                blk.attn.W_K.weight[:] = 2.0 * torch.eye(4)
        out.append(probe(model))
    assert "rotation_V/L0" not in out[lag - 1] and "rotation_V/L1" in out[lag]
    np.testing.assert_allclose(out[lag]["rotation_V/L1"].numpy(), (1 - math.cos(w * lag)) / 2, rtol=1e-9)
    np.testing.assert_allclose(out[5]["norm_V/L0"].numpy(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[5]["norm_K/L1"].numpy(), 4.0, rtol=1e-6)  # ‖2 I_4‖_F
    assert "rotation_V/L0" not in probe(GPT(cfg, [1, 2]))  # a new model (chunk): the history restarts


def test_median_average_operator_error_is_each_members_median_over_all_its_entries():
    g = torch.Generator().manual_seed(0)
    pattern = torch.softmax(torch.randn(3, 5, 4, 4, generator=g), -1)  # (E, B, T, T)
    got = median_average_operator_error(pattern)
    for e in range(3):
        entries = torch.cat([average_operator_error(pattern[e, b]) for b in range(5)])  # a slow loop per matrix
        assert float(got[e]) == float(entries.median())
    assert got.shape == (3,) and got.dtype == torch.float64
