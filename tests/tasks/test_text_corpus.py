"""Real-text corpora for seed 004 §6.2 (tasks.text_corpus): gensim's shipped Lee file and Wikipedia
sample read as gensim reads them, the two vocabularies against slow recomputations, the cache, the
windows, the unigram model's held-out loss against a direct count, and one clear ConfigError naming the field for
every bad file or config."""

from __future__ import annotations

import bz2
import itertools
import json
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("gensim")

from gensim.corpora.wikicorpus import WikiCorpus
from gensim.corpora.wikicorpus import tokenize as gensim_tokenize
from gensim.parsing.preprocessing import STOPWORDS
from gensim.test.utils import datapath

from tdlab.config import ConfigError, validate_config
from tdlab.tasks.text_corpus import (
    LEE,
    WIKI_SAMPLE,
    Corpus,
    CorpusConfig,
    build_vocab,
    encode_windows,
    load_corpus,
    unigram_loss,
)


@pytest.fixture(scope="module")
def lee() -> Corpus:
    return load_corpus(CorpusConfig(source="lee"))


def test_lee_is_gensims_tokenisation_of_every_line(lee: Corpus) -> None:
    lines = Path(datapath(LEE)).read_text(encoding="utf-8").splitlines()
    expected = [t for t in (gensim_tokenize(line) for line in lines) if t]
    assert len(lee.docs) == 300 and lee.docs == expected
    assert all(w.islower() and 2 <= len(w) <= 15 for d in lee.docs[:20] for w in d)
    assert "lee_background.cor" in lee.provenance and "300 documents" in lee.provenance


def test_vocabularies_against_a_slow_recount(lee: Corpus) -> None:
    counts = Counter(w for d in lee.docs for w in d)
    kept = [w for w, c in counts.items() if c >= 5]
    assert sorted(lee.vocab) == sorted(kept)  # 1750 < max_vocab: every word seen >= 5 times
    # decreasing count, ties alphabetical
    assert all((counts[a], b) > (counts[b], a) or (counts[a] > counts[b]) for a, b in itertools.pairwise(lee.vocab))
    assert lee.counts.tolist() == [counts[w] for w in lee.vocab]
    assert lee.stop.tolist() == [w in STOPWORDS for w in lee.vocab] and lee.stop.sum() > 100
    index = {w: i for i, w in enumerate(lee.vocab)}
    for d, lda in zip(lee.docs, lee.lda_docs, strict=True):
        assert lda == [index[w] for w in d if w in index and w not in STOPWORDS]
    # ids: UNK = len(vocab)
    d = lee.docs[0]
    ids = lee.ids(0)
    assert ids.dtype == np.int64 and ids.shape == (len(d),)
    assert ids.tolist() == [index.get(w, len(lee.vocab)) for w in d]
    assert lee.unk_id == len(lee.vocab) and (ids == lee.unk_id).any()
    assert set(lee.lda_vocab.tolist()) == {i for doc in lee.lda_docs for i in doc}


def test_max_vocab_keeps_the_most_frequent() -> None:
    docs = [["a"] * 5 + ["b"] * 3 + ["c"] * 3 + ["d"] * 2 + ["e"]]
    vocab, counts = build_vocab(docs, min_count=2, max_vocab=3)
    assert vocab == ["a", "b", "c"] and counts.tolist() == [5, 3, 3]  # b, c tie: alphabetical
    assert build_vocab(docs, min_count=2, max_vocab=10)[0] == ["a", "b", "c", "d"]


def test_wiki_sample_is_wikicorpus_get_texts() -> None:
    c = load_corpus(CorpusConfig(source="wiki", max_docs=3, min_count=1))
    wc = WikiCorpus(datapath(WIKI_SAMPLE), dictionary={}, processes=1)
    texts = wc.get_texts()
    expected = [next(texts) for _ in range(3)]
    texts.close()
    assert c.docs == expected
    assert all(len(d) >= 50 for d in c.docs)
    assert "Wikipedia sample" in c.provenance and "3 documents" in c.provenance


