"""Topic-block statistics of a (V, V) matrix and topic attention averages (seed 004).

Seed 004 (Li, Li & Risteski, ICML 2023) predicts that trained weights carry the topic structure:
``W^EᵀW^E`` (Thm. 1, Fig. 1) and ``W^V`` (Thms. 2, 4, Figs. 2, 9, 10) are block-wise over topics,
sometimes diagonal (Fig. 6, Thm. 5), and a word attends more to its own topic (Thm. 3, Tables 3-4).
This module turns those pictures into numbers.

Vocabulary (Def. 1): ``[MASK] = 0`` and words ``1..Tv``; ``topic(i) = ceil(i / v)``, so word ``i`` is
in topic ``(i - 1) // v`` (0-based). Only word rows and columns enter every statistic: a ``(Tv+1, Tv+1)``
matrix loses its row and column 0 first; a ``(Tv, Tv)`` one is taken to be words ``1..Tv`` already.

Block statistics (:func:`block_stats`) of a word matrix ``M`` (``n = Tv`` rows):

* ``S`` / ``D``: mean of the same-topic entries (the ``T`` diagonal ``v x v`` blocks, their diagonal
  included) / of the different-topic entries;
* ``sigma``: standard deviation (population, ddof = 0) of the different-topic entries;
* block contrast ``z = (S - D) / sigma`` (+inf when the off-block part is constant and ``S > D``);
* uniformity ``u = (mean same-topic off-diagonal entry - D) / (mean diagonal entry - D)``: 1 for
  uniform blocks, 0 for a diagonal pattern (needs ``v >= 2``);
* row block-sum gap ``g = mean_i [ Σ_{l in topic(i)} M_il - mean_{t != topic(i)} Σ_{l in t} M_il ]``
  (needs ``T >= 2``): every squared-loss optimum of Lemma 1 / Thm. 4 has gap ``c3`` in every row.

Topic structure with a known null (:func:`block_permutation_test`): the within-topic contrast ``c = mean
same-topic off-diagonal entry − mean different-topic entry``, against the same statistic under random
relabellings of the words' topics (group sizes kept). Under the null of no topic structure (the words
exchangeable, as the columns of a random init are) the p-value ``(1 + #{c_π ≥ c})/(1 + P)`` is exact. The
diagonal never enters: it is same-topic under every relabelling, so it carries no topic information (a Gram's
diagonal is large from the start). Each word's nearest other word (:func:`nearest_same_topic_share`) is
reported beside it.

Attention averages (:func:`attention_averages`, App. G.2-G.3, Tables 3-4): see that function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "AttentionAverages",
    "BlockStats",
    "BlockTest",
    "attention_averages",
    "block_permutation_test",
    "block_ratio_stat",
    "block_stats",
    "cut_documents",
    "model_attention_averages",
    "nearest_same_topic_share",
    "offdiag_contrast",
    "pooled_attention_averages",
    "topic_of",
    "word_block",
]


def word_block(M: torch.Tensor, topics: int, v: int) -> torch.Tensor:
    """The word rows and columns of ``M (..., V, V)``.

    Args:
        M: ``(..., Tv + 1, Tv + 1)`` (index 0 = [MASK] is dropped) or ``(..., Tv, Tv)`` (kept).
        topics: ``T``; v: words per topic.
    Returns:
        ``(..., Tv, Tv)`` float64, entry ``[a, b]`` = ``M`` at words ``a + 1``, ``b + 1``.
    """
    if topics < 1 or v < 1:
        raise ValueError(f"topics and v must be >= 1, got T={topics}, v={v}")
    n = topics * v
    if M.dim() < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] not in (n, n + 1):
        raise ValueError(
            f"expected a (..., {n + 1}, {n + 1}) or (..., {n}, {n}) matrix for T={topics}, v={v}; got {tuple(M.shape)}"
        )
    M = M.detach().to(torch.float64)
    return M[..., 1:, 1:] if M.shape[-1] == n + 1 else M


def topic_of(tokens: torch.Tensor, v: int) -> torch.Tensor:
    """0-based topic of word ids ``1..Tv`` (Def. 1: ``topic(i) = ceil(i / v)``, minus one); -1 for id 0."""
    return torch.where(tokens >= 1, torch.div(tokens - 1, v, rounding_mode="floor"), torch.full_like(tokens, -1))


@dataclass(frozen=True)
class BlockStats:
    """Block statistics of one matrix per leading index (each field has the leading shape of the input)."""

    S: torch.Tensor  # mean same-topic entry (diagonal blocks, diagonal included)
    D: torch.Tensor  # mean different-topic entry
    sigma: torch.Tensor  # std (ddof 0) of the different-topic entries
    z: torch.Tensor  # block contrast (S - D) / sigma
    u: torch.Tensor  # uniformity: 1 uniform blocks, 0 diagonal
    g: torch.Tensor  # row block-sum gap (= c3 at every squared-loss optimum, Lemma 1 / Thm. 4)
    diag: torch.Tensor  # mean diagonal entry
    same_offdiag: torch.Tensor  # mean same-topic off-diagonal entry

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def block_stats(M: torch.Tensor, topics: int, v: int) -> BlockStats:
    """``S, D, sigma, z, u, g`` of the word part of ``M``, vectorised over leading axes.

    Args:
        M: ``(..., V, V)`` with ``V = Tv + 1`` (row/column 0 = [MASK] dropped) or ``V = Tv``; e.g.
            ``(E, V, V)`` for an ensemble's ``W^V`` or ``W^EᵀW^E``.
        topics: ``T >= 2``; v: words per topic ``>= 2``.
    Returns:
        :class:`BlockStats` of float64 tensors of shape ``M.shape[:-2]`` (``()`` for one matrix).
    """
    if topics < 2 or v < 2:
        raise ValueError(
            f"block statistics need T >= 2 topics (for D and g) and v >= 2 words per topic (for u); got T={topics}, v={v}"
        )
    W = word_block(M, topics, v)
    n = topics * v
    topic = torch.arange(n, device=W.device) // v
    same = topic[:, None] == topic[None, :]
    eye = torch.eye(n, dtype=torch.bool, device=W.device)
    diff, off = ~same, same & ~eye

    S = W[..., same].mean(-1)
    var, D = torch.var_mean(W[..., diff], dim=-1, correction=0)
    sigma = var.sqrt()
    diagonal = torch.diagonal(W, dim1=-2, dim2=-1).mean(-1)
    same_off = W[..., off].mean(-1)
    # Row i's sum over each topic's columns: (..., n, T).
    sums = W.reshape(*W.shape[:-1], topics, v).sum(-1)
    own = torch.gather(sums, -1, topic.expand(*sums.shape[:-1])[..., None]).squeeze(-1)
    others = (sums.sum(-1) - own) / (topics - 1)
    g = (own - others).mean(-1)
    return BlockStats(
        S=S,
        D=D,
        sigma=sigma,
        z=(S - D) / sigma,
        u=(same_off - D) / (diagonal - D),
        g=g,
        diag=diagonal,
        same_offdiag=same_off,
    )


def _labels(topics: int, v: int, device: torch.device) -> torch.Tensor:
    return torch.arange(topics * v, device=device) // v


def _contrast(W: torch.Tensor, onehot: torch.Tensor, topics: int, v: int) -> torch.Tensor:
    """``(..., P)``: same-topic off-diagonal mean − different-topic mean of ``W (..., n, n)`` under each of the
    ``P`` labellings ``onehot (P, n, T)``."""
    n = topics * v
    same = torch.einsum("...ij,pjt,pit->...p", W, onehot, onehot)  # Σ of same-topic entries, diagonal included
    trace = torch.diagonal(W, dim1=-2, dim2=-1).sum(-1)[..., None]
    total = W.sum((-2, -1))[..., None]
    return (same - trace) / (topics * v * (v - 1)) - (total - same) / (n * n - topics * v * v)


def offdiag_contrast(M: torch.Tensor, topics: int, v: int) -> torch.Tensor:
    """``(...)``: mean same-topic off-diagonal entry − mean different-topic entry of the word part of ``M``
    (``(..., V, V)`` as :func:`word_block` takes it; needs T >= 2, v >= 2)."""
    if topics < 2 or v < 2:
        raise ValueError(f"the contrast needs T >= 2 and v >= 2, got T={topics}, v={v}")
    W = word_block(M, topics, v)
    lab = F.one_hot(_labels(topics, v, W.device), topics).to(W.dtype)[None]
    return _contrast(W, lab, topics, v)[..., 0]


@dataclass(frozen=True)
class BlockTest:
    """The permutation test of topic structure of a batch of matrices; each field has their leading shape."""

    contrast: torch.Tensor  # the observed same-topic off-diagonal − different-topic mean
    p: torch.Tensor  # (1 + #{relabellings with contrast ≥ the observed})/(1 + permutations)
    null_mean: torch.Tensor  # mean and sd of the contrast over the relabellings
    null_sd: torch.Tensor
    permutations: int

    @property
    def resolution(self) -> float:
        """The p-value's step, ``1/(1 + permutations)``."""
        return 1.0 / (1 + self.permutations)


