"""LDA topics of a real corpus and the seed's ambiguity filter (seed 004 §6.2, App. G.3, Tables 1, 2, 5).

The seed fits "an LDA model with 100 topics" (gensim) on a Wikipedia sample with stop words removed
(§6.2). :func:`fit_lda` fits gensim's ``LdaModel`` (online variational Bayes, one process, so a seed
gives the same topics) on :attr:`Corpus.lda_docs`.

Ambiguity filter (App. G.3): each topic ``t`` sorts the ``n`` vocabulary words by ``p(w | t)`` and keeps
the top ones. The seed writes ``{w_i : i <= θn}`` but its Table 2 counts (105, 435, 1711 pairs =
C(15,2), C(30,2), C(59,2) words per topic at θ = 0.0005, 0.001, 0.002) are those of
``⌊θn⌋ + 1`` words for any LDA vocabulary ``n ∈ [29000, 29500)`` (0-based ``i <= θn``), while ``⌊θn⌋``
words fits **no** single ``n`` (it needs ``n >= 30000`` for the first two rows and ``n < 30000`` for
the third): :func:`topic_word_sets` keeps ``⌊θn⌋ + 1`` (:func:`words_per_topic`,
:func:`consistent_vocab_sizes` reproduces the check). BERT's 30522 WordPiece ids minus its 994
``[unused]`` and 5 special tokens minus stop words are about that size. (``round(θn)`` would also fit,
for ``n ∈ [29500, 29750)``.)

Word -> topics (:func:`assign`): Table 1 "restricts to keeping only one topic for each word": a word
kept by several topics gets the one where its ``p(w | t)`` is largest (ties: the lowest topic id);
Table 5 keeps all of them.

Progress: one ``LdaModel(corpus, passes=P)`` call (gensim's own online-VB schedule; a loop of
``update(passes=1)`` calls would not reproduce it, since gensim counts ``num_updates`` in pass 0 only)
with a gensim ``Callback`` metric whose only effect is to advance a rich progress bar at the end of
each pass (the test checks the topics equal those of a plain ``LdaModel(passes=P)``).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import Field

from tdlab.config import Config, ConfigError
from tdlab.tasks.text_corpus import GENSIM_HINT, Corpus

__all__ = [
    "LDAConfig",
    "Topics",
    "assign",
    "consistent_vocab_sizes",
    "fig3_words",
    "fit_lda",
    "topic_word_sets",
    "words_per_topic",
]


class LDAConfig(Config):
    """gensim ``LdaModel`` settings (seed 004 §6.2: 100 topics; the seed gives no other setting, so
    the rest are gensim's defaults except ``passes``/``iterations``, raised so that a corpus of ~100
    long documents converges; ours, fixed before any run)."""

    topics: int = Field(20, ge=2, le=10_000)  # §6.2 uses 100 (the paper profile); 20 in quick
    passes: int = Field(10, ge=1, le=1000)  # ours: sweeps over the corpus (gensim default 1)
    iterations: int = Field(100, ge=1, le=100_000)  # ours: E-step iterations per document (gensim default 50)
    chunksize: int = Field(2000, ge=1, le=1_000_000)  # gensim default: documents per online update
    alpha: Literal["symmetric", "asymmetric", "auto"] = "symmetric"  # gensim default: document-topic prior
    eta: Literal["symmetric", "auto"] = "symmetric"  # gensim default (None = symmetric 1/K): topic-word prior
    decay: float = Field(0.5, ge=0.5, le=1.0)  # gensim default (κ of online VB, Hoffman et al. 2010: [0.5, 1])
    offset: float = Field(1.0, ge=1.0, le=1e6)  # gensim default (τ0 of online VB)
    gamma_threshold: float = Field(0.001, gt=0.0, le=1.0)  # gensim default: E-step convergence


@dataclass
class Topics:
    """A fitted topic model over a corpus's model vocabulary.

    Attributes:
        word_topic: ``(K, n)`` topic-word probabilities ``p(w | t)`` over the model vocabulary ids
            ``0..n-1`` (``n = len(corpus.vocab)``); each row sums to 1; zero columns for words LDA never
            saw (stop words, words absent from every LDA document).
        lda_ids: sorted model ids of the words LDA saw (the nonzero columns); ``len(lda_ids)`` is the
            vocabulary size ``n`` of App. G.3's filter.
        seconds: wall time of the fit.
        passes: passes run.
    """

    word_topic: np.ndarray
    lda_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    seconds: float = 0.0
    passes: int = 0

    def __post_init__(self) -> None:
        if self.lda_ids.size == 0 and self.word_topic.size:
            self.lda_ids = np.flatnonzero(self.word_topic.sum(axis=0) > 0)

    @property
    def K(self) -> int:
        return int(self.word_topic.shape[0])


def _bow(corpus: Corpus) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    lda_ids = corpus.lda_vocab
    compact = np.full(len(corpus.vocab) + 1, -1, dtype=np.int64)
    compact[lda_ids] = np.arange(lda_ids.size)
    bow = [
        sorted(Counter(compact[np.asarray(d, dtype=np.int64)].tolist()).items()) if d else [] for d in corpus.lda_docs
    ]
    return lda_ids, bow


def _pass_tick(bar):
    """A gensim callback metric that advances ``bar`` once per pass and measures nothing."""
    from gensim.models.callbacks import Metric

    class PassTick(Metric):
        logger = None  # neither "shell" nor "visdom": gensim logs and plots nothing for it
        title = "pass"

        def get_value(self, **kwargs) -> float:
            bar.advance()
            return 0.0

    return PassTick()


def fit_lda(corpus: Corpus, cfg: LDAConfig, seed: int, progress: bool = True) -> Topics:
    """Fit gensim's ``LdaModel`` on ``corpus.lda_docs`` with ``random_state=seed``.

    Args:
        corpus: the corpus (:func:`tdlab.tasks.text_corpus.load_corpus`).
        cfg: LDA settings.
        seed: the random state ``>= 0`` (derive it from the run's root seed); NumPy's ``RandomState``
            that gensim builds takes 32 bits, so ``seed mod 2**32`` is used (63-bit derived seeds work).
        progress: a rich progress bar over passes (stderr).
    Returns:
        :class:`Topics` with ``word_topic`` of shape ``(cfg.topics, len(corpus.vocab))``.
    Raises:
        ConfigError: gensim missing (naming the package), or no document with an LDA word.
    """
    try:
        from gensim.models import LdaModel
    except ImportError:
        raise ConfigError(f"lda: fitting LDA needs gensim; {GENSIM_HINT}") from None
    from tdlab.progress import ProgressBar

    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    lda_ids, bow = _bow(corpus)
    if lda_ids.size == 0:
        raise ConfigError("corpus: no document has a non-stop in-vocabulary word for LDA (lower corpus.min_count)")
    t0 = time.perf_counter()
    id2word = {i: corpus.vocab[int(w)] for i, w in enumerate(lda_ids)}
    with ProgressBar(cfg.passes, f"LDA {cfg.topics} topics", enabled=progress) as bar:
        model = LdaModel(
            corpus=bow,
            num_topics=cfg.topics,
            id2word=id2word,
            chunksize=cfg.chunksize,
            passes=cfg.passes,
            alpha=cfg.alpha,
            eta=None if cfg.eta == "symmetric" else cfg.eta,
            decay=cfg.decay,
            offset=cfg.offset,
            eval_every=None,
            iterations=cfg.iterations,
            gamma_threshold=cfg.gamma_threshold,
            random_state=int(seed) % 2**32,
            callbacks=[_pass_tick(bar)],
        )
    word_topic = np.zeros((cfg.topics, len(corpus.vocab)), dtype=np.float64)
    word_topic[:, lda_ids] = model.get_topics()
    word_topic /= word_topic.sum(axis=1, keepdims=True)  # float32 rows: renormalise in float64
    return Topics(word_topic=word_topic, lda_ids=lda_ids, seconds=time.perf_counter() - t0, passes=cfg.passes)


def words_per_topic(theta: float, n: int) -> int:
    """Words each topic keeps at ambiguity threshold ``theta`` over a vocabulary of ``n`` words:
    ``min(⌊θn⌋ + 1, n)`` (App. G.3 with 0-based ranks, as Table 2's counts imply; see the module
    docstring). θn is computed exactly from θ's decimal form, so 0.001 · 29000 is 29, not 28.99..."""
    if not 0.0 < theta < 1.0:
        raise ValueError(f"theta must be in (0, 1), got {theta}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return min(math.floor(Fraction(repr(float(theta))) * n) + 1, n)


def consistent_vocab_sizes(rows: dict[float, int], count, n_range: range) -> list[int]:
    """Vocabulary sizes ``n`` in ``n_range`` for which ``count(θ, n)`` words per topic give exactly the
    pair counts ``rows[θ] = C(words, 2)`` (Table 2: {0.0005: 105, 0.001: 435, 0.002: 1711})."""
    return [n for n in n_range if all(math.comb(count(t, n), 2) == pairs for t, pairs in rows.items())]


def topic_word_sets(topics: Topics, theta: float, n_vocab: int | None = None) -> list[np.ndarray]:
    """App. G.3's ambiguity filter: each topic's top ``⌊θn⌋ + 1`` words by ``p(w | t)``.

    Args:
        topics: fitted topics.
        theta: ambiguity threshold in (0, 1) (Tables 1, 2, 5: 0.0005, 0.001, 0.002).
        n_vocab: ``n``; default the LDA vocabulary size ``len(topics.lda_ids)`` (stop words excluded).
    Returns:
        ``K`` int64 arrays of model word ids, each of ``words_per_topic(theta, n)`` words in decreasing
        ``p(w | t)`` (ties: smaller id first); only words LDA saw.
    """
    n = int(n_vocab) if n_vocab is not None else int(topics.lda_ids.size)
    k = min(words_per_topic(theta, n), int(topics.lda_ids.size))
    sub = topics.word_topic[:, topics.lda_ids]  # (K, n_lda)
    # stable sort of -p: ties keep ascending id order (lda_ids is sorted)
    order = np.argsort(-sub, axis=1, kind="stable")[:, :k]
    return [topics.lda_ids[o].astype(np.int64) for o in order]


def assign(sets: list[np.ndarray], topics: Topics, mode: Literal["single", "multi"]) -> dict[int, frozenset[int]]:
    """Topics of every word kept by at least one topic.

    Args:
        sets: :func:`topic_word_sets` output (topic ``t`` keeps ``sets[t]``).
        topics: the topics (for ``p(w | t)``).
        mode: ``"single"`` (Table 1): a word kept by several topics gets only the one with the largest
            ``p(w | t)`` (ties: lowest topic id); ``"multi"`` (Table 5): all of them.
    Returns:
        ``{word id: frozenset of topic ids}``, keys sorted.
    """
    if mode not in ("single", "multi"):
        raise ValueError(f"mode must be 'single' or 'multi', got {mode!r}")
    owners: dict[int, list[int]] = {}
    for t, words in enumerate(sets):
        for w in np.asarray(words).tolist():
            owners.setdefault(int(w), []).append(t)
    out: dict[int, frozenset[int]] = {}
    for w in sorted(owners):
        ts = sorted(set(owners[w]))
        if mode == "single":
            p = topics.word_topic[ts, w]
            ts = [ts[int(np.argmax(p))]]  # argmax: first maximum = lowest topic id
        out[w] = frozenset(ts)
    return out


def fig3_words(topics: Topics, lda_vocab: np.ndarray, groups: int = 3, per_group: int = 3) -> list[np.ndarray]:
    """Fig. 3's words, chosen deterministically: the words whose most probable topic is ``t`` ("unambiguous"
    for ``t``), ranked by p(w | t); the ``groups`` topics whose ``per_group``-th such word is the most probable
    (topics with clear top words), and their top ``per_group`` words each. Returns ``groups`` arrays of ids."""
    wt = np.asarray(topics.word_topic, dtype=float)
    K = wt.shape[0]
    best = np.full(wt.shape[1], -1)
    best[lda_vocab] = wt[:, lda_vocab].argmax(0)
    cand = []
    for t in range(K):
        own = np.flatnonzero(best == t)
        if own.size < per_group:
            continue
        top = own[np.argsort(-wt[t, own], kind="stable")[:per_group]]
        cand.append((-wt[t, top[-1]], t, top))
    cand.sort(key=lambda c: (c[0], c[1]))
    if len(cand) < groups:
        raise ValueError(
            f"Fig. 3 needs {groups} topics with {per_group} words each whose most probable topic they "
            f"are; this fit has {len(cand)}"
        )
    return [c[2] for c in cand[:groups]]