def test_cache_is_written_read_and_rebuilt_when_damaged(tmp_path: Path) -> None:
    cfg = CorpusConfig(source="lee", max_docs=20, min_count=1)
    first = load_corpus(cfg, tmp_path)
    (cache,) = tmp_path.glob("corpus-lee-*.json")
    assert json.loads(cache.read_text())["docs"] == first.docs
    # the next load reads the cache: planted documents come back
    cache.write_text(json.dumps({"v": 1, "docs": [["planted", "words"], ["planted"]]}))
    assert load_corpus(cfg, tmp_path).docs == [["planted", "words"], ["planted"]]
    # another config has another cache file
    load_corpus(cfg.updated({"max_docs": 10}), tmp_path)
    assert len(list(tmp_path.glob("corpus-lee-*.json"))) == 2
    # a damaged cache is ignored and rewritten
    cache.write_bytes(b"\x00garbage{")
    again = load_corpus(cfg, tmp_path)
    assert again.docs == first.docs and json.loads(cache.read_text())["docs"] == first.docs


def test_user_text_file_one_document_per_line(tmp_path: Path) -> None:
    f = tmp_path / "docs.txt"
    f.write_text("The cat sat on the mat.\n\n  \nA dog, the DOG and 42 cats!\nx y\nlast one here\n", encoding="utf-8")
    c = load_corpus(CorpusConfig(source="text", path=str(f), min_count=1))
    # empty lines and a line of 1-character tokens hold no document
    assert c.docs == [
        ["the", "cat", "sat", "on", "the", "mat"],
        ["dog", "the", "dog", "and", "cats"],
        ["last", "one", "here"],
    ]
    assert c.vocab[:2] == ["the", "dog"]
    assert str(f) in c.provenance
    two = load_corpus(CorpusConfig(source="text", path=str(f), min_count=1, max_docs=2))
    assert two.docs == c.docs[:2]


def test_user_bz2_is_read_as_a_wikipedia_dump(tmp_path: Path) -> None:
    f = tmp_path / "dump.xml.bz2"
    f.write_bytes(Path(datapath(WIKI_SAMPLE)).read_bytes())
    mine = load_corpus(CorpusConfig(source="text", path=str(f), max_docs=2, min_count=1))
    shipped = load_corpus(CorpusConfig(source="wiki", max_docs=2, min_count=1))
    assert mine.docs == shipped.docs


def test_windows_drop_or_pad_the_tail() -> None:
    c = Corpus(
        docs=[list("abcdefg"), list("ab"), list("xyzabc")],
        vocab=["a", "b", "c", "d", "e", "f", "g"],
        lda_docs=[[], [], []],
        provenance="test",
    )
    # doc 0: ids 0..6; doc 1: 0, 1; doc 2: x, y, z unknown (7), then 0, 1, 2
    w = encode_windows(c, 3, offset=2)
    assert w.dtype == torch.long
    assert w.tolist() == [[2, 3, 4], [5, 6, 7], [9, 9, 9], [2, 3, 4]]
    p = encode_windows(c, 3, offset=2, pad_id=1)
    assert p.tolist() == [[2, 3, 4], [5, 6, 7], [8, 1, 1], [2, 3, 1], [9, 9, 9], [2, 3, 4]]
    assert encode_windows(c, 8).shape == (0, 8)
    with pytest.raises(ValueError, match="seq_len"):
        encode_windows(c, 0)


def test_missing_file_names_corpus_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"corpus\.path: .*absent.txt': no such file"):
        load_corpus(CorpusConfig(source="text", path=str(tmp_path / "absent.txt")))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "name, content, what",
    [
        ("garbage.xml.bz2", b"\x00\x01 not a bz2 stream at all" * 10, "Wikipedia .xml.bz2 dump"),
        ("notxml.xml.bz2", bz2.compress(b"<<< not xml >>>" * 10), "Wikipedia .xml.bz2 dump"),
        ("latin1.txt", "caf\xe9 ol\xe9 words here\n".encode("latin-1"), "UTF-8 text"),
        ("empty.txt", b"\n \n1 2 3\n", "no document"),
    ],
)
def test_corrupt_file_names_corpus_path(tmp_path: Path, name: str, content: bytes, what: str) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"corpus\.path: .*" + what):
        load_corpus(CorpusConfig(source="text", path=str(f)), cache)
    assert not cache.exists()  # nothing written


