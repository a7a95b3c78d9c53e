"""Block statistics (z, u, g) on planted matrices and against an entry-by-entry loop; attention
averages (App. G.2-G.3) on a hand-made document with hand-computed answers."""

import math

import numpy as np
import pytest
import torch

from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
from tdlab.probes.blocks import (
    attention_averages,
    block_ratio_stat,
    block_stats,
    model_attention_averages,
    pooled_attention_averages,
    topic_of,
    word_block,
)

F64 = torch.float64


def topic_1based(i: int, v: int) -> int:
    return math.ceil(i / v)  # Def. 1, word ids 1..Tv


def loop_stats(M: torch.Tensor, T: int, v: int) -> dict[str, float]:
    """z, u, g of a (Tv+1, Tv+1) matrix by plain loops over word ids 1..Tv."""
    words = range(1, T * v + 1)
    same, diff, diag, off = [], [], [], []
    for i in words:
        for j in words:
            x = float(M[i, j])
            (same if topic_1based(i, v) == topic_1based(j, v) else diff).append(x)
            if i == j:
                diag.append(x)
            elif topic_1based(i, v) == topic_1based(j, v):
                off.append(x)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    S, D = mean(same), mean(diff)
    sigma = math.sqrt(mean([(x - D) ** 2 for x in diff]))
    gaps = []
    for i in words:
        sums = {t: sum(float(M[i, j]) for j in words if topic_1based(j, v) == t) for t in range(1, T + 1)}
        own = sums[topic_1based(i, v)]
        gaps.append(own - mean([s for t, s in sums.items() if t != topic_1based(i, v)]))
    return {"z": (S - D) / sigma, "u": (mean(off) - D) / (mean(diag) - D), "g": mean(gaps)}


def block_matrix(T: int, v: int, a: float, b: float, with_mask: bool = True) -> torch.Tensor:
    topic = torch.arange(T * v) // v
    same = (topic[:, None] == topic[None, :]).to(F64)
    W = a * same + b * (1 - same)
    if not with_mask:
        return W
    M = torch.full((T * v + 1, T * v + 1), 7.0, dtype=F64)  # row/col 0 ([MASK]) must be ignored
    M[1:, 1:] = W
    return M


def test_pure_block_matrix():
    T, v, a, b = 4, 3, 0.7, -0.1
    st = block_stats(block_matrix(T, v, a, b), T, v)
    assert st.u.item() == pytest.approx(1.0, abs=1e-14)
    assert st.g.item() == pytest.approx(v * (a - b), abs=1e-13)  # own block sums v a, the others v b
    assert st.S.item() == pytest.approx(a) and st.D.item() == pytest.approx(b)
    assert st.sigma.item() == 0.0 and math.isinf(st.z.item())  # off-block part constant


def test_diagonal_matrix_has_zero_uniformity():
    T, v = 3, 5
    M = torch.full((T * v + 1, T * v + 1), 0.2, dtype=F64) + 1.5 * torch.eye(T * v + 1, dtype=F64)
    st = block_stats(M, T, v)
    assert st.u.item() == pytest.approx(0.0, abs=1e-14)
    assert st.g.item() == pytest.approx(1.5, abs=1e-13)  # only the diagonal entry differs within the own block
    assert st.S.item() == pytest.approx(0.2 + 1.5 / v)


def c3_family(T: int, v: int, c3: float, gen: torch.Generator) -> torch.Tensor:
    """A random member of the Lemma 1 / Thm. 4 family: W_il = c3 P_il + u_i + N_il, with P row-stochastic
    inside the own topic block, u_i a per-row constant and N summing to zero over every other topic's
    columns of each row; row and column 0 arbitrary. Every row's block-sum gap is c3."""
    n = T * v
    topic = torch.arange(n) // v
    same = topic[:, None] == topic[None, :]
    P = torch.rand(n, n, generator=gen, dtype=F64) * same
    P = P / P.sum(1, keepdim=True)
    noise = torch.randn(n, T, v, generator=gen, dtype=F64)
    noise = (noise - noise.mean(-1, keepdim=True)).reshape(n, n) * ~same
    W = c3 * P + torch.randn(n, 1, generator=gen, dtype=F64) + noise
    M = torch.randn(n + 1, n + 1, generator=gen, dtype=F64)
    M[1:, 1:] = W
    return M


