"""seed004 real_text: the measures on a planted two-topic corpus with embeddings set by hand (ratios far above 1)
and random ones (about 1 in attention); the LDA fit read from the run's cache instead of refitted; an older run's
corpus facts recomputed (Fig. 3's word choice and the unigram loss are tested in ``tests/tasks/``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.experiments.paper004_topics.common.real_text import (
    OFFSET,
    RealData,
    corpus_facts,
    encoder_config,
    measure,
    split_windows,
)
from tdlab.experiments.paper004_topics.real import TopicsReal
from tdlab.models.gpt import GPT
from tdlab.tasks.lda_topics import Topics
from tdlab.tasks.text_corpus import CorpusConfig, encode_windows, load_corpus, unigram_loss

# --- a planted two-topic corpus ------------------------------------------------------------------

TOPIC_A = ["apple", "banana", "cherry", "grape", "lemon", "mango"]
TOPIC_B = ["anchor", "boat", "harbor", "mast", "sail", "ship"]


def _planted_corpus(tmp_path, docs=40, length=24, seed=0):
    """Documents mixing the two planted topics' six words, 70/30 or 30/70 (one document per line)."""
    rng = np.random.default_rng(seed)
    lines = []
    for d in range(docs):
        share = 0.7 if d % 2 == 0 else 0.3
        words = [rng.choice(TOPIC_A) if rng.random() < share else rng.choice(TOPIC_B) for _ in range(length)]
        lines.append(" ".join(words))
    f = tmp_path / "planted.txt"
    f.write_text("\n".join(lines) + "\n")
    return load_corpus(CorpusConfig(source="text", path=str(f), min_count=1))


def _planted_data(corpus, seq_len=12):
    vocab = corpus.vocab
    wt = np.zeros((2, len(vocab)))
    for t, words in enumerate((TOPIC_A, TOPIC_B)):
        for rank, w in enumerate(words):
            wt[t, vocab.index(w)] = 6 - rank  # a deterministic order inside each topic
    wt /= wt.sum(1, keepdims=True)
    return RealData(corpus, Topics(word_topic=wt), encode_windows(corpus, seq_len, offset=OFFSET), n_test=2)


def _cfg(**over):
    exp = TopicsReal()
    sets = [f"{k}={v}" for k, v in over.items()]
    return exp.make_config(
        "quick",
        ["model.d=8", "model.layers=1", "model.heads=2", "train.seq_len=12", "thetas=[0.4]", "attn_windows=64", *sets],
        members=2,
    )


def test_measures_on_planted_topics_hand_set_embeddings_far_above_1_random_near_1(tmp_path):
    """Embeddings set to the planted topics (one direction per topic, a shared direction, noise) give cosine and
    dot ratios ≈ 2; attention made to prefer same-topic keys gives an attention ratio above 1; random embeddings give
    cosine ratios of no fixed sign but attention within 1 ± 0.05 for an untrained encoder."""
    corpus = _planted_corpus(tmp_path)
    data = _planted_data(corpus)
    cfg = _cfg()
    gcfg = encoder_config(cfg, data.vocab)
    model = GPT(gcfg, [1, 2]).eval()
    planted = GPT(gcfg, [1, 2]).eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for i, w in enumerate(corpus.vocab):
            topic = 0 if w in TOPIC_A else 1
            planted.wte[:, OFFSET + i] = 0.1 * torch.randn(2, 8, generator=g)
            planted.wte[:, OFFSET + i, topic] += 1.0
            planted.wte[:, OFFSET + i, 2] += 1.0  # a shared direction (real embeddings are anisotropic): the
            # different-topic mean cosine is then ≈ 1/2, not ≈ 0, and the ratio of means is well defined
        # attention that prefers keys of the same planted topic: W_Q = W_K = 10 * projection on the topic axes
        blk = planted.blocks[0].attn
        P = torch.zeros(8, 8)
        P[0, 0] = P[1, 1] = 10.0
        blk.W_Q.weight[:] = P
        blk.W_K.weight[:] = P
    rows, fig3 = measure(planted, data, cfg)
    got = {(m, n): v for _, m, n, v in rows}
    for e in range(2):
        assert got[(e, "single/0.4/cosine")] > 1.7  # ≈ 1 / (1/2)
        assert got[(e, "single/0.4/dot")] > 1.7
        assert got[(e, "single/0.4/attention")] > 1.5
        assert got[(e, "single/0.4/same_pairs")] == 2 * math.comb(5, 2)  # ⌊0.4 · 12⌋ + 1 = 5 words per topic
    rows, _ = measure(model, data, cfg)
    got = {(m, n): v for _, m, n, v in rows}
    for e in range(2):
        assert abs(got[(e, "single/0.4/attention")] - 1.0) < 0.05
    assert fig3 == []  # two topics: no 3 x 3 Fig. 3 map (its claim is then not stated)


def test_prepare_data_reads_the_cached_lda_fit_instead_of_refitting(tmp_path, monkeypatch, real_tiny):
    """A resumed run (same cache folder) must not refit LDA: the second call finds the .npz and never calls fit_lda."""
    import tdlab.experiments.paper004_topics.common.real_text as tr

    cfg = TopicsReal().make_config("quick", real_tiny, members=1)
    first = tr.prepare_data(cfg, tmp_path / "cache", progress=False)

    def refit(*a, **k):
        raise AssertionError("LDA refitted although its fit is cached")

    monkeypatch.setattr(tr, "fit_lda", refit)
    again = tr.prepare_data(cfg, tmp_path / "cache", progress=False)
    np.testing.assert_array_equal(again.topics.word_topic, first.topics.word_topic)
    assert torch.equal(again.windows, first.windows) and again.n_test == first.n_test
    assert (
        int(first.windows.min()) >= OFFSET and int(first.windows.max()) == len(first.corpus.vocab) + OFFSET
    )  # [UNK] = n + 2


def test_corpus_facts_recompute_what_an_older_run_lacks(tmp_path, real_tiny):
    cfg = TopicsReal().make_config("quick", real_tiny, members=1)
    assert corpus_facts(cfg, tmp_path / "nothing") == {}
    corpus = load_corpus(cfg.corpus, cache_dir=tmp_path)
    windows, n_test = split_windows(cfg, corpus)
    facts = corpus_facts(cfg, tmp_path)
    assert facts["documents"] == 30
    assert facts["unigram_loss"] == pytest.approx(unigram_loss(windows, n_test, len(corpus.vocab) + OFFSET + 1, OFFSET))
    assert 0 < facts["unigram_loss"] < math.log(len(corpus.vocab))  # frequencies beat the uniform predictor
