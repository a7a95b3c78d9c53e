"""Real text for the topic analysis of seed 004 §6.2 / App. G.3: tokenised documents and vocabularies.

The seed fits LDA on "a sample of Wikipedia corpus" tokenised by each model's tokenizer, with stop
words filtered (§6.2, App. G.3). tdlab has no network, so the corpora are files on this machine:

* ``source="wiki"`` (default): the Wikipedia dump sample that gensim 4.4's wheel ships as test data,
  ``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``, read exactly as gensim's
  ``WikiCorpus.get_texts`` reads it (main-namespace pages, markup stripped by ``filter_wiki``,
  :func:`gensim.corpora.wikicorpus.tokenize`, articles with fewer than 50 tokens and pages of ignored
  namespaces dropped) but in this process, without ``WikiCorpus``'s worker pool: 106 articles,
  0.45 M tokens. It is a *sample*, not the seed's full dump.
* ``source="lee"``: gensim's ``lee_background.cor``, 300 news documents (one per line), 58 k tokens.
* ``source="text"``: a user file ``path``: a plain UTF-8 text file with one document per line, or
  (a name ending in ``.bz2``) a Wikipedia ``.xml.bz2`` dump read as above.

Tokenisation is gensim's Wikipedia tokenizer for every source (lower case, alphabetic tokens of 2..15
characters, none starting with ``_``). The model is word-level (one position = one word, so the
seed's "attention between words" is attention between positions); its vocabulary keeps **stop
words** (the encoder reads running text) and LDA's view drops them (``gensim.parsing.preprocessing.
STOPWORDS``, 337 words), as the seed's "we filter stop words" says.

Vocabulary (choices where the seed is silent; the seed used each model's subword vocabulary):

* the words that occur at least ``min_count`` times, the ``max_vocab`` most frequent of them,
  ordered by decreasing count (ties by the word, so the order is deterministic); word id = index;
* every other word is ``[UNK]`` for the model, id ``len(vocab)`` (:attr:`Corpus.unk_id`), and is
  dropped from LDA's documents.

The tokenised documents are cached as JSON in ``cache_dir`` (file name keyed by source, resolved path,
file size and modification time, ``max_docs`` and :data:`CACHE_VERSION`); a damaged cache file is
ignored and rewritten.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.config import Config, ConfigError, echo
from tdlab.safeio import path_kind

__all__ = [
    "CACHE_VERSION",
    "LEE",
    "WIKI_SAMPLE",
    "Corpus",
    "CorpusConfig",
    "encode_windows",
    "load_corpus",
    "shipped_path",
    "stop_words",
    "unigram_loss",
]

WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"  # gensim 4.4 test data
LEE = "lee_background.cor"  # gensim 4.4 test data: 300 news documents, one per line
CACHE_VERSION = 1  # bump when tokenisation changes, so old caches are not reused
ARTICLE_MIN_TOKENS = 50  # WikiCorpus's default: redirects and stubs are pruned
TOKEN_MIN_LEN, TOKEN_MAX_LEN = 2, 15  # WikiCorpus's defaults
GENSIM_HINT = "the package gensim (pip install 'gensim>=4.4') provides it"


class CorpusConfig(Config):
    """Which text the topic analysis reads (seed 004 §6.2: "a sample of Wikipedia corpus")."""

    source: Literal["wiki", "lee", "text"] = "wiki"  # gensim's shipped Wikipedia sample (the seed's data kind)
    path: str | None = None  # source="text": one document per line, or a Wikipedia .xml.bz2 dump
    max_docs: int | None = Field(None, ge=1, le=10_000_000)  # only the first N documents (None: all)
    min_count: int = Field(5, ge=1, le=1_000_000)  # ours: rarer words are [UNK] / dropped from LDA
    max_vocab: int = Field(5000, ge=2, le=1_000_000)  # ours: model vocabulary cap (most frequent words)

    @model_validator(mode="before")
    @classmethod
    def _path_means_text(cls, data: Any) -> Any:
        # One --set points the analysis at a user's file: a path given without a source reads that file.
        if isinstance(data, dict) and data.get("path") is not None and "source" not in data:
            return {**data, "source": "text"}
        return data

    @model_validator(mode="after")
    def _path_iff_text(self) -> CorpusConfig:
        if self.source == "text" and not self.path:
            raise ValueError(
                "corpus.path is required when corpus.source is 'text' (a text file, one document "
                "per line, or a Wikipedia .xml.bz2 dump)"
            )
        if self.source != "text" and self.path is not None:
            raise ValueError(
                f"corpus.path is only read when corpus.source is 'text' (got source={self.source!r}); "
                "set corpus.source=text to read your own file"
            )
        return self


@dataclass
class Corpus:
    """Tokenised documents and the two views of them (model and LDA).

    Attributes:
        docs: tokenised documents, stop words kept (what the encoder reads).
        vocab: model vocabulary, ``vocab[i]`` = word of id ``i`` (ids start at 0; callers offset them
            by their special tokens). ``[UNK]`` is id ``len(vocab)``.
        lda_docs: per document the word ids LDA sees: in-vocabulary, non-stop words, in text order.
        provenance: one line saying what was read.
        counts: ``(len(vocab),)`` corpus counts of the vocabulary words.
        stop: ``(len(vocab),)`` bool, True for stop words (never seen by LDA).
    """

    docs: list[list[str]]
    vocab: list[str]
    lda_docs: list[list[int]]
    provenance: str
    counts: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=np.int64))
    stop: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=bool))
    _index: dict[str, int] = field(repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {w: i for i, w in enumerate(self.vocab)}

    @property
    def unk_id(self) -> int:
        """Id of ``[UNK]`` (every out-of-vocabulary word): ``len(vocab)``."""
        return len(self.vocab)

    @property
    def lda_vocab(self) -> np.ndarray:
        """Sorted ids of the words LDA sees at least once (App. G.3's vocabulary of size n)."""
        seen = np.zeros(len(self.vocab), dtype=bool)
        for d in self.lda_docs:
            seen[d] = True
        return np.flatnonzero(seen)

    def word_id(self, word: str) -> int:
        """Id of ``word``, or :attr:`unk_id`."""
        return self._index.get(word, self.unk_id)

    def ids(self, doc: int) -> np.ndarray:
        """``(len(docs[doc]),)`` int64 word ids of document ``doc``; out-of-vocabulary words are
        :attr:`unk_id` = ``len(vocab)``."""
        unk = self.unk_id
        return np.fromiter((self._index.get(w, unk) for w in self.docs[doc]), dtype=np.int64, count=len(self.docs[doc]))

    @property
    def tokens(self) -> int:
        """Total number of tokens over all documents."""
        return sum(len(d) for d in self.docs)


def _gensim() -> Any:
    try:
        import gensim  # noqa: F401 - lazily: only the real-text experiments need it
        from gensim.corpora import wikicorpus
    except ImportError:
        raise ConfigError(f"corpus.source: reading and tokenising text needs gensim; {GENSIM_HINT}") from None
    return wikicorpus


def stop_words() -> frozenset[str]:
    """gensim's English stop words (``gensim.parsing.preprocessing.STOPWORDS``)."""
    _gensim()
    from gensim.parsing.preprocessing import STOPWORDS

    return frozenset(STOPWORDS)


def shipped_path(name: str) -> Path:
    """Path of a data file shipped in gensim's wheel (``gensim/test/test_data``).

    Raises:
        ConfigError: gensim missing, or its test data absent (naming the package and how to install it).
    """
    _gensim()
    from gensim.test.utils import datapath

    p = Path(datapath(name))
    if not p.is_file():
        raise ConfigError(
            f"corpus.source: the shipped corpus file {name} is missing from gensim's test data "
            f"({p.parent}); {GENSIM_HINT}, or set corpus.source=text and corpus.path=FILE"
        )
    return p


def _file_of(cfg: CorpusConfig) -> Path:
    if cfg.source == "wiki":
        return shipped_path(WIKI_SAMPLE)
    if cfg.source == "lee":
        return shipped_path(LEE)
    p = Path(str(cfg.path)).expanduser()
    kind = path_kind(p)
    if kind != "a regular file":
        raise ConfigError(
            f"corpus.path: {echo(str(cfg.path))}: {kind}, not a regular file; give a UTF-8 text file "
            f"(one document per line) or a Wikipedia .xml.bz2 dump"
        )
    return p


def _is_wiki_dump(cfg: CorpusConfig, path: Path) -> bool:
    return cfg.source == "wiki" or (cfg.source == "text" and path.name.endswith(".bz2"))


def _read_wiki(path: Path, max_docs: int | None, where: str) -> list[list[str]]:
    """Articles of a Wikipedia dump as gensim's ``WikiCorpus.get_texts`` yields them (single process)."""
    wk = _gensim()
    docs: list[list[str]] = []
    try:
        with bz2.BZ2File(path) as fh:
            for title, text, pageid in wk.extract_pages(fh, ("0",), None):
                tokens, title, _ = wk.process_article(
                    (text, title, pageid), token_min_len=TOKEN_MIN_LEN, token_max_len=TOKEN_MAX_LEN, lower=True
                )
                if len(tokens) < ARTICLE_MIN_TOKENS or any(title.startswith(ns + ":") for ns in wk.IGNORED_NAMESPACES):
                    continue
                docs.append(tokens)
                if max_docs is not None and len(docs) >= max_docs:
                    break
    except Exception as exc:
        raise ConfigError(
            f"{where}: cannot read {echo(str(path))} as a Wikipedia .xml.bz2 dump "
            f"({type(exc).__name__}: {echo(str(exc))})"
        ) from None
    return docs


def _read_lines(path: Path, max_docs: int | None, where: str) -> list[list[str]]:
    """One document per line (UTF-8); lines without any token are skipped."""
    wk = _gensim()
    docs: list[list[str]] = []
    try:
        with open(path, encoding="utf-8", errors="strict") as fh:
            for line in fh:
                tokens = wk.tokenize(line, TOKEN_MIN_LEN, TOKEN_MAX_LEN, True)
                if tokens:
                    docs.append(tokens)
                    if max_docs is not None and len(docs) >= max_docs:
                        break
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(
            f"{where}: cannot read {echo(str(path))} as UTF-8 text, one document per line "
            f"({type(exc).__name__}: {echo(str(exc))})"
        ) from None
    return docs


def _cache_file(cfg: CorpusConfig, path: Path, cache_dir: Path) -> Path:
    st = path.stat()
    key = json.dumps(
        {
            "v": CACHE_VERSION,
            "source": cfg.source,
            "path": str(path.resolve()),
            "size": st.st_size,
            "mtime": st.st_mtime_ns,
            "max_docs": cfg.max_docs,
        },
        sort_keys=True,
    )
    return cache_dir / f"corpus-{cfg.source}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read_cache(file: Path) -> list[list[str]] | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        docs = data["docs"]
        if data.get("v") != CACHE_VERSION or not isinstance(docs, list) or not all(isinstance(d, list) for d in docs):
            return None
        return docs
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or damaged: re-tokenise and rewrite


def _write_cache(file: Path, docs: list[list[str]]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=file.name, suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"v": CACHE_VERSION, "docs": docs}, fh, separators=(",", ":"))
        os.replace(tmp, file)  # atomic: a reader never sees half a file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def tokenised_documents(cfg: CorpusConfig, cache_dir: Path | None = None) -> tuple[list[list[str]], Path, float]:
    """The tokenised documents of ``cfg`` (from the cache when there), their file, and seconds spent.

    Raises:
        ConfigError: a missing or unreadable file (naming ``corpus.path``, or for the shipped data the
            package gensim and how to install it), or a file without any document.
    """
    t0 = time.perf_counter()
    path = _file_of(cfg)
    where = "corpus.path" if cfg.source == "text" else "corpus.source"
    cache = _cache_file(cfg, path, Path(cache_dir)) if cache_dir is not None else None
    docs = _read_cache(cache) if cache is not None and cache.is_file() else None
    if docs is None:
        docs = (
            _read_wiki(path, cfg.max_docs, where)
            if _is_wiki_dump(cfg, path)
            else _read_lines(path, cfg.max_docs, where)
        )
        if not docs:
            raise ConfigError(
                f"{where}: {echo(str(path))} holds no document with a word token"
                + (f" (a Wikipedia article needs at least {ARTICLE_MIN_TOKENS})" if _is_wiki_dump(cfg, path) else "")
            )
        if cache is not None:
            _write_cache(cache, docs)
    return docs, path, time.perf_counter() - t0


