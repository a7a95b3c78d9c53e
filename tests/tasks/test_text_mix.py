"""The mixed corpus of seed 001 Figs. 1/6 (tdlab.tasks.text_mix): the tokenised texts against the tokenizer's own
encoding (``<|endoftext|>`` appended, cut, padded, masked, each row's source), the folder cache round trip, the
per-source evaluation splits, the sources' raw texts, and the exclusive-token sets against a Counter-based slow version."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tdlab.tasks.text_mix import (
    SOURCES,
    MixedCorpus,
    balanced_exclusive_tokens,
    build_corpus,
    exclusive_tokens,
    source_texts,
    token_counts,
)

TEXTS = {
    "prontoqa": ["Every wumpus is a yumpus. Max is a wumpus. True or false: Max is a yumpus. A: True"] * 3
    + ["Each zumpus is not hot. Rex is a zumpus. True or false: Rex is hot. A: False"],
    "stories": ["Tom saw a red ball.", "Lily was happy and she ran to the park with her dog.", "The end."],
}


@pytest.fixture(scope="module")
def corpus() -> MixedCorpus:
    return build_corpus(TEXTS, "local", 300, 12)


def test_build_corpus_is_the_tokenizers_encoding_cut_padded_and_masked(corpus):
    tok = corpus.tokenizer
    texts = [t for s in SOURCES for t in TEXTS[s]]
    ids = [[*tok.encode_batch([t])[0], tok.eos_id] for t in texts]
    L = min(12, max(map(len, ids)))
    assert corpus.tokens.shape == (len(texts), L) and corpus.mask.dtype == torch.float32
    for i, want in enumerate(ids):
        kept = want[:L]
        n = int(corpus.mask[i].sum())
        assert n == len(kept) and corpus.tokens[i, :n].tolist() == kept
        assert bool((corpus.tokens[i, n:] == tok.eos_id).all()) and bool((corpus.mask[i, n:] == 0).all())
        assert bool(corpus.truncated[i]) == (len(want) > L)
    assert corpus.source.tolist() == [0] * 4 + [1] * 3
    assert corpus.of("stories").tolist() == [4, 5, 6]
    assert corpus.meta["seq_len"] == L and corpus.meta["eos_id"] == tok.eos_id
    assert corpus.meta["truncated_share"]["stories"] == pytest.approx(float(np.mean([len(s) > L for s in ids[4:]])))


def test_the_folder_cache_round_trips(corpus, tmp_path):
    assert not MixedCorpus.cached(tmp_path)
    corpus.save(tmp_path / "data")
    assert MixedCorpus.cached(tmp_path / "data")
    back = MixedCorpus.load(tmp_path / "data")
    for k in ("tokens", "mask", "source", "truncated"):
        assert torch.equal(getattr(back, k), getattr(corpus, k)), k
    assert back.meta == corpus.meta and back.tokenizer.to_json() == corpus.tokenizer.to_json()


def _slow_exclusive(seqs, sources, src, top, ignore):
    """Counter-based reference: tokens of source ``src`` never seen in the other, by count, then id."""
    mine = Counter(t for s, k in zip(seqs, sources, strict=True) if k == src for t in s if t != ignore)
    other = {t for s, k in zip(seqs, sources, strict=True) if k != src for t in s}
    return sorted((t for t in mine if t not in other), key=lambda t: (-mine[t], t))[:top]


def test_exclusive_tokens_match_a_counter_and_are_disjoint():
    rng = np.random.default_rng(0)
    V, eos = 60, 0
    seqs, sources = [], []
    for i in range(80):
        k = i % 2
        n = int(rng.integers(3, 30))
        # overlapping ranges with skewed frequencies: shared and exclusive ids, many count ties
        ids = (rng.zipf(1.5, n) % 35 + (1 if k == 0 else 20)).tolist()
        seqs.append([*ids, eos])
        sources.append(k)
    L = max(map(len, seqs))
    tokens = torch.zeros(len(seqs), L + 3, dtype=torch.long)  # padding with eos (id 0) beyond the mask
    mask = torch.zeros(len(seqs), L + 3)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    tokens[:, -1] = 59  # a padded position holding a token id: masked out, never counted
    counts = token_counts(tokens, mask, torch.tensor(sources), V, ignore=[eos])
    assert counts["prontoqa"][59] == 0 and counts["prontoqa"][eos] == 0
    ex = {s: exclusive_tokens(counts[s], counts[o], 10) for s, o in (("prontoqa", "stories"), ("stories", "prontoqa"))}
    for k, s in enumerate(SOURCES):
        assert ex[s] == _slow_exclusive(seqs, sources, k, 10, eos)
    assert not set(ex["prontoqa"]) & set(ex["stories"])
    for s in SOURCES:
        c = counts[s][ex[s]]
        assert np.all(np.diff(c) <= 0)  # ranked by frequency
        assert len(ex[s]) == 10


def test_balanced_exclusive_tokens_cut_both_sets_to_the_smaller():
    """Source 0 has 3 exclusive ids, source 1 six (eos never counted): both sets are the Counter reference's
    first 3, or ``top`` when fewer."""
    eos = 0
    seqs = [[1, 2, 2, 3, 3, 3, 9, eos], [4, 5, 6, 7, 8, 8, 9, 5, 4, 4, eos], [9, 1, eos], [6, 7, 10, 9, eos]]
    sources = [0, 1, 0, 1]
    L = max(map(len, seqs))
    tokens, mask = torch.zeros(len(seqs), L, dtype=torch.long), torch.zeros(len(seqs), L)
    for i, q in enumerate(seqs):
        tokens[i, : len(q)], mask[i, : len(q)] = torch.tensor(q), 1
    corpus = SimpleNamespace(tokens=tokens, mask=mask, source=torch.tensor(sources), meta={"eos_id": eos})
    got = balanced_exclusive_tokens(corpus, 12, 100)  # type: ignore[arg-type]  # the fields it reads
    assert got == {s: _slow_exclusive(seqs, sources, k, 3, eos) for k, s in enumerate(SOURCES)}
    assert got["prontoqa"] == [3, 1, 2]  # 3 thrice, then 1 and 2 twice each: the smaller id first
    assert balanced_exclusive_tokens(corpus, 12, 2) == {s: v[:2] for s, v in got.items()}  # type: ignore[arg-type]


def test_splits_are_every_row_and_each_sources_first_rows(corpus):
    d = corpus.splits(2)
    assert set(d) == {"train", *SOURCES}
    assert torch.equal(d["train"]["tokens"], corpus.tokens) and torch.equal(d["train"]["mask"], corpus.mask)
    for s, rows in (("prontoqa", [0, 1]), ("stories", [4, 5])):  # by hand: the corpus's rows 0-3 and 4-6
        assert torch.equal(d[s]["tokens"], corpus.tokens[rows]) and torch.equal(d[s]["mask"], corpus.mask[rows])


def test_source_texts_are_the_generators_draws_or_the_users_file(tmp_path):
    from tdlab.seeding import derive_seed
    from tdlab.tasks.prontoqa import ProntoQAConfig, generate
    from tdlab.tasks.stories import standin_stories

    task = ProntoQAConfig()
    got = source_texts(3, 4, 5, task)
    assert got["prontoqa"] == [e.text() for e in generate(4, derive_seed(3, "prontoqa"), task)]
    assert got["stories"] == standin_stories(5, derive_seed(3, "stories"))
    f = tmp_path / "stories.txt"
    f.write_text("<|endoftext|>".join(f"Story {i}." for i in range(6)), encoding="utf-8")
    assert source_texts(3, 4, 2, task, stories=str(f))["stories"] == ["Story 0.", "Story 1."]