def block_permutation_test(
    M: torch.Tensor, topics: int, v: int, permutations: int, gen: torch.Generator, chunk: int = 250
) -> BlockTest:
    """Is the word part of ``M`` topic-structured? One-sided permutation test of :func:`offdiag_contrast`.

    The words' topic labels are permuted (each topic keeps ``v`` words) ``permutations`` times with ``gen``, the
    same relabellings for every matrix of the batch; the p-value counts the relabellings whose contrast is at
    least the observed one (to a relative 1e-12: a matrix with no off-diagonal structure, e.g. a diagonal one,
    ties every relabelling and gets p = 1).

    Args:
        M: ``(..., V, V)`` (:func:`word_block`); topics: ``T >= 2``; v: ``>= 2``.
        permutations: ``P >= 1``; gen: a CPU generator (seed it from the run's root seed).
    Returns:
        :class:`BlockTest`, fields of shape ``M.shape[:-2]``.
    """
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    W = word_block(M, topics, v)
    obs = offdiag_contrast(W, topics, v)
    base = _labels(topics, v, torch.device("cpu"))
    perms = torch.stack([base[torch.randperm(base.numel(), generator=gen)] for _ in range(permutations)])
    null = torch.cat(
        [
            _contrast(W, F.one_hot(perms[i : i + chunk].to(W.device), topics).to(W.dtype), topics, v)
            for i in range(0, permutations, chunk)
        ],
        dim=-1,
    )
    tol = 1e-12 * W.abs().amax((-2, -1)).clamp_min(torch.finfo(W.dtype).tiny)
    hits = (null >= (obs - tol)[..., None]).sum(-1)
    return BlockTest(
        contrast=obs,
        p=(1.0 + hits.to(torch.float64)) / (1.0 + permutations),
        null_mean=null.mean(-1),
        null_sd=null.std(-1, correction=0),
        permutations=permutations,
    )