def build_vocab(docs: list[list[str]], min_count: int, max_vocab: int) -> tuple[list[str], np.ndarray]:
    """The model vocabulary: words with count >= ``min_count``, the ``max_vocab`` most frequent,
    ordered by decreasing count then by the word. Returns ``(vocab, counts)``."""
    counts = Counter(w for d in docs for w in d)
    kept = sorted(((c, w) for w, c in counts.items() if c >= min_count), key=lambda cw: (-cw[0], cw[1]))[:max_vocab]
    return [w for _, w in kept], np.array([c for c, _ in kept], dtype=np.int64)


def load_corpus(cfg: CorpusConfig, cache_dir: Path | None = None) -> Corpus:
    """Read, tokenise (gensim's Wikipedia tokenizer), build the vocabularies of ``cfg``'s corpus.

    Args:
        cfg: which corpus, how many documents, vocabulary rules.
        cache_dir: where the tokenised documents are cached as JSON (None: no cache).
    Returns:
        :class:`Corpus`; ``lda_docs[d]`` = ids of the in-vocabulary non-stop words of ``docs[d]``.
    Raises:
        ConfigError: missing/corrupt file (naming ``corpus.path``), gensim or its data missing
            (naming the package and how to install it), or an empty vocabulary.
    """
    docs, path, seconds = tokenised_documents(cfg, cache_dir)
    vocab, counts = build_vocab(docs, cfg.min_count, cfg.max_vocab)
    if not vocab:
        raise ConfigError(f"corpus.min_count: no word occurs {cfg.min_count} times in {echo(str(path))}; lower it")
    stops = stop_words()
    stop = np.array([w in stops for w in vocab], dtype=bool)
    index = {w: i for i, w in enumerate(vocab)}
    lda_docs = [[index[w] for w in d if w in index and not stop[index[w]]] for d in docs]
    import gensim

    what = {
        "wiki": f"gensim {gensim.__version__} test data {WIKI_SAMPLE} (a Wikipedia sample, not the seed's full dump)",
        "lee": f"gensim {gensim.__version__} test data {LEE} (news, not Wikipedia)",
    }.get(cfg.source, str(path))
    n_tok = sum(len(d) for d in docs)
    lda_n = int(
        np.unique(np.concatenate([np.asarray(d, dtype=np.int64) for d in lda_docs] + [np.zeros(0, np.int64)])).size
    )
    provenance = (
        f"{what}: {len(docs)} documents, {n_tok / 1e6:.2f} M tokens; model vocabulary {len(vocab)} words "
        f"(count >= {cfg.min_count}, at most {cfg.max_vocab}, stop words kept), LDA vocabulary {lda_n} "
        f"(stop words dropped); read+tokenised in {seconds:.1f} s"
    )
    return Corpus(docs=docs, vocab=vocab, lda_docs=lda_docs, provenance=provenance, counts=counts, stop=stop)