def test_c3_gap_family_and_ensemble_axis():
    T, v, p_m, p_c = 5, 4, 0.15, 0.1
    c3 = 1.0 / (1.0 - (1.0 - p_c) * p_m)
    g = torch.Generator().manual_seed(0)
    Ms = torch.stack([c3_family(T, v, c3, g) for _ in range(6)])  # (E, V, V)
    st = block_stats(Ms, T, v)
    assert st.g.shape == (6,)
    assert torch.allclose(st.g, torch.full((6,), c3, dtype=F64), atol=1e-12, rtol=0)
    for e in range(6):  # the member axis gives each matrix's own statistics
        one = block_stats(Ms[e], T, v)
        for k, val in one.as_dict().items():
            assert torch.allclose(val, st.as_dict()[k][e], atol=1e-14, rtol=0, equal_nan=True), k


def test_vectorised_statistics_match_entry_loops():
    T, v = 3, 4
    g = torch.Generator().manual_seed(1)
    M = torch.randn(T * v + 1, T * v + 1, generator=g, dtype=F64) + 2.0 * torch.eye(T * v + 1, dtype=F64)
    st = block_stats(M, T, v)
    ref = loop_stats(M, T, v)
    for k in ("z", "u", "g"):
        assert getattr(st, k).item() == pytest.approx(ref[k], rel=1e-12, abs=1e-12), k
    # A word-only (Tv, Tv) matrix gives the same numbers as its (Tv+1, Tv+1) parent.
    assert torch.allclose(block_stats(M[1:, 1:], T, v).z, st.z, atol=0, rtol=1e-15)


def test_bad_shapes_and_sizes():
    with pytest.raises(ValueError, match="expected"):
        block_stats(torch.zeros(10, 10), 3, 4)
    with pytest.raises(ValueError, match="T >= 2"):
        block_stats(torch.zeros(5, 5), 1, 4)
    with pytest.raises(ValueError, match="expected"):
        word_block(torch.zeros(13, 12), 3, 4)


def test_topic_of_follows_def_1():
    v = 3
    tokens = torch.tensor([0, 1, 3, 4, 6, 7, 30])
    assert topic_of(tokens, v).tolist() == [-1, 0, 0, 1, 1, 2, 9]  # ceil(i / v) - 1


# ---------------------------------------------------------------------------------------------
# A hand-made document: T = 2 topics, v = 2 words each (words 1, 2 in topic 1; 3, 4 in topic 2),
# tokens [1, 1, 2, 3]. Pattern in the column-softmax layout (row = key i, column = query j):
HAND_TOKENS = [1, 1, 2, 3]
HAND_A = torch.tensor(
    [
        [0.4, 0.1, 0.25, 0.1],
        [0.3, 0.5, 0.25, 0.2],
        [0.2, 0.2, 0.25, 0.3],
        [0.1, 0.2, 0.25, 0.4],
    ],
    dtype=F64,
)
# same word (w_i = w_j): (0,0) .4, (0,1) .1, (1,0) .3, (1,1) .5, (2,2) .25, (3,3) .4 -> 1.95 / 6
# same topic, different word: (0,2) .25, (2,0) .2, (1,2) .25, (2,1) .2 -> 0.9 / 4
# different topic: (0,3) .1, (1,3) .2, (2,3) .3, (3,0) .1, (3,1) .2, (3,2) .25 -> 1.15 / 6
HAND_EXPECT = (1.95 / 6, 0.9 / 4, 1.15 / 6)


def hand_inputs(pad: int = 0):
    N = 4 + pad
    A = torch.zeros(N, N, dtype=F64)
    A[:4, :4] = HAND_A
    A[4:, :] = 0.5  # garbage on padding keys: must be ignored (and renormalised away)
    tokens = torch.tensor(HAND_TOKENS + [4] * pad)
    visible = torch.tensor([True] * 4 + [False] * pad)
    return A[None, None], tokens[None, None], visible[None, None]


@pytest.mark.parametrize("pad", [0, 2])
def test_attention_averages_on_a_hand_made_document(pad):
    A, tokens, visible = hand_inputs(pad)
    avg = attention_averages(A, tokens, visible, topics=2, v=2, cut=100, norm_len=4)  # n = 4: scale 1
    got = (avg.same_word.item(), avg.same_topic.item(), avg.diff_topic.item())
    assert got == pytest.approx(HAND_EXPECT, abs=1e-15)
    assert (avg.n_same_word.item(), avg.n_same_topic.item(), avg.n_diff_topic.item()) == (6, 4, 6)
    # G.3's length normalisation with the default reference length 100: every weight times 4 / 100.
    avg100 = attention_averages(A, tokens, visible, topics=2, v=2)
    assert avg100.same_topic.item() == pytest.approx(HAND_EXPECT[1] * 4 / 100, abs=1e-15)