def test_truncated_bz2_dump(tmp_path: Path) -> None:
    f = tmp_path / "cut.xml.bz2"
    f.write_bytes(Path(datapath(WIKI_SAMPLE)).read_bytes()[:200_000])
    with pytest.raises(ConfigError, match=r"corpus\.path: cannot read .* as a Wikipedia"):
        load_corpus(CorpusConfig(source="text", path=str(f)))


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"corpus\.path is required"):
        validate_config(CorpusConfig, {"source": "text"})
    with pytest.raises(ConfigError, match=r"corpus\.path is only read"):
        validate_config(CorpusConfig, {"source": "wiki", "path": "/x.txt"})
    with pytest.raises(ConfigError, match="max_docs"):
        validate_config(CorpusConfig, {"max_docs": 0})
    with pytest.raises(ConfigError, match="source"):
        validate_config(CorpusConfig, {"source": "enwiki"})
    with pytest.raises(ConfigError, match="min_count"):
        load_corpus(CorpusConfig(source="lee", max_docs=1, min_count=10_000))


def test_missing_gensim_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gensim", None)  # `import gensim` now raises ImportError
    monkeypatch.setitem(sys.modules, "gensim.corpora", None)
    with pytest.raises(ConfigError, match=r"gensim.*pip install"):
        load_corpus(CorpusConfig(source="wiki"))


def test_missing_shipped_data_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gensim.test.utils

    monkeypatch.setattr(gensim.test.utils, "datapath", lambda name: str(tmp_path / name))
    for source in ("wiki", "lee"):
        with pytest.raises(ConfigError, match=r"corpus\.source: .*missing.*gensim.*pip install"):
            load_corpus(CorpusConfig(source=source))


def test_a_path_alone_reads_the_users_file_and_a_path_with_another_source_is_refused():
    # one --set points the analysis at a user's own text
    assert CorpusConfig(path="my.txt").source == "text"
    assert CorpusConfig().source == "wiki"
    with pytest.raises(ValueError, match=re.escape("corpus.path is only read when corpus.source is 'text'")):
        CorpusConfig(source="lee", path="my.txt")
    with pytest.raises(ValueError, match=re.escape("corpus.path is required")):
        CorpusConfig(source="text")


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: (d / "texts").mkdir() or d / "texts", "a folder, not a regular file"),
        (lambda d: Path("/dev/zero"), "a device, FIFO or socket, not a regular file"),
        (lambda d: os.symlink("loop", d / "loop") or d / "loop", "leads nowhere"),
    ],
)
def test_a_path_that_is_not_a_file_is_named_for_what_it_is(tmp_path: Path, make, words) -> None:
    """corpus.path=DIR or /dev/zero was reported as "no such file"."""
    with pytest.raises(ConfigError, match=words) as err:
        load_corpus(CorpusConfig(source="text", path=str(make(tmp_path))))
    assert str(err.value).startswith("corpus.path: ") and "no such file" not in str(err.value)


def test_unigram_loss_is_the_training_frequencies_on_the_heldout_words():
    windows = torch.tensor([[2, 2, 3], [2, 4, 4], [3, 2, 5]])  # ids from offset 2; vocab 6 (ids 2..5 are words)
    # training words (first two windows): 2 x3, 3 x1, 4 x2, 5 x0; add-one: 4, 2, 3, 1 over 10
    p = {2: 0.4, 3: 0.2, 4: 0.3, 5: 0.1}
    expected = -np.mean([math.log(p[w]) for w in (3, 2, 5)])
    assert unigram_loss(windows, 1, 6, 2) == pytest.approx(expected, rel=1e-12)
    # the offset only shifts the ids: the same words from offset 0 give the same loss
    assert unigram_loss(windows - 2, 1, 4, 0) == pytest.approx(expected, rel=1e-12)
