"""Same- vs different-topic measures of seed 004 Tables 1, 2, 5 (probes.topic_pairs).

* The whole pipeline on a planted two-topic corpus written here (text file -> load_corpus -> LDA ->
  θ-filter -> assignment): embeddings set by hand to the planted topics give the closed-form ratio
  (1 + c²)/c²; random embeddings give 1 within a bound derived below (and checked over draws);
  attention that prefers the own topic gives a ratio > 1 equal to a slow loop; uniform attention gives
  exactly 1 after App. G.3's debiasing and not before.
* Debiasing on a hand-made document with hand-computed numbers; padding, batches, ensembles, offsets.
* Co-occurrence counts and Table 2's top pairs / means against slow loops.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("gensim")

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.topic_pairs import (
    PairAttention,
    attention_pair_means,
    cooc_k,
    cooccurrence_matrix,
    embedding_ratios,
    model_attention,
    model_embeddings,
    pair_list,
    same_topic_pairs,
    table2_means,
    top_cooccurring_pairs,
)
from tdlab.tasks.lda_topics import LDAConfig, assign, fit_lda, topic_word_sets
from tdlab.tasks.text_corpus import CorpusConfig, load_corpus

FRUIT = ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "melon"]
MUSIC = ["piano", "violin", "guitar", "drums", "flute", "cello", "harp", "organ", "trumpet", "oboe"]
STOP = ["the", "and", "of", "with"]


# ---------------------------------------------------------------- the planted corpus, end to end


def write_planted(path: Path, seed: int = 0) -> None:
    """60 documents: 40 short ones about one topic, 20 long ones about both (stop words between)."""
    rng = np.random.default_rng(seed)
    lines = []
    for d in range(60):
        if d % 3 < 2:
            words = list(rng.choice(FRUIT if d % 3 == 0 else MUSIC, size=int(rng.integers(8, 16))))
        else:
            words = list(rng.choice(FRUIT, size=int(rng.integers(10, 30)))) + list(
                rng.choice(MUSIC, size=int(rng.integers(10, 30)))
            )
            rng.shuffle(words)
        lines.append(" ".join(t for w in words for t in (str(w), str(rng.choice(STOP)))))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory):
    f = tmp_path_factory.mktemp("planted") / "planted.txt"
    write_planted(f)
    corpus = load_corpus(CorpusConfig(source="text", path=str(f), min_count=1))
    topics = fit_lda(corpus, LDAConfig(topics=2, passes=15, iterations=50), seed=5, progress=False)
    sets = topic_word_sets(topics, 0.45)  # n = 20: ⌊9⌋ + 1 = 10 words per topic
    assignment = assign(sets, topics, "single")
    return corpus, assignment


def truth(corpus, w: int) -> int:
    word = corpus.vocab[w]
    return 0 if word in FRUIT else 1 if word in MUSIC else -1


def test_lda_assignment_is_the_planted_topics(planted) -> None:
    corpus, assignment = planted
    assert len(assignment) == 20
    groups = {}
    for w, ts in assignment.items():
        (t,) = ts
        groups.setdefault(t, set()).add(corpus.vocab[w])
    assert sorted(map(sorted, groups.values())) == sorted([sorted(FRUIT), sorted(MUSIC)])


def test_pair_classes_against_a_loop(planted) -> None:
    _corpus, assignment = planted
    words, same, diff = same_topic_pairs(assignment)
    assert words.tolist() == sorted(assignment)
    for a, wa in enumerate(words.tolist()):
        for b, wb in enumerate(words.tolist()):
            shared = bool(assignment[wa] & assignment[wb])
            assert same[a, b] == (a != b and shared) and diff[a, b] == (a != b and not shared)
    assert same.sum() == 2 * 2 * math.comb(10, 2) and diff.sum() == 2 * 100
    assert pair_list(words, same).shape == (90, 2)


def test_multi_topic_words_share_if_any_topic_is_common() -> None:
    asg = {1: frozenset({0}), 2: frozenset({0, 1}), 3: frozenset({1}), 4: frozenset({2})}
    words, same, diff = same_topic_pairs(asg)
    assert pair_list(words, same).tolist() == [[1, 2], [2, 3]]
    assert pair_list(words, diff).tolist() == [[1, 3], [1, 4], [2, 4], [3, 4]]


def test_embeddings_set_to_the_planted_topics(planted) -> None:
    """e_w = t_topic(w) + c·o (orthonormal t_0, t_1, o): same-topic cosine 1, different c²/(1+c²)."""
    corpus, assignment = planted
    words, same, diff = same_topic_pairs(assignment)
    c = 0.5
    basis = torch.linalg.qr(torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0].T
    emb = torch.stack([basis[truth(corpus, int(w))] + c * basis[2] for w in words])
    r = embedding_ratios(emb, same, diff)
    assert r["cos_same"] == pytest.approx(1.0, abs=1e-12)
    assert r["cos_diff"] == pytest.approx(c * c / (1 + c * c), abs=1e-12)
    assert r["cosine"] == pytest.approx((1 + c * c) / (c * c), rel=1e-12) and r["cosine"] > 4
    assert r["dot"] == pytest.approx((1 + c * c) / (c * c), rel=1e-12)
    # an ensemble axis is carried through
    re = embedding_ratios(torch.stack([emb, 2 * emb]), same, diff)
    np.testing.assert_allclose(re["cosine"], [r["cosine"]] * 2, rtol=1e-12)
    np.testing.assert_allclose(re["dot_same"], [r["dot_same"], 4 * r["dot_same"]], rtol=1e-12)


def _random_bounds(same: np.ndarray, diff: np.ndarray, d: int, c: float) -> tuple[float, float]:
    """Standard deviations of (mean same − mean diff) for e_i = c·1 + g_i, g_i ~ N(0, I_d) iid.

    Dot: D_ij = c²d + c(s_i + s_j) + g_i·g_j with s_i = 1·g_i ~ N(0, d). The mean over a pair set P is
    c²d + Σ_i deg_P(i) c s_i / |P| + Σ_P g_i·g_j / |P|; the products g_i·g_j of distinct pairs are
    uncorrelated with variance d and with the s terms, so
        Var(mean_S − mean_D) = c² d Σ_i a_i² + d (1/|S| + 1/|D|),  a_i = deg_S(i)/|S| − deg_D(i)/|D|.
    Cosine, first order in 1/√d (N² = d(1 + c²), ε_i = (|e_i|² − N²)/(2N²)): cos_ij ≈ D_ij/N² − ρ(ε_i + ε_j),
    ρ = c²/(1+c²); the word term c s_i/N² − ρ ε_i = [c s_i/(1+c²) − ρ(|g_i|² − d)/2]/N² has variance
    d (c² + c⁴/2) / ((1+c²)² N⁴) (s_i and |g_i|² uncorrelated, Var |g_i|² = 2d), the pair term d/N⁴.
    """
    S, D = same.sum() / 2, diff.sum() / 2
    a = same.sum(1) / S - diff.sum(1) / D  # ordered-pair degrees / unordered counts: each pair counted once per end
    pair = d * (1 / S + 1 / D)
    sd_dot = math.sqrt(c * c * d * float((a * a).sum()) + pair)
    N4 = (d * (1 + c * c)) ** 2
    word_cos = d * (c * c + c**4 / 2) / ((1 + c * c) ** 2 * N4)
    sd_cos = math.sqrt(word_cos * float((a * a).sum()) + pair / N4)
    return sd_dot, sd_cos


def _unbalanced_assignment() -> dict[int, frozenset[int]]:
    sizes = [30, 50, 70, 50]  # unequal topics: the per-word (degree) term of the bound is not zero
    out, w = {}, 0
    for t, k in enumerate(sizes):
        for _ in range(k):
            out[w] = frozenset({t})
            w += 1
    return out


def test_random_embeddings_give_one_within_the_derived_bound() -> None:
    words, same, diff = same_topic_pairs(_unbalanced_assignment())
    d, c, n = 128, 1.0, 200
    sd_dot, sd_cos = _random_bounds(same, diff, d, c)
    g = torch.Generator().manual_seed(1)
    x = embedding_ratios(
        c + torch.randn(n, words.size, d, generator=g, dtype=torch.float64), same, diff
    )  # n draws at once
    dd, dc = x["dot_same"] - x["dot_diff"], x["cos_same"] - x["cos_diff"]
    # the derivation: the spread over draws matches (200 draws: the sample sd is within 3 × 5% of the truth)
    assert np.std(dd) == pytest.approx(sd_dot, rel=0.15) and np.std(dc) == pytest.approx(sd_cos, rel=0.15)
    assert abs(np.mean(dd)) < 4 * sd_dot / math.sqrt(n) and abs(np.mean(dc)) < 4 * sd_cos / math.sqrt(n)
    # every draw: ratio = 1 within 6 sd of its numerator over the expected denominator
    mean_dot, mean_cos = c * c * d, c * c / (1 + c * c)
    assert np.all(np.abs(x["dot"] - 1) < 6 * sd_dot / mean_dot * 1.01)
    assert np.all(np.abs(x["cosine"] - 1) < 6 * sd_cos / mean_cos * 1.01)
    assert 6 * sd_cos / mean_cos < 0.02  # so "≈ 1" means within 2% here


def test_cosine_gap_z_of_isotropic_random_embeddings_is_standard_normal() -> None:
    """Zero-mean embeddings: both mean cosines ≈ 0, so the ratio is noise over noise; the gap's z-score
    is exactly standardised (cosines of distinct pairs: mean 0, variance 1/d, uncorrelated)."""
    words, same, diff = same_topic_pairs(_unbalanced_assignment())
    g = torch.Generator().manual_seed(2)
    x = embedding_ratios(torch.randn(200, words.size, 64, generator=g, dtype=torch.float64), same, diff)
    z = x["cos_gap_z"]
    assert abs(np.mean(z)) < 4 / math.sqrt(200) and np.std(z) == pytest.approx(1.0, rel=0.15)
    assert np.ptp(x["cosine"]) > 2  # the ratio itself is not ≈ 1
    np.testing.assert_allclose(x["cos_gap"], x["cos_same"] - x["cos_diff"], rtol=1e-12)


def uniform(T: int, visible: int | None = None) -> torch.Tensor:
    v = T if visible is None else visible
    A = torch.zeros(T, T, dtype=torch.float64)
    A[:, :v] = 1.0 / v
    return A


def topic_preferring(ids: torch.Tensor, topic_of, beta: float) -> torch.Tensor:
    t = torch.tensor([topic_of(int(i)) for i in ids])
    same = (t[:, None] == t[None, :]) & (t[:, None] >= 0)
    return torch.softmax(beta * same.to(torch.float64), dim=-1)


def slow_means(docs, assignment, debias: bool, cls) -> tuple[float, float]:
    """Mean debiased weight over ordered position pairs of distinct assigned words, by loops."""
    sums, counts = {"same": 0.0, "diff": 0.0}, {"same": 0, "diff": 0}
    for A, ids in docs:
        T = len(ids)
        for i in range(T):
            for j in range(T):
                wi, wj = int(ids[i]), int(ids[j])
                if wi == wj or wi not in assignment or wj not in assignment:
                    continue
                k = cls(wi, wj)
                sums[k] += float(A[i, j]) * (T / 100 if debias else 1.0)
                counts[k] += 1
    return sums["same"] / counts["same"], sums["diff"] / counts["diff"]


def test_topic_preferring_attention_against_a_loop(planted) -> None:
    corpus, assignment = planted
    docs = []
    for d in range(15):  # 10 one-topic and 5 two-topic documents: enough for the loop
        ids = torch.as_tensor(corpus.ids(d))
        docs.append((topic_preferring(ids, lambda w: truth(corpus, w), beta=1.0), ids))
    acc = None
    for A, ids in docs:
        acc = attention_pair_means(A[None], ids, assignment, into=acc)  # one head
    s, d = slow_means(docs, assignment, True, lambda a, b: "same" if assignment[a] & assignment[b] else "diff")
    assert acc.mean("same")[0] == pytest.approx(s, rel=1e-12) and acc.mean("diff")[0] == pytest.approx(d, rel=1e-12)
    assert acc.ratio() == pytest.approx(s / d, rel=1e-12) and acc.ratio() > 1.3
    assert acc.documents == len(docs)


def test_uniform_attention_is_exactly_one_after_debiasing(planted) -> None:
    corpus, assignment = planted
    raw, deb = None, None
    for d in range(30):  # 20 one-topic and 10 two-topic documents
        ids = torch.as_tensor(corpus.ids(d))
        A = uniform(len(ids)).expand(2, 3, -1, -1)  # (L, H, T, T)
        raw = attention_pair_means(A, ids, assignment, debias=False, into=raw)
        deb = attention_pair_means(A, ids, assignment, debias=True, into=deb)
    assert deb.per_head().shape == (2, 3)
    np.testing.assert_allclose(deb.per_head(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(deb.mean("same"), 0.01, rtol=1e-12)  # every weight is 1/100 after debiasing
    # the length bias the debiasing removes: short single-topic documents hold the same-topic pairs
    assert raw.ratio() > 1.5


# ---------------------------------------------------------------- App. G.3's debiasing by hand

ASG = {10: frozenset({0}), 11: frozenset({0}), 12: frozenset({1})}
A1 = torch.tensor(
    [[0.1, 0.4, 0.2, 0.3], [0.5, 0.1, 0.2, 0.2], [0.3, 0.3, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64
)
IDS1 = torch.tensor([10, 11, 12, 99])  # 99: a stop word, in no pair
A2 = torch.tensor([[0.6, 0.4], [0.7, 0.3]], dtype=torch.float64)
IDS2 = torch.tensor([10, 12])
# by hand: doc 1 same (0,1),(1,0): 0.4 + 0.5 = 0.9; diff (0,2),(2,0),(1,2),(2,1): 0.2 + 0.3 + 0.2 + 0.3 = 1.0;
# doc 2 diff (0,1),(1,0): 0.4 + 0.7 = 1.1. Debiased: ×4/100 and ×2/100.
SAME_DEB, DIFF_DEB = 0.9 * 0.04 / 2, (1.0 * 0.04 + 1.1 * 0.02) / 6  # 0.018, 0.0103333
SAME_RAW, DIFF_RAW = 0.9 / 2, 2.1 / 6  # 0.45, 0.35


def test_debiasing_hand_made_documents() -> None:
    acc = attention_pair_means(torch.stack([A1, uniform(4)]), IDS1, ASG)
    acc = attention_pair_means(torch.stack([A2, uniform(2)]), IDS2, into=acc)
    assert acc.counts == {"same": 2, "diff": 6}
    np.testing.assert_allclose(acc.mean("same"), [0.018, 0.01], rtol=1e-12)
    np.testing.assert_allclose(acc.mean("diff"), [0.0103333333333333333, 0.01], rtol=1e-12)
    np.testing.assert_allclose(acc.per_head(), [0.018 / (0.062 / 6), 1.0], rtol=1e-12)
    assert acc.ratio() == pytest.approx((0.018 + 0.01) / (0.062 / 6 + 0.01), rel=1e-12)
    assert pytest.approx(0.018) == SAME_DEB and pytest.approx(0.062 / 6) == DIFF_DEB
    raw = attention_pair_means(A1[None], IDS1, ASG, debias=False)
    raw = attention_pair_means(A2[None], IDS2, into=raw)
    assert raw.per_head()[0] == pytest.approx(SAME_RAW / DIFF_RAW, rel=1e-12)  # 9/7


def test_padding_batches_ensembles_and_offset() -> None:
    # doc 2 padded to 4 positions (pad id 0, hidden keys): same sums as the unpadded document
    A2p = torch.zeros(4, 4, dtype=torch.float64)
    A2p[:2, :2] = A2
    ids2p = torch.tensor([10, 12, 0, 0])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    ref = attention_pair_means(A1[None], IDS1, ASG)
    ref = attention_pair_means(A2[None], IDS2, into=ref)
    # (E, B, H, T, T) with batch_dim=1; member 1 = twice member 0's weights
    batch = torch.stack([A1, A2p])[None, :, None]  # (1, B, 1, T, T)
    ens = torch.cat([batch, 2 * batch])  # (2, B, 1, T, T)
    acc = attention_pair_means(ens, torch.stack([IDS1, ids2p]), ASG, key_mask=mask, batch_dim=1)
    assert acc.counts == ref.counts and acc.documents == 2
    np.testing.assert_allclose(acc.mean("same")[:, 0], [ref.mean("same")[0], 2 * ref.mean("same")[0]], rtol=1e-12)
    np.testing.assert_allclose(acc.ratio(keep_dims=1), [ref.ratio()] * 2, rtol=1e-12)
    # token ids offset by 3 special tokens: ids below 3 (specials) are in no pair
    off = attention_pair_means(A1[None], IDS1 + 3, ASG, offset=3)
    off.add(A2[None], torch.tensor([13, 15]))
    np.testing.assert_allclose(off.mean("diff"), ref.mean("diff"), rtol=1e-12)
    with pytest.raises(ValueError, match="batch_dim"):
        attention_pair_means(ens, torch.stack([IDS1, ids2p]), ASG)
    with pytest.raises(ValueError, match="does not match"):
        attention_pair_means(A1[None], IDS2, ASG)


# ---------------------------------------------------------------- Table 2: co-occurrence


def random_docs(seed: int, docs: int = 40, vocab: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(0, 12))).tolist() for _ in range(docs)]


def test_cooccurrence_counts_against_a_loop() -> None:
    docs = random_docs(0)
    words = np.array([1, 2, 3, 5, 8, 13, 21, 29])
    C = cooccurrence_matrix(docs, words).toarray()
    for a, wa in enumerate(words):
        for b, wb in enumerate(words):
            assert C[a, b] == sum(1 for d in docs if wa in d and wb in d)


@pytest.mark.parametrize("seed", [1, 2])
def test_top_pairs_against_a_sorted_loop(seed: int) -> None:
    docs = random_docs(seed)
    words = np.arange(3, 30, 2)[::-1]  # any order in, sorted pairs out
    ranked = sorted(
        ((sum(1 for d in docs if a in d and b in d), a, b) for a in sorted(words) for b in sorted(words) if a < b),
        key=lambda x: (-x[0], x[1], x[2]),
    )
    ranked = [r for r in ranked if r[0] > 0]
    for k in (0, 1, 7, 30, 10_000):
        for block in (1, 100, 1 << 25):  # one word row per block, a few rows, everything at once
            pairs, counts = top_cooccurring_pairs(docs, words, k, return_counts=True, block_bytes=block)
            want = ranked[:k]
            assert pairs.tolist() == [[a, b] for _, a, b in want] and counts.tolist() == [c for c, _, _ in want]
    assert pairs.shape == (len(ranked), 2)  # k beyond the co-occurring pairs: all of them


def test_table2_means_against_loops() -> None:
    same = np.array([[10, 11]])
    cooc = np.array([[10, 12], [11, 12]])
    emb = torch.randn(16, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # ids 0..15, offset 2
    acc = PairAttention.from_pairs({"same": same, "cooc": cooc})
    acc.add(torch.stack([A1, uniform(4)]), IDS1)
    acc.add(torch.stack([A2, uniform(2)]), IDS2)
    out = table2_means({"same": same, "cooc": cooc}, emb, acc, offset=2)

    def cos(a: int, b: int) -> float:
        x, y = emb[a + 2], emb[b + 2]
        return float(x @ y / (x.norm() * y.norm()))

    assert out["same"]["pairs"] == 1 and out["cooc"]["pairs"] == 2
    assert out["same"]["cosine"] == pytest.approx(cos(10, 11), rel=1e-12)
    assert out["cooc"]["cosine"] == pytest.approx((cos(10, 12) + cos(11, 12)) / 2, rel=1e-12)
    # pairs {10,12}, {11,12} are exactly the different-topic pairs of the hand-made documents
    assert out["cooc"]["attention"] == pytest.approx((DIFF_DEB + 0.01) / 2, rel=1e-12)
    assert out["same"]["attention"] == pytest.approx((SAME_DEB + 0.01) / 2, rel=1e-12)


def test_cooc_k_is_the_pair_count_of_one_topic():
    assert [cooc_k(s) for s in (15, 30, 59, 1)] == [105, 435, 1711, 0]  # Table 2's cutoffs


def _encoder(members: int = 2) -> GPT:
    cfg = GPTConfig(
        arch="gpt2", vocab=12, d=8, layers=2, heads=2, max_len=6, norm="post", causal=False, tie_weights=True
    )
    return GPT(cfg, list(range(members)))


def test_model_embeddings_are_the_word_rows_of_the_token_table():
    model = _encoder()
    emb, E = model_embeddings(model, 2)  # ids 0, 1 special, 2..10 the words, 11 [UNK]
    assert E == 2 and emb.shape == (2, 9, 8)
    assert torch.equal(emb, model.wte.detach()[:, 2:11])

    class Checkpoint:  # a local checkpoint's encoder gives its own word rows
        def word_embeddings(self) -> torch.Tensor:
            return torch.ones(1, 5, 3)

    emb, E = model_embeddings(Checkpoint(), 2)
    assert E == 1 and torch.equal(emb, torch.ones(1, 5, 3))


def test_model_attention_is_every_layers_pattern_of_every_member():
    model = _encoder()
    windows = torch.randint(2, 12, (3, 6), generator=torch.Generator().manual_seed(0))
    got = model_attention(model, windows)
    assert got.shape == (2, 3, 2, 2, 6, 6)  # (E, B, L, H, T, T)
    assert torch.allclose(got.sum(-1), torch.ones(2, 3, 2, 2, 6))  # bidirectional rows, each a softmax
    for e in range(2):  # member e alone, through the hook points
        alone = GPT(model.cfg, [e])
        names = [f"blocks.{layer}.attn.pattern" for layer in range(2)]
        _, cache = alone.run_with_cache(windows[None], names=names)
        for layer, n in enumerate(names):
            assert torch.allclose(got[e, :, layer], cache[n][0], atol=1e-6)

    class Checkpoint:
        def window_attention(self, w: torch.Tensor) -> torch.Tensor:
            return torch.zeros(1, w.shape[0], 1, 1, w.shape[1], w.shape[1])

    assert model_attention(Checkpoint(), windows).shape == (1, 3, 1, 1, 6, 6)