def test_attention_averages_cut_renormalises_over_the_kept_keys():
    # cut = 3 keeps tokens [1, 1, 2]; columns restricted to keys 0..2 and renormalised:
    # col0 [.4 .3 .2]/.9, col1 [.1 .5 .2]/.8, col2 [1/3 1/3 1/3].
    # same word: 4/9 + 1/8 + 3/9 + 5/8 + 1/3 = 67/36 over 5 pairs; same topic: 1/3 + 2/9 + 1/3 + 1/4 = 41/36
    # over 4 pairs; no different-topic pair left.
    A, tokens, visible = hand_inputs(pad=1)
    avg = attention_averages(A, tokens, visible, topics=2, v=2, cut=3, norm_len=3)
    assert avg.same_word.item() == pytest.approx(67 / 180, abs=1e-15)
    assert avg.same_topic.item() == pytest.approx(41 / 144, abs=1e-15)
    assert math.isnan(avg.diff_topic.item()) and avg.n_diff_topic.item() == 0


def test_attention_averages_pool_pairs_over_documents_and_skip_mask_tokens():
    A, tokens, visible = hand_inputs()
    # Second document: the hand document with its word 3 replaced by [MASK] = 0 (its pairs are skipped).
    tokens2 = torch.cat([tokens, torch.tensor([[[1, 1, 2, 0]]])], dim=1)
    A2 = torch.cat([A, A], dim=1)
    avg = attention_averages(A2, tokens2, torch.cat([visible, visible], 1), topics=2, v=2, norm_len=4)
    # same word: the first document's 1.95 (6 pairs) plus .4 + .1 + .3 + .5 + .25 = 1.55 (5 pairs)
    assert avg.same_word.item() == pytest.approx((1.95 + 1.55) / 11, abs=1e-15)
    assert avg.same_topic.item() == pytest.approx(1.8 / 8, abs=1e-15)
    assert avg.diff_topic.item() == pytest.approx(1.15 / 6, abs=1e-15)


def test_cut_pattern_equals_the_model_on_cut_documents():
    # For the topic model (scores depend on the two tokens only) restricting and renormalising a
    # full-document pattern equals running the model on the cut documents, the authors' order.
    T, v, E, B, N, cut = 3, 3, 2, 4, 14, 9
    model = TopicAttention(TopicModelConfig(vocab=T * v + 1, onehot=True, init_scale=1.0), [0, 1]).double()
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(1, T * v + 1, (E, B, N), generator=g)
    visible = torch.ones(E, B, N, dtype=torch.bool)
    visible[:, 1, 11:] = False  # padded, still longer than cut
    visible[:, 2, 6:] = False  # shorter than cut: n = 6
    _, cache = model.run_with_cache(tokens, key_mask=visible, names=["attn.pattern"])
    from_full = attention_averages(cache["attn.pattern"], tokens, visible, T, v, cut=cut)
    from_cut = model_attention_averages(model, tokens, visible, T, v, cut=cut)
    for k, val in from_full.as_dict().items():
        assert torch.allclose(val.double(), getattr(from_cut, k).double(), atol=1e-14, rtol=0), k
    # The G.3 normalisation makes the mean normalised weight over all pairs of a document 1/norm_len.
    total = (
        from_cut.same_word * from_cut.n_same_word
        + from_cut.same_topic * from_cut.n_same_topic
        + from_cut.diff_topic * from_cut.n_diff_topic
    )
    n = torch.tensor([9, 9, 6, 9], dtype=F64)  # cut lengths
    assert torch.allclose(total, (n * n / 100).sum().expand(E), atol=1e-12)


def test_pooled_averages_are_the_averages_over_all_documents_at_once():
    # Pooling chunks' averages by their counts is the average over every pair of every document: one pass over all
    # documents gives it directly, whatever the chunk size; a class no document holds stays NaN.
    T, v, E, B, N = 3, 3, 2, 7, 10
    model = TopicAttention(TopicModelConfig(vocab=T * v + 1, onehot=True, init_scale=1.0), [0, 1]).double()
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(1, T * v + 1, (E, B, N), generator=g)
    visible = torch.ones(E, B, N, dtype=torch.bool)
    visible[:, 3, 5:] = False
    whole = model_attention_averages(model, tokens, visible, T, v, cut=8)
    want = torch.stack([whole.same_word, whole.same_topic, whole.diff_topic]).double()
    for chunk in (1, 3, B):
        got = pooled_attention_averages(model, tokens, visible, T, v, chunk, cut=8)
        assert got.shape == (3, E) and got.dtype == F64
        assert torch.allclose(got, want, atol=1e-14, rtol=1e-12), chunk
    one_topic = torch.ones(E, B, N, dtype=torch.long)  # word 1 only: no different-topic pair anywhere
    assert torch.isnan(pooled_attention_averages(model, one_topic, visible, T, v, 2, cut=8)[2]).all()


