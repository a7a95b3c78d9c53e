"""LDA topics and App. G.3's ambiguity filter (tasks.lda_topics): a planted corpus of two disjoint
vocabularies is recovered, the seed fixes the topics, the progress loop is gensim's own passes=P,
Table 2's pair counts pin down ⌊θn⌋ + 1, the θ-filter / assignment match brute-force loops, and Fig. 3's words
are the unambiguous top words of the clearest topics."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("gensim")

from gensim.models import LdaModel

from tdlab.config import ConfigError, validate_config
from tdlab.tasks.lda_topics import (
    LDAConfig,
    Topics,
    _bow,
    assign,
    consistent_vocab_sizes,
    fig3_words,
    fit_lda,
    topic_word_sets,
    words_per_topic,
)
from tdlab.tasks.text_corpus import Corpus

FRUIT = ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "melon"]
MUSIC = ["piano", "violin", "guitar", "drums", "flute", "cello", "harp", "organ", "trumpet", "oboe"]
STOP = ["the", "and", "of"]


def planted_corpus(docs: int = 40, length: int = 30, seed: int = 0) -> Corpus:
    """Documents alternately about fruit or music (one topic each), stop words in between."""
    rng = np.random.default_rng(seed)
    vocab = STOP + FRUIT + MUSIC  # ids 0-2 stop words (never seen by LDA), 3-12 fruit, 13-22 music
    text, lda = [], []
    for d in range(docs):
        words = FRUIT if d % 2 == 0 else MUSIC
        ws = [str(w) for w in rng.choice(words, size=length)]
        text.append([t for w in ws for t in (w, str(rng.choice(STOP)))])
        lda.append([vocab.index(w) for w in ws])
    return Corpus(docs=text, vocab=vocab, lda_docs=lda, provenance="planted")


QUICK = LDAConfig(topics=2, passes=10, iterations=50)


@pytest.fixture(scope="module")
def planted() -> tuple[Corpus, Topics]:
    c = planted_corpus()
    return c, fit_lda(c, QUICK, seed=3, progress=False)


def test_planted_topics_are_recovered(planted: tuple[Corpus, Topics]) -> None:
    c, t = planted
    assert t.word_topic.shape == (2, len(c.vocab))
    assert np.allclose(t.word_topic.sum(1), 1.0)
    assert np.all(t.word_topic[:, :3] == 0.0)  # stop words: zero columns
    assert t.lda_ids.tolist() == list(range(3, 23))
    sets = topic_word_sets(t, theta=0.45)  # n = 20 words: floor(9) + 1 = 10 per topic
    got = sorted(sorted(c.vocab[w] for w in s) for s in sets)
    assert got == sorted([sorted(FRUIT), sorted(MUSIC)])
    # each topic puts almost all its mass on its own vocabulary
    fruit = np.array([c.vocab.index(w) for w in FRUIT])
    mass = t.word_topic[:, fruit].sum(1)
    assert max(mass) > 0.95 and min(mass) < 0.05


def test_same_seed_same_topics_other_seed_other_init(planted: tuple[Corpus, Topics]) -> None:
    c, t = planted
    again = fit_lda(c, QUICK, seed=3, progress=False)
    assert np.array_equal(t.word_topic, again.word_topic)
    other = fit_lda(c, QUICK.updated({"passes": 1}), seed=4, progress=False)
    big = fit_lda(c, QUICK.updated({"passes": 1}), seed=4 + 2**32, progress=False)  # 63-bit derived seeds: mod 2**32
    assert np.array_equal(big.word_topic, other.word_topic)
    assert not np.array_equal(
        fit_lda(c, QUICK.updated({"passes": 1}), seed=3, progress=False).word_topic, other.word_topic
    )


def test_progress_bar_run_is_gensims_passes(planted: tuple[Corpus, Topics]) -> None:
    c, _t = planted
    lda_ids, bow = _bow(c)
    # chunks of 16 documents: several online updates per pass, where a loop of update() calls would differ
    cfg = QUICK.updated({"chunksize": 16, "passes": 4})
    mine = fit_lda(c, cfg, seed=11, progress=True)
    ref = (
        LdaModel(
            bow,
            num_topics=2,
            id2word={i: c.vocab[w] for i, w in enumerate(lda_ids)},
            chunksize=16,
            passes=4,
            iterations=50,
            eval_every=None,
            random_state=11,
        )
        .get_topics()
        .astype(np.float64)
    )
    ref /= ref.sum(1, keepdims=True)
    assert mine.passes == 4
    np.testing.assert_allclose(mine.word_topic[:, lda_ids], ref, rtol=1e-12, atol=0)


def test_table2_counts_imply_floor_plus_one() -> None:
    """Table 2: 105, 435, 1711 pairs = C(15,2), C(30,2), C(59,2) words per topic at θ = 5e-4, 1e-3, 2e-3."""
    rows = {0.0005: 105, 0.001: 435, 0.002: 1711}
    assert [math.comb(k, 2) for k in (15, 30, 59)] == list(rows.values())
    ns = range(20_000, 40_000)
    plus_one = consistent_vocab_sizes(rows, words_per_topic, ns)
    assert plus_one == list(range(29_000, 29_500))
    assert consistent_vocab_sizes(rows, lambda t, n: math.floor(round(t * n, 9)), ns) == []  # {i <= θn}, 1-based
    assert consistent_vocab_sizes(rows, lambda t, n: round(t * n), ns) == list(range(29_500, 29_750))


def test_words_per_topic_is_exact() -> None:
    assert math.floor(0.0003 * 10_000) == 2 and math.floor(0.29 * 100) == 28  # float products fall below 3, 29 ...
    assert words_per_topic(0.0003, 10_000) == 4 and words_per_topic(0.29, 100) == 30  # ... the count does not
    assert words_per_topic(0.001, 29_000) == 30
    assert words_per_topic(0.0005, 30_522) == 16 and words_per_topic(0.3, 10) == 4
    assert words_per_topic(0.99, 5) == 5  # never more than n
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="theta"):
            words_per_topic(bad, 10)


def _brute_sets(word_topic: np.ndarray, theta: float) -> list[set[int]]:
    seen = [w for w in range(word_topic.shape[1]) if word_topic[:, w].sum() > 0]
    k = math.floor(round(theta * len(seen), 9)) + 1  # round: θn exactly (see test_words_per_topic_is_exact)
    out = []
    for row in word_topic:
        ranked = sorted(seen, key=lambda w: (-row[w], w))
        out.append(set(ranked[:k]))
    return out


def _random_topics(K: int, n: int, seed: int, ties: bool = False) -> Topics:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n, 0.3), size=K)
    if ties:
        p = np.round(p, 2) + 1e-9  # many equal probabilities: the tie-break decides
    p[:, rng.choice(n, size=n // 5, replace=False)] = 0.0  # words LDA never saw
    return Topics(word_topic=p / p.sum(1, keepdims=True))


@pytest.mark.parametrize("seed, ties", [(0, False), (1, True)])
def test_theta_filter_and_assignment_against_brute_force(seed: int, ties: bool) -> None:
    t = _random_topics(K=6, n=250, seed=seed, ties=ties)
    for theta in (0.002, 0.02, 0.05):
        sets = topic_word_sets(t, theta)
        brute = _brute_sets(t.word_topic, theta)
        assert [set(s.tolist()) for s in sets] == brute
        assert all(len(s) == words_per_topic(theta, t.lda_ids.size) for s in sets)
        single, multi = assign(sets, t, "single"), assign(sets, t, "multi")
        for w in set().union(*brute):
            owners = [k for k in range(t.K) if w in brute[k]]
            assert multi[w] == frozenset(owners)
            best = max(owners, key=lambda k: (t.word_topic[k, w], -k))
            assert single[w] == frozenset({best})
        assert set(single) == set(multi) == set().union(*brute)
        # same-topic / different-topic pair counts of the filter, by a loop over word pairs
        words = sorted(multi)
        same_multi = sum(1 for i, a in enumerate(words) for b in words[i + 1 :] if multi[a] & multi[b])
        same_single = sum(1 for i, a in enumerate(words) for b in words[i + 1 :] if single[a] == single[b])
        topic_sizes = Counter(next(iter(single[w])) for w in words)
        assert same_single == sum(math.comb(k, 2) for k in topic_sizes.values())
        assert same_multi >= same_single


def test_assign_hand_example() -> None:
    wt = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.4, 0.5, 0.0], [0.1, 0.3, 0.1, 0.5]])
    t = Topics(word_topic=wt)
    sets = [np.array([0, 1]), np.array([2, 1]), np.array([3, 1])]
    assert assign(sets, t, "multi") == {
        0: frozenset({0}),
        1: frozenset({0, 1, 2}),
        2: frozenset({1}),
        3: frozenset({2}),
    }
    # word 1: p = 0.3, 0.4, 0.3 -> topic 1
    assert assign(sets, t, "single") == {0: frozenset({0}), 1: frozenset({1}), 2: frozenset({1}), 3: frozenset({2})}
    with pytest.raises(ValueError, match="mode"):
        assign(sets, t, "all")  # type: ignore[arg-type]


def test_config_bounds_and_empty_corpus() -> None:
    with pytest.raises(ConfigError, match="topics"):
        validate_config(LDAConfig, {"topics": 1})
    with pytest.raises(ConfigError, match="alpha"):
        validate_config(LDAConfig, {"alpha": "uniform"})
    c = Corpus(docs=[["the"]], vocab=["the"], lda_docs=[[]], provenance="stop words only")
    with pytest.raises(ConfigError, match="LDA"):
        fit_lda(c, QUICK, seed=0, progress=False)


def test_fig3_words_are_the_unambiguous_top_words_of_the_clearest_topics():
    wt = np.zeros((4, 12))
    wt[0, [0, 1, 2, 3]] = [0.4, 0.3, 0.2, 0.1]
    wt[1, [4, 5, 6]] = [0.5, 0.3, 0.2]
    wt[2, [7, 8, 9]] = [0.34, 0.33, 0.33]
    wt[3, [10, 11, 0]] = [0.45, 0.45, 0.10]  # word 0 belongs to topic 0 (0.4 > 0.1): topic 3 has 2 own words
    topics = Topics(word_topic=wt)
    groups = fig3_words(topics, np.arange(12))
    # third own word's probability: topic 2: 0.33, topic 1: 0.2, topic 0: 0.2 (tie: lower topic id first)
    assert [g.tolist() for g in groups] == [[7, 8, 9], [0, 1, 2], [4, 5, 6]]
    with pytest.raises(ValueError, match=re.escape("Fig. 3")):
        fig3_words(Topics(word_topic=wt[:2]), np.arange(12))
