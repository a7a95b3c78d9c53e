"""Def. 3 (p, q)-cliffs on hand-made rows, and Thm. 3: softmax(C·l) of a cliff puts mass 1 on [p, p+q]; the readings
of a trained model: layer 2's scores against the model's own attention and a slow loop, App. E.2's value tags
term by term, and the variance share an anchor pair explains."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tdlab.probes.cliffs import (
    is_cliff,
    layer2_readings,
    layer2_rows,
    pair_share,
    value_tag_readings,
    value_tags,
    window_mass,
)
from tdlab.probes.embedding import spearman_rows


def _slow_is_cliff(scores: list[float], p: int, q: int) -> bool:
    """Def. 3 written out with 1-based indices (p = 1: no plateau lower bound)."""
    L = len(scores)
    x = {i + 1: v for i, v in enumerate(scores)}
    inc = all(x[i + 1] > x[i] for i in range(1, p))
    lo = (x[p - 1] + x[p]) / 2 if p >= 2 else -float("inf")
    plat = all(lo <= x[i] <= x[p] for i in range(p + 1, p + q + 1))
    desc = all(x[i] < x[1] for i in range(p + q + 1, L + 1))
    return inc and plat and desc


def test_hand_made_rows():
    # L = 7, key at p = 3, anchors 4..5: rising 1 < 2 < 4, plateau in [3, 4], tail below l_1 = 1
    good = [1.0, 2.0, 4.0, 3.5, 3.0, 0.5, -1.0]
    assert bool(is_cliff(torch.tensor(good), 3, 2))
    # each condition broken on its own
    assert not bool(is_cliff(torch.tensor([2.0, 1.0, 4.0, 3.5, 3.0, 0.5, -1.0]), 3, 2))  # not increasing
    assert not bool(is_cliff(torch.tensor([1.0, 2.0, 4.0, 4.5, 3.0, 0.5, -1.0]), 3, 2))  # plateau above l_p
    assert not bool(
        is_cliff(torch.tensor([1.0, 2.0, 4.0, 3.5, 2.9, 0.5, -1.0]), 3, 2)
    )  # plateau below (l_2 + l_3)/2 = 3
    assert not bool(is_cliff(torch.tensor([1.0, 2.0, 4.0, 3.5, 3.0, 1.0, -1.0]), 3, 2))  # tail not below l_1
    # the plateau's lower bound is inclusive: (l_{p-1} + l_p)/2 itself is allowed
    assert bool(is_cliff(torch.tensor([1.0, 2.0, 4.0, 3.0, 3.0, 0.5, -1.0]), 3, 2))
    # anchors at the end (p = L - q): no tail; p = 1: no rise and no lower bound
    assert bool(is_cliff(torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0, 4.0, 4.5]), 5, 2))
    assert bool(is_cliff(torch.tensor([3.0, -5.0, 2.0, 0.0, 1.0]), 1, 2))
    assert not bool(is_cliff(torch.tensor([3.0, -5.0, 2.0, 4.0, 1.0]), 1, 2))  # tail above l_1


def test_vectorised_matches_the_definition_written_out():
    g = torch.Generator().manual_seed(0)
    L, q = 6, 2
    rows, ps = [], []
    for _ in range(400):
        p = int(torch.randint(1, L - q + 1, (1,), generator=g))
        base = torch.randint(-3, 4, (L,), generator=g).double()
        rows.append(base)
        ps.append(p)
    # plus rows built to be cliffs (so both outcomes occur)
    for p in range(1, L - q + 1):
        row = [float(i) for i in range(1, p + 1)] + [p - 0.2] * q + [0.0] * (L - p - q)
        rows.append(torch.tensor(row, dtype=torch.float64))
        ps.append(p)
    X, P = torch.stack(rows), torch.tensor(ps)
    got = is_cliff(X, P, q)
    want = torch.tensor([_slow_is_cliff(r.tolist(), p, q) for r, p in zip(rows, ps, strict=True)])
    assert torch.equal(got, want)
    assert bool(want.any()) and not bool(want.all())


@pytest.mark.parametrize("p,q,L", [(3, 2, 9), (1, 2, 9), (7, 2, 9), (4, 3, 8)])
def test_theorem3_softmax_of_a_scaled_cliff_concentrates_on_the_window(p, q, L):
    # a cliff: rising to the key, plateau just below it, tail below l_1
    scores = torch.tensor(
        [float(i) for i in range(1, p + 1)] + [p - 0.25] * q + [0.5] * (L - p - q), dtype=torch.float64
    )
    assert bool(is_cliff(scores, p, q))
    masses = [float(window_mass(C * scores, p, q)) for C in (1.0, 4.0, 16.0, 64.0)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(masses))  # grows with C
    assert masses[-1] == pytest.approx(1.0, abs=1e-6)
    # closed form of the mass at C = 1
    w = torch.softmax(scores, 0)
    assert masses[0] == pytest.approx(float(w[p - 1 : p + q].sum()), abs=1e-12)


def test_bad_positions_are_refused():
    with pytest.raises(ValueError, match="1 <= p <= L - q"):
        is_cliff(torch.zeros(5), 4, 2)
    with pytest.raises(ValueError, match="1 <= p"):
        window_mass(torch.zeros(5), 0, 2)


def test_layer2_scores_are_the_models_attention_and_positional_scores_a_slow_loop(one_thread, anchors_gpt):
    model = anchors_gpt(0.1, [3, 4])  # large init: a peaked attention
    tokens = torch.randint(21, 31, (2, 5, 9), generator=torch.Generator().manual_seed(1))
    r = layer2_rows(model, tokens)
    assert torch.allclose(torch.softmax(r["scores"], -1), r["pattern"], atol=1e-6)
    _, cache = model.run_with_cache(tokens, names=["blocks.0.out"])
    x = cache["blocks.0.out"]
    e, b = 1, 3
    Wq, Wk = model.blocks[1].attn.W_Q.weight[e].detach(), model.blocks[1].attn.W_K.weight[e].detach()
    q = Wq @ x[e, b, -1]
    for t in range(8):
        slow = float(q @ (Wk @ model.wpe[e, t].detach())) / math.sqrt(4)
        assert float(r["pos_scores"][e, b, t]) == pytest.approx(slow, rel=1e-4, abs=1e-6)


def test_value_tags_and_pair_share_against_loops(anchors_gpt):
    """App. E.2's tags: O = Attn^(1) W^{emb,X} W^V (paper layout) term by term, its coordinate on W^V's top right
    singular vector; η² = 1 for a value set by the group, ≈ 0 for one independent of it."""
    model = anchors_gpt(0.8, [1, 2]).eval()
    tokens = torch.randint(1, 31, (2, 5, 9), generator=torch.Generator().manual_seed(0))
    tags = value_tags(model, tokens)
    _, cache = model.run_with_cache(tokens, names=["blocks.0.attn.pattern"])
    e, b, j = 1, 2, 6
    A = cache["blocks.0.attn.pattern"][e, b, 0].double()
    W = model.blocks[0].attn.W_V.weight[e].detach().double().T  # (d_m, d_k): the paper's W^V
    o = sum(A[j, k] * model.wte[e, tokens[e, b, k]].detach().double() for k in range(j + 1)) @ W
    assert float(tags["norm"][e, b, j]) == pytest.approx(float(o.norm()), rel=1e-6)
    v = torch.linalg.svd(W.T)[0][:, 0]
    assert float(tags["coord"][e, b, j]) == pytest.approx(float(o @ v), rel=1e-6, abs=1e-9)
    g = torch.Generator().manual_seed(1)
    pairs = torch.randint(0, 4, (2, 400), generator=g)
    assert pair_share(pairs.double() * 3 + 1, pairs).tolist() == pytest.approx([1.0, 1.0])
    assert pair_share(torch.randn(2, 400, generator=g, dtype=torch.float64), pairs).max() < 0.05


def test_value_tag_readings_against_a_loop_over_sequences(anchors_gpt):
    """App. E.2's four readings, recomputed sequence by sequence from the tags: the medians of ‖O_L‖ by kind, the
    ratio of mean ‖O_j‖ before the key to after the anchors, η² and |Spearman| with hand-made pair ids and sums."""
    model = anchors_gpt(0.5, [1, 2]).eval()
    g = torch.Generator().manual_seed(3)
    E, B, L, q, d_vob = 2, 30, 9, 2, 7
    tokens = torch.randint(1, 31, (E, B, L), generator=g)
    key_pos = torch.randint(0, L - q - 1, (E, B), generator=g)
    kind = torch.randint(0, 2, (E, B), generator=g)
    kind[:, :2] = torch.tensor([0, 1])  # both kinds in every member
    got = value_tag_readings(model, tokens, key_pos, kind, q, d_vob)
    tags = value_tags(model, tokens)
    for e in range(E):
        rsn = [b for b in range(B) if kind[e, b] == 1]
        mem = [b for b in range(B) if kind[e, b] == 0]
        last = tags["norm"][e, :, -1]
        assert got["untagged_ratio"][e] == pytest.approx(float(last[mem].median() / last[rsn].median()), rel=1e-12)
        ratios = []
        for b in rsn:
            p = int(key_pos[e, b]) + 1  # 1-based
            n = tags["norm"][e, b]
            ratios.append(float(n[:p].mean() / n[p + q - 1 :].mean()))  # rows j <= p over rows j >= p + q
        assert got["before_ratio"][e] == pytest.approx(
            float(torch.tensor(ratios, dtype=torch.float64).median()), rel=1e-12
        )
        anchors = [[int(tokens[e, b, int(key_pos[e, b]) + 1 + i]) for i in range(q)] for b in rsn]
        ids = torch.tensor([sum(a * d_vob**i for i, a in enumerate(row)) for row in anchors])
        c = tags["coord"][e, rsn, -1]
        assert got["pair_share"][e] == pytest.approx(float(pair_share(c[None], ids[None])[0]), rel=1e-12)
        sums = torch.tensor([float(sum(row)) for row in anchors], dtype=torch.float64)
        rho = float(spearman_rows(c[None], sums[None])[0])
        assert got["shift_spearman"][e] == pytest.approx(abs(rho), rel=1e-12)


def test_layer2_readings_on_hand_made_rows():
    """Member 0: every row a (p, q)-cliff scaled by 50 (mass ≈ 1 on the window, Thm. 3), positional scores rising
    with the position (Spearman 1); member 1: flat rows (not cliffs; mass (q + 1)/L), falling scores (−1). The
    cached pattern is the softmax itself: the check reads 0."""
    L, q, B = 8, 2, 3
    key_pos = torch.tensor([[1, 2, 3], [1, 2, 3]])  # 0-based: p = 2, 3, 4
    cliff = torch.zeros(B, L)
    for b in range(B):
        p = int(key_pos[0, b]) + 1
        row = [float(i) for i in range(1, p + 1)] + [p - 0.25] * q + [-1.0] * (L - p - q)
        assert _slow_is_cliff(row, p, q)
        cliff[b] = 50 * torch.tensor(row)
    scores = torch.stack([cliff, torch.zeros(B, L)])
    pos = torch.arange(1, L, dtype=torch.float32).expand(B, L - 1)
    rows = {"scores": scores, "pattern": torch.softmax(scores, -1), "pos_scores": torch.stack([pos, -pos])}
    r = layer2_readings(rows, key_pos, q)
    assert r["cliff_share"] == [1.0, 0.0]
    assert r["window_mass"][0] == pytest.approx(1.0, abs=1e-6) and r["window_mass"][1] == pytest.approx((q + 1) / L)
    assert r["pattern_check"] < 1e-6
    assert r["pos_score_mean"][0] == pytest.approx(list(range(1, L)))
    assert r["pos_score_spearman"] == pytest.approx([1.0, -1.0])