# ----------------------------------------------------------------------------------------------
# The permutation test of topic structure (topics-embed's Fig. 1 claim)


def _thm1_gram(T: int, v: int, noise: float, u_scale: float, seed: int) -> torch.Tensor:
    """A W^EᵀW^E that satisfies Thm. 1's conditions exactly, ``(Tv+1, Tv+1)`` (p_m, p_c, p_r of §6.1). Word i's
    embedding is √(c3/v)·e_topic(i) plus a noise vector orthogonal to the topic directions whose sum over each
    topic's words is zero, so E_ij = c3/v·[same topic] + <n_i, n_j> has own-topic block sums c3 and others 0 (a
    Gram: realisable); ``u_scale`` then adds Thm. 1's free constants, E_ij += a_i + a_j with a summing to zero
    inside every topic (block sums u_i v, u_i = a_i) and E_i0 = −c2 a_i, E_00 = 0 (conditions 1, 2; u_0 = 0)."""
    from tdlab.theory.topics import c2, c3

    g = torch.Generator().manual_seed(seed)
    n, c = T * v, c3(0.15, 0.1)
    topic = torch.arange(n) // v
    n_i = noise * torch.randn(n, n, generator=g, dtype=F64)
    n_i[:, :T] = 0.0  # orthogonal to the topic directions e_0..e_{T-1}
    n_i = (n_i.reshape(T, v, n) - n_i.reshape(T, v, n).mean(1, keepdim=True)).reshape(n, n)  # zero sum per topic
    emb = math.sqrt(c / v) * torch.nn.functional.one_hot(topic, n).to(F64) + n_i  # (words, d = Tv)
    a = u_scale * torch.randn(n, generator=g, dtype=F64)
    a = (a.reshape(T, v) - a.reshape(T, v).mean(1, keepdim=True)).reshape(n)
    E = torch.zeros(n + 1, n + 1, dtype=F64)
    E[1:, 1:] = emb @ emb.T + a[:, None] + a[None, :]
    E[1:, 0] = E[0, 1:] = -c2(0.15, 0.1, 0.1) * a
    sums = E[1:, 1:].reshape(n, T, v).sum(-1)  # Thm. 1 3(a)-(b): own-topic block sum − every other = c3
    own = sums[torch.arange(n), topic]
    others = sums[~torch.nn.functional.one_hot(topic, T).bool()].reshape(n, T - 1)
    assert torch.allclose(own[:, None] - others, torch.tensor(c, dtype=F64))
    assert torch.allclose(others, v * a[:, None].expand(n, T - 1))  # 3(b): u_i v
    return E


def test_offdiag_contrast_on_a_hand_made_matrix():
    from tdlab.probes.blocks import offdiag_contrast

    M = torch.zeros(5, 5, dtype=F64)  # T = v = 2: words 1, 2 (topic 0) and 3, 4 (topic 1)
    M[1:, 1:] = torch.tensor([[9.0, 2.0, 0.5, 0.5], [2.0, 9.0, 0.5, 0.5], [0.5, 0.5, 9.0, 4.0], [0.5, 0.5, 4.0, 9.0]])
    # same-topic off-diagonal mean (2 + 2 + 4 + 4)/4 = 3, different-topic 0.5: the diagonal never enters
    assert float(offdiag_contrast(M, 2, 2)) == pytest.approx(2.5)


