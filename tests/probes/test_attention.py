"""Context-matching probe (seed 003 Part II): mask against brute force, scores on hand-built patterns."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.attention import attention_patterns, context_match_mask, context_matching_score, plot_attention_maps

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