def encode_windows(corpus: Corpus, seq_len: int, offset: int = 0, pad_id: int | None = None) -> torch.Tensor:
    """Every document cut into consecutive windows of ``seq_len`` word ids.

    Args:
        corpus: the corpus.
        seq_len: window length ``>= 1``.
        offset: added to every word id (``[UNK]`` included: ``len(vocab) + offset``), to leave room for
            the caller's special tokens below ``offset``.
        pad_id: None (default): a document's short tail (and a document shorter than ``seq_len``) is
            **dropped**, so every window is ``seq_len`` real words and attention needs no key mask;
            an int: the tail is kept and right-padded with ``pad_id`` (the caller masks it).
    Returns:
        ``(N, seq_len)`` long; windows in document order. ``N`` may be 0.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    rows = []
    for d in range(len(corpus.docs)):
        ids = corpus.ids(d) + offset
        full = len(ids) // seq_len
        if full:
            rows.append(ids[: full * seq_len].reshape(full, seq_len))
        tail = ids[full * seq_len :]
        if pad_id is not None and len(tail):
            rows.append(np.concatenate([tail, np.full(seq_len - len(tail), pad_id, dtype=np.int64)])[None])
    if not rows:
        return torch.zeros((0, seq_len), dtype=torch.long)
    return torch.from_numpy(np.concatenate(rows, axis=0))


def unigram_loss(windows: torch.Tensor, n_test: int, vocab: int, offset: int) -> float:
    """The held-out masked-token loss of the unigram model: every masked word predicted with the training
    windows' word frequencies (add-one smoothed over the ``vocab`` ids from ``offset``), averaged over the
    held-out windows' words (each masked with the same probability). Nats.

    Args:
        windows: ``(N, T)`` model ids (:func:`encode_windows` with this ``offset``); the last ``n_test`` are
            held out.
        vocab: the model's vocabulary; ids below ``offset`` are the caller's special tokens, never predicted.
    """
    train, test = windows[:-n_test].reshape(-1), windows[-n_test:].reshape(-1)
    counts = torch.bincount(train, minlength=vocab).double()[offset:] + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[test - offset].mean())