def test_matrices_satisfying_thm1_pass_and_a_gram_without_blocks_fails():
    """Thm. 1's members with blocks (uniform blocks; blocks with within-topic noise and free u_i) get the smallest
    p; a random init's gram (no topic structure) does not pass. Thm. 1 fixes the rows' block sums, not where in
    the block the mass sits: the sum over word i's topic of <n_i, n_j> is 0, so the off-diagonal same-topic mean is
    c3/v − mean‖n_i‖²/(v − 1), and a member whose within-topic mass sits on the diagonal (noise 0.2: ‖n_i‖² ≈ 3.2)
    shows no off-diagonal blocks and fails, as D = c3 I does (the next test)."""
    from tdlab.probes.blocks import block_permutation_test, offdiag_contrast
    from tdlab.theory.topics import c3

    P = 1999
    for noise, u in ((0.0, 0.0), (0.02, 0.0), (0.02, 0.01)):
        E = _thm1_gram(10, 10, noise, u, seed=3)
        t = block_permutation_test(E, 10, 10, P, torch.Generator().manual_seed(0))
        assert float(t.p) == pytest.approx(1 / (P + 1)) and t.resolution == pytest.approx(1 / (P + 1))
    E = _thm1_gram(10, 10, 0.2, 0.0, seed=3)
    norms = (E[1:, 1:].diagonal() - c3(0.15, 0.1) / 10).mean()  # mean ‖n_i‖²
    assert float(offdiag_contrast(E, 10, 10)) == pytest.approx(c3(0.15, 0.1) / 10 - float(norms) / 9, rel=1e-9)
    assert float(block_permutation_test(E, 10, 10, P, torch.Generator().manual_seed(0)).p) > 0.05
    W = 0.02 * torch.randn(101, 101, generator=torch.Generator().manual_seed(1), dtype=F64)  # N(0, 0.02²) W^E
    t = block_permutation_test(W.T @ W, 10, 10, P, torch.Generator().manual_seed(0))
    assert float(t.p) > 0.05


def test_a_diagonal_gram_carries_no_topic_information_and_gets_p_one():
    """Fig. 1's 'special case' D = c3 I: its diagonal is same-topic under every relabelling, its off-diagonal part
    is zero, so every relabelling ties and p = 1 (the documented choice: a diagonal gram shows no blocks)."""
    from tdlab.probes.blocks import block_permutation_test
    from tdlab.theory.topics import thm1_embedding

    W = thm1_embedding(10, 10, 0.15, 0.1)
    t = block_permutation_test(W.T @ W, 10, 10, 199, torch.Generator().manual_seed(0))
    assert float(t.p) == 1.0 and float(t.contrast) == pytest.approx(0.0, abs=1e-15)


def test_the_permutation_p_value_is_uniform_under_the_null():
    """400 random grams of exchangeable columns (no topic structure): P(p ≤ 0.05) ≤ 0.05, as the null promises
    (binomial: 20 expected, more than 35 has probability < 1e-3); the p-values' mean is near 1/2."""
    from tdlab.probes.blocks import block_permutation_test

    g = torch.Generator().manual_seed(7)
    W = torch.randn(400, 12, 17, generator=g, dtype=F64)  # d = 12, V = 17: T = 4, v = 4 words and [MASK]
    t = block_permutation_test(W.transpose(1, 2) @ W, 4, 4, 199, torch.Generator().manual_seed(1))
    assert t.p.shape == (400,)
    assert int((t.p <= 0.05).sum()) <= 35 and 0.42 < float(t.p.mean()) < 0.58


def test_the_relabellings_follow_the_generator():
    from tdlab.probes.blocks import block_permutation_test

    W = torch.randn(3, 12, 17, generator=torch.Generator().manual_seed(2), dtype=F64)
    E = W.transpose(1, 2) @ W
    a, b = (block_permutation_test(E, 4, 4, 99, torch.Generator().manual_seed(5)) for _ in range(2))
    c = block_permutation_test(E, 4, 4, 99, torch.Generator().manual_seed(6))
    assert torch.equal(a.p, b.p) and not torch.equal(a.null_mean, c.null_mean)
    with pytest.raises(ValueError, match="permutations"):
        block_permutation_test(E, 4, 4, 0, torch.Generator())


def test_nearest_same_topic_share_of_blocks_and_of_noise():
    from tdlab.probes.blocks import nearest_same_topic_share

    E = _thm1_gram(10, 10, 0.05, 0.0, seed=4)
    assert float(nearest_same_topic_share(E, 10, 10)) == 1.0
    W = torch.randn(200, 16, 17, generator=torch.Generator().manual_seed(3), dtype=F64)
    share = nearest_same_topic_share(W.transpose(1, 2) @ W, 4, 4)
    assert float(share.mean()) == pytest.approx(3 / 15, abs=0.02)  # chance: (v − 1)/(Tv − 1)


def test_block_ratio_stat_signs_the_factor_r_check():
    assert block_ratio_stat(1.0, 0.0, 10.0) == pytest.approx(1.0)  # D = 0: S is infinitely many |D|
    assert block_ratio_stat(1.0, 0.1, 10.0) == pytest.approx(0.0)  # S = r|D| exactly
    assert block_ratio_stat(1.0, -0.2, 10.0) < 0  # |D| too large
    assert not math.isfinite(block_ratio_stat(np.float64(0.5), np.float64(0.5), 10.0))  # no contrast