def nearest_same_topic_share(M: torch.Tensor, topics: int, v: int) -> torch.Tensor:
    """``(...)``: the share of words whose nearest other word (largest off-diagonal entry of its row of the word
    part of ``M``) is of its own topic; ``(v − 1)/(Tv − 1)`` by chance."""
    W = word_block(M, topics, v).clone()
    n = topics * v
    W[..., torch.arange(n), torch.arange(n)] = -torch.inf
    lab = _labels(topics, v, W.device)
    return (lab[W.argmax(-1)] == lab).to(torch.float64).mean(-1)


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionAverages:
    """Average (length-normalised) attention between position pairs, each ``(E,)`` float64 (nan: no pair)."""

    same_word: torch.Tensor  # a_sw: the same word at both positions, i = j included
    same_topic: torch.Tensor  # a_st: different words of the same topic
    diff_topic: torch.Tensor  # a_dt: words of different topics
    n_same_word: torch.Tensor  # number of pairs behind each average, (E,) int64
    n_same_topic: torch.Tensor
    n_diff_topic: torch.Tensor

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def cut_documents(
    tokens: torch.Tensor, key_mask: torch.Tensor | None = None, cut: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``cut`` positions of every document (the authors' ``cut_sentences_at_length``).

    Returns:
        ``(tokens[..., :cut], key_mask[..., :cut])``; an all-True mask when ``key_mask`` is None.
    """
    if cut < 1:
        raise ValueError(f"cut must be >= 1, got {cut}")
    mask = torch.ones_like(tokens, dtype=torch.bool) if key_mask is None else key_mask.to(torch.bool)
    return tokens[..., :cut], mask[..., :cut]


def attention_averages(
    pattern: torch.Tensor,
    tokens: torch.Tensor,
    key_mask: torch.Tensor | None,
    topics: int,
    v: int,
    cut: int = 100,
    norm_len: int = 100,
) -> AttentionAverages:
    """Tables 3-4's average attention: same word, same topic-different word, different topic.

    What is computed, per member ``e`` (App. G.3 and the authors' ``compare_topic_and_non_topic_attention``):

    1. Cut: each document keeps its first ``cut`` positions (``c = min(cut, N)``), and attention is the
       pattern of the *cut* document. ``pattern`` may come from the full documents: its key rows are
       restricted to the first ``c`` visible positions and every query column is renormalised over
       them. That equals running the model on the cut document exactly whenever a score depends on
       the two tokens only (the topic model: no positions), since a softmax over a subset of keys is
       the renormalised restriction. Pass patterns of already-cut documents to skip the question.
    2. Length normalisation (G.3, "normalize the sentence length to 100"): every weight is multiplied by
       ``n / norm_len``, with ``n`` the number of visible positions of the cut document (its length
       without padding), so each query's weights average ``1 / norm_len`` whatever ``n``.
    3. Pairs: every ordered pair ``(i, j)`` of visible positions of a document (``i = j`` included) whose
       tokens are both words (ids ``1..Tv``; [MASK] and other ids skipped) falls in exactly one class:
       same word (``w_i = w_j``), same topic-different word, different topic (Def. 1 topics).
    4. Average: the sum of the normalised weights over all pairs of a class in all documents of the
       member, divided by their number (pooled over documents, as the authors' running sums do).
       The classes are symmetric, so which of ``i, j`` is the key does not matter.

    Args:
        pattern: ``(E, B, N, N)`` attention in the column-softmax layout of :class:`TopicAttention`:
            ``pattern[e, b, i, j] = A_ij`` (key ``i``, query ``j``); each column sums to one over axis
            ``-2`` (the keys).
        tokens: ``(E, B, N)`` the documents the pattern was computed on (unmasked held-out documents).
        key_mask: ``(E, B, N)`` bool, False on padding (and any position hidden as a key); None = all visible.
        topics: ``T``.
        v: words per topic.
        cut: positions kept per document (G.3 / the authors' script: 100).
        norm_len: the reference length of the normalisation (G.3: 100).
    Returns:
        :class:`AttentionAverages`, each field ``(E,)``.
    """
    if pattern.dim() != 4 or pattern.shape[-1] != pattern.shape[-2] or pattern.shape[:-1] != tokens.shape:
        raise ValueError(
            f"expected pattern (E, B, N, N) and tokens (E, B, N); got {tuple(pattern.shape)}, {tuple(tokens.shape)}"
        )
    if norm_len < 1:
        raise ValueError(f"norm_len must be >= 1, got {norm_len}")
    tok, vis = cut_documents(tokens, key_mask, cut)
    c = tok.shape[-1]
    A = pattern[..., :c, :c].detach().to(torch.float64) * vis[..., :, None]
    col = A.sum(-2, keepdim=True)
    A = torch.where(col > 0, A / col.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(A))
    n_doc = vis.sum(-1).to(torch.float64)  # (E, B) cut-document lengths
    A = A * (n_doc / norm_len)[..., None, None]

    word = vis & (tok >= 1) & (tok <= topics * v)
    pair = word[..., :, None] & word[..., None, :]
    t = topic_of(tok, v)
    same_word = tok[..., :, None] == tok[..., None, :]
    same_topic = t[..., :, None] == t[..., None, :]
    classes = (pair & same_word, pair & same_topic & ~same_word, pair & ~same_topic)
    sums = [(A * m).sum((1, 2, 3)) for m in classes]
    counts = [m.sum((1, 2, 3)) for m in classes]
    avg = [s / k.to(torch.float64) for s, k in zip(sums, counts, strict=True)]  # 0/0 -> nan: no pair of that class
    return AttentionAverages(*avg, *counts)


def model_attention_averages(
    model,
    tokens: torch.Tensor,
    key_mask: torch.Tensor | None,
    topics: int,
    v: int,
    cut: int = 100,
    norm_len: int = 100,
) -> AttentionAverages:
    """:func:`attention_averages` of ``model`` on documents cut to ``cut`` positions *before* the forward
    pass (as the authors' script does), reading the ``attn.pattern`` activation.

    Args:
        model (TopicAttention): a :class:`~tdlab.models.topic_attention.TopicAttention` (anything whose
            ``run_with_cache(tokens, key_mask=..., names=["attn.pattern"])`` records a column-softmax pattern).
        tokens: ``(E, B, N)`` unmasked documents.
        key_mask: ``(E, B, N)`` their padding mask.
    """
    tok, vis = cut_documents(tokens, key_mask, cut)
    _, cache = model.run_with_cache(tok, key_mask=vis, names=["attn.pattern"])
    return attention_averages(cache["attn.pattern"], tok, vis, topics, v, cut=cut, norm_len=norm_len)


def pooled_attention_averages(
    model,
    tokens: torch.Tensor,
    key_mask: torch.Tensor,
    topics: int,
    v: int,
    chunk: int,
    cut: int = 100,
    norm_len: int = 100,
) -> torch.Tensor:
    """:func:`model_attention_averages` of ``model`` over many documents, ``chunk`` documents per forward pass,
    pooled over all pairs of all documents (the authors' running sums): each chunk's averages times their pair
    counts, summed, over the summed counts.

    Args:
        model (TopicAttention): as :func:`model_attention_averages`.
        tokens: ``(E, B, N)`` unmasked documents; key_mask: ``(E, B, N)`` their padding mask.
        chunk: documents per forward pass.
    Returns:
        ``(3, E)`` float64 on ``tokens``' device: a_sw, a_st, a_dt (0/0 -> NaN: no pair of that class in any
        document).
    """
    E, B = tokens.shape[:2]
    sums = torch.zeros(3, E, dtype=torch.float64, device=tokens.device)
    counts = torch.zeros(3, E, dtype=torch.float64, device=tokens.device)
    for b in range(0, B, chunk):
        part = slice(b, b + chunk)
        av = model_attention_averages(model, tokens[:, part], key_mask[:, part], topics, v, cut=cut, norm_len=norm_len)
        # pooled over all pairs of all documents (the authors' running sums): sum of averages x counts
        for k, (a, n) in enumerate(
            ((av.same_word, av.n_same_word), (av.same_topic, av.n_same_topic), (av.diff_topic, av.n_diff_topic))
        ):
            sums[k] += torch.nan_to_num(a) * n
            counts[k] += n
    return sums / counts  # 0/0 -> NaN: no pair of that class in any document


def block_ratio_stat(S: Any, D: Any, r: float) -> Any:
    """Figs. 9, 10's check that W^V is block-wise, as a signed statistic: ``(S − r|D|)/|S − D|``.

    ≥ 0 exactly when the mean block entry S is at least ``r`` times the magnitude of the mean non-block entry
    D (the captions' factor ``r = 10``), in units of the matrix's own contrast, so that it reads the same for the
    CE panels' logit-scale W^V and the squared-loss ones (1 when D = 0; W^V*: S* − D* = c3/v). S = D gives a
    non-finite value (no contrast).

    ``S``, ``D``: :class:`BlockStats`' ``S`` and ``D`` (floats or arrays of one shape, e.g. ``(E,)`` members or
    ``(E, steps)`` curves); returns an array (or numpy float) of that shape.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return (S - r * np.abs(D)) / np.abs(S - D)
