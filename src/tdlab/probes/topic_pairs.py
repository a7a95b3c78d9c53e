"""Same-topic vs different-topic word pairs on real text (seed 004 §6.2, App. G.3, Tables 1, 2, 5).

Given LDA's word -> topics assignment (:func:`tdlab.tasks.lda_topics.assign`), the seed compares, over
pairs of **different words** ("for fair comparison ... different words of the same topic and
different words of different topics", App. G.3):

* input-embedding cosine and dot product: mean over same-topic word pairs / mean over
  different-topic word pairs (:func:`embedding_ratios`);
* attention: mean weight between positions holding two different words of the same topic / of
  different topics, after the length debiasing of App. G.3 (:class:`PairAttention`,
  :func:`attention_pair_means`);
* Table 2: the same means over the top co-occurring word pairs (:func:`top_cooccurring_pairs`,
  :func:`table2_means`).

What they read of an encoder (a trained :class:`~tdlab.models.gpt.GPT` or a local checkpoint's
:class:`~tdlab.models.hf_encoder.HFEncoder`): its corpus words' input embeddings (:func:`model_embeddings`) and
every member's attention patterns on unmasked windows (:func:`model_attention`).

Conventions (choices where the seed is silent, each stated where it is made):

* Word pairs are unordered pairs ``{w, w'}``, ``w != w'``, of words in the assignment. With several
  topics per word (Table 5), "same topic" = the two share at least one topic and "different topic" =
  they share none, so every pair is in exactly one class.
* The model is word-level: one position holds one word, so "attention between words" (between
  tokens in BERT) is attention between positions. Position pairs ``(i, j)`` are ordered (both
  directions count: attention is not symmetric), ``i != j`` automatically since the words differ;
  positions holding stop words, ``[UNK]``, special tokens or padding are in no pair.
* Debiasing (App. G.3): each document's weights are multiplied by ``len / 100``, ``len`` its number of
  visible positions (all of them, stop words included), so a query's weights average ``1/100``
  whatever the length. Means are pooled: the sum of debiased weights over all pairs of a class in all
  documents, over their number (as :func:`tdlab.probes.blocks.attention_averages` does for Tables 3-4).
  With documents cut into windows of one length, debiasing multiplies every weight by the same number
  and leaves every ratio unchanged; it matters with padded windows or whole documents.
* Layers and heads: sums are kept per leading index of the attention tensor (layer, head, member...);
  :meth:`PairAttention.per_head` gives the ratio per index, :meth:`PairAttention.ratio` the ratio of
  the means averaged over them (every head sees the same pairs, so this is the pooled ratio).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import sparse
from torch import Tensor

from tdlab.models.gpt import GPT

__all__ = [
    "NORM_LEN",
    "PairAttention",
    "attention_pair_means",
    "cooc_k",
    "cooccurrence_matrix",
    "embedding_ratios",
    "model_attention",
    "model_embeddings",
    "pair_list",
    "same_topic_pairs",
    "table2_means",
    "top_cooccurring_pairs",
]

F64 = torch.float64
NORM_LEN = 100  # App. G.3: "normalize the sentence length to 100"


def same_topic_pairs(assignment: Mapping[int, frozenset[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which pairs of assigned words share a topic.

    Args:
        assignment: ``{word id: topic ids}`` (non-empty sets).
    Returns:
        ``(words, same, diff)``: ``words`` ``(m,)`` sorted int64 word ids; ``same`` / ``diff`` ``(m, m)``
        bool, ``same[a, b]`` iff words ``a != b`` share a topic, ``diff[a, b]`` iff they share none;
        both symmetric with a False diagonal, ``same | diff`` = every distinct pair.
    """
    words = np.array(sorted(int(w) for w in assignment), dtype=np.int64)
    m = words.size
    topics = sorted({t for w in words.tolist() for t in assignment[w]})
    col = {t: i for i, t in enumerate(topics)}
    Z = np.zeros((m, len(topics)), dtype=np.float32)  # word-topic incidence
    for a, w in enumerate(words.tolist()):
        if not assignment[w]:
            raise ValueError(f"word {w} has no topic in the assignment")
        Z[a, [col[t] for t in assignment[w]]] = 1.0
    share = (Z @ Z.T) > 0.5
    off = ~np.eye(m, dtype=bool)
    return words, share & off, ~share & off


def pair_list(words: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(P, 2)`` int64 word-id pairs ``(w, w')``, ``w < w'``, where the symmetric ``mask`` is True."""
    a, b = np.nonzero(np.triu(np.asarray(mask, dtype=bool), k=1))
    return np.stack([np.asarray(words)[a], np.asarray(words)[b]], axis=1).astype(np.int64)


def _rows(emb: Tensor | np.ndarray) -> Tensor:
    t = torch.as_tensor(emb).detach().to("cpu", F64)
    if t.dim() < 2:
        raise ValueError(f"expected (..., m, d) embeddings, got shape {tuple(t.shape)}")
    return t


def _out(t: Tensor) -> float | np.ndarray:
    return float(t) if t.dim() == 0 else t.numpy()


def embedding_ratios(emb: Tensor | np.ndarray, same: np.ndarray, diff: np.ndarray) -> dict[str, float | np.ndarray]:
    """Tables 1, 5 columns 2-3: mean embedding cosine / dot product over same-topic distinct word pairs,
    divided by the mean over different-topic pairs.

    Args:
        emb: ``(..., m, d)`` embeddings of ``words`` (row ``a`` = word ``words[a]``); leading axes (a
            member axis) are carried through.
        same: ``(m, m)`` bool from :func:`same_topic_pairs`.
        diff: ``(m, m)`` bool, the same.
    Returns:
        ``{"cosine", "dot", "cos_same", "cos_diff", "dot_same", "dot_diff", "cos_gap", "cos_gap_z"}``:
        floats for 2-D ``emb``, else arrays of the leading shape. A class without a pair gives nan.
        ``cos_gap = cos_same − cos_diff`` and ``cos_gap_z`` = the gap over its standard deviation
        ``sqrt((1/|S| + 1/|D|) / d)`` under iid isotropic random embeddings (an untrained table):
        there the cosines of distinct pairs have mean 0, variance ``1/d`` and are uncorrelated (two
        pairs sharing word i: E[(u_i·u_j)(u_i·u_k)] = 0), so the null is exact.

    Why the gap as well: the seed's ratios are of two means; for zero-mean random embeddings both are
    ≈ 0 and the ratio is noise over noise (on the Wikipedia sample with d = 64 it ranges from −74 to 28
    over members). The seed's untrained BERT gives ≈ 1 because its vectors share a common component;
    the gap and its z-score stay meaningful either way.
    """
    w = _rows(emb)
    s = torch.as_tensor(np.asarray(same, dtype=bool))
    d = torch.as_tensor(np.asarray(diff, dtype=bool))
    if s.shape != (w.shape[-2], w.shape[-2]) or d.shape != s.shape:
        raise ValueError(f"same/diff must be ({w.shape[-2]}, {w.shape[-2]}) for embeddings {tuple(w.shape)}")
    dot = w @ w.transpose(-1, -2)
    norm = w.norm(dim=-1)
    cos = dot / (norm[..., :, None] * norm[..., None, :]).clamp_min(torch.finfo(F64).tiny)

    def mean(x: Tensor, m: Tensor) -> Tensor:  # over the pairs of a symmetric mask: ordered = unordered mean
        return (x * m).sum((-2, -1)) / m.sum()

    out = {"cos_same": mean(cos, s), "cos_diff": mean(cos, d), "dot_same": mean(dot, s), "dot_diff": mean(dot, d)}
    out["cosine"] = out["cos_same"] / out["cos_diff"]
    out["dot"] = out["dot_same"] / out["dot_diff"]
    out["cos_gap"] = out["cos_same"] - out["cos_diff"]
    n_s, n_d = float(s.sum()) / 2, float(d.sum()) / 2  # unordered pairs
    out["cos_gap_z"] = (
        out["cos_gap"] / math.sqrt((1 / n_s + 1 / n_d) / w.shape[-1]) if n_s and n_d else out["cos_gap"] * math.nan
    )
    return {k: _out(v) for k, v in out.items()}


@dataclass
class PairAttention:
    """Running sums of debiased attention between positions whose words form a pair of a class.

    Build with :meth:`from_assignment` (classes ``"same"``/``"diff"``) or :meth:`from_pairs` (any named
    lists of word pairs, e.g. Table 2's), then :meth:`add` documents (or use
    :func:`attention_pair_means`).

    Attributes:
        words: ``(m,)`` sorted word ids the classes are over.
        masks: class name -> ``(m, m)`` symmetric bool over ``words`` (False diagonal).
        debias: multiply each document's weights by ``len / norm_len`` (App. G.3).
        offset: subtracted from the token ids given to :meth:`add` (the caller's special tokens).
        norm_len: G.3's reference length 100.
        sums: class -> float64 tensor of the leading shape (layers, heads, ...), ``None`` until a document.
        counts: class -> number of ordered position pairs seen (the same for every leading index).
        documents: documents added.
    """

    words: np.ndarray
    masks: dict[str, Tensor]
    debias: bool = True
    offset: int = 0
    norm_len: int = NORM_LEN
    sums: dict[str, Tensor | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    documents: int = 0

    def __post_init__(self) -> None:
        self.words = np.asarray(self.words, dtype=np.int64)
        if self.words.size and np.any(np.diff(self.words) <= 0):
            raise ValueError("words must be sorted and distinct")
        if self.norm_len < 1:
            raise ValueError(f"norm_len must be >= 1, got {self.norm_len}")
        m = self.words.size
        for name, mk in self.masks.items():
            if tuple(mk.shape) != (m, m):
                raise ValueError(f"mask {name!r} must be ({m}, {m}), got {tuple(mk.shape)}")
        self.masks = {k: torch.as_tensor(np.asarray(v, dtype=bool)) for k, v in self.masks.items()}
        self.sums = {k: self.sums.get(k) for k in self.masks}
        self.counts = {k: int(self.counts.get(k, 0)) for k in self.masks}
        top = int(self.words.max()) + 1 if m else 0
        self._lookup = torch.full((top + 1,), -1, dtype=torch.long)  # word id -> row of words; top -> -1
        self._lookup[torch.as_tensor(self.words)] = torch.arange(m)

    @classmethod
    def from_assignment(
        cls, assignment: Mapping[int, frozenset[int]], debias: bool = True, offset: int = 0, norm_len: int = NORM_LEN
    ) -> PairAttention:
        """Classes ``"same"`` (distinct words sharing a topic) and ``"diff"`` (sharing none)."""
        words, same, diff = same_topic_pairs(assignment)
        masks = {"same": torch.as_tensor(same), "diff": torch.as_tensor(diff)}
        return cls(words, masks, debias=debias, offset=offset, norm_len=norm_len)

    @classmethod
    def from_pairs(
        cls, pairs: Mapping[str, np.ndarray], debias: bool = True, offset: int = 0, norm_len: int = NORM_LEN
    ) -> PairAttention:
        """One class per named ``(P, 2)`` array of word-id pairs (order within a pair irrelevant)."""
        arrs = {k: np.asarray(v, dtype=np.int64).reshape(-1, 2) for k, v in pairs.items()}
        for k, p in arrs.items():
            if np.any(p[:, 0] == p[:, 1]):
                raise ValueError(f"pairs {k!r}: a pair of a word with itself")
        words = np.unique(np.concatenate([p.ravel() for p in arrs.values()] + [np.zeros(0, np.int64)]))
        masks = {}
        for k, p in arrs.items():
            a, b = np.searchsorted(words, p[:, 0]), np.searchsorted(words, p[:, 1])
            mk = np.zeros((words.size, words.size), dtype=bool)
            mk[a, b] = mk[b, a] = True
            masks[k] = torch.as_tensor(mk)
        return cls(words, masks, debias=debias, offset=offset, norm_len=norm_len)

    def _index(self, ids: Tensor) -> Tensor:
        ids = ids.to("cpu", torch.long) - self.offset
        top = self._lookup.numel() - 1
        return self._lookup[torch.where((ids >= 0) & (ids < top), ids, torch.full_like(ids, top))]

    def add(
        self, attn: Tensor, word_ids: Tensor, key_mask: Tensor | None = None, batch_dim: int | None = None
    ) -> PairAttention:
        """Accumulate the attention of one document or a batch of documents.

        Args:
            attn: ``(*lead, T, T)`` weights of one document (e.g. ``(H, T, T)`` or ``(L, H, T, T)``), or,
                with ``batch_dim``, a tensor whose axis ``batch_dim`` is the batch (e.g. ``(E, B, H, T, T)``
                with ``batch_dim=1``). Rows/columns = queries/keys or the transpose: every class is
                symmetric, so the sums do not depend on the layout.
            word_ids: ``(T,)`` token ids (``(B, T)`` with ``batch_dim``); id ``w + offset`` is word ``w``.
            key_mask: ``(T,)`` / ``(B, T)`` bool, False on padding: such positions are in no pair and
                do not count in ``len``. None: all positions are visible.
            batch_dim: the batch axis of ``attn`` (not one of its last two).
        Returns:
            ``self``.
        """
        A = attn.detach()
        ids = torch.as_tensor(word_ids).cpu()
        if batch_dim is None:
            if ids.dim() != 1:
                raise ValueError(
                    f"word_ids of one document must be (T,), got {tuple(ids.shape)}; pass batch_dim for a batch"
                )
            A, ids = A.unsqueeze(-3), ids[None]
            key_mask = None if key_mask is None else torch.as_tensor(key_mask)[None]
        else:
            bd = batch_dim % A.dim()
            if bd >= A.dim() - 2:
                raise ValueError(f"batch_dim={batch_dim} is one of the (T, T) axes of attn {tuple(attn.shape)}")
            A = A.movedim(bd, -3)
        B, T = ids.shape
        if A.dim() < 3 or A.shape[-3:] != (B, T, T):
            raise ValueError(
                f"attention {tuple(attn.shape)} does not match word_ids {tuple(torch.as_tensor(word_ids).shape)}"
            )
        vis = (
            torch.ones(B, T, dtype=torch.bool)
            if key_mask is None
            else torch.as_tensor(key_mask, dtype=torch.bool).reshape(B, T)
        )
        idx = self._index(ids)  # (B, T) row in words or -1
        word = vis & (idx >= 0)
        pair = word[:, :, None] & word[:, None, :]
        safe = idx.clamp_min(0)
        scale = vis.sum(-1).to(F64) / self.norm_len if self.debias else torch.ones(B, dtype=F64)
        names = list(self.masks)
        pm = torch.stack([self.masks[k][safe[:, :, None], safe[:, None, :]] for k in names]) & pair  # (C, B, T, T)
        # only the position pairs of some class are read: a gather (A stays on its device, in its dtype)
        # instead of a float64 copy of the whole (..., B, T, T) tensor
        b, t, u = pm.any(0).nonzero(as_tuple=True)
        dev = A.device
        vals = A[..., b.to(dev), t.to(dev), u.to(dev)].to("cpu", F64)  # (*lead, P)
        weight = pm[:, b, t, u].to(F64) * scale[b][None, :]  # (C, P)
        sums = vals @ weight.T  # (*lead, C)
        for c, name in enumerate(names):
            s = sums[..., c]
            prev = self.sums[name]
            self.sums[name] = s if prev is None else prev + s
            self.counts[name] += int(pm[c].sum())
        self.documents += B
        return self

    def mean(self, name: str) -> np.ndarray:
        """Mean debiased weight of class ``name``, per leading index (nan when no pair was seen)."""
        s = self.sums[name]
        if s is None:
            return np.array(np.nan)
        return (s / self.counts[name]).numpy() if self.counts[name] else np.full(tuple(s.shape), np.nan)

    def per_head(self, num: str = "same", den: str = "diff") -> np.ndarray:
        """Ratio of the class means per leading index, e.g. ``(L, H)``."""
        return self.mean(num) / self.mean(den)

    def ratio(self, num: str = "same", den: str = "diff", keep_dims: int = 0) -> float | np.ndarray:
        """Tables 1, 5 column 4: mean over the leading axes (all but the first ``keep_dims``) of the
        ``num`` means divided by that of the ``den`` means."""
        a, b = self.mean(num), self.mean(den)
        axes = tuple(range(keep_dims, a.ndim))
        r = a.mean(axis=axes) / b.mean(axis=axes)
        return float(r) if np.ndim(r) == 0 else r


def attention_pair_means(
    attn: Tensor,
    word_ids: Tensor,
    assignment: Mapping[int, frozenset[int]] | None = None,
    debias: bool = True,
    *,
    into: PairAttention | None = None,
    key_mask: Tensor | None = None,
    batch_dim: int | None = None,
    offset: int = 0,
) -> PairAttention:
    """App. G.3's debiased attention between same-topic / different-topic distinct words.

    Accumulates one document (or a batch) into ``into``, or into a new :class:`PairAttention` built
    from ``assignment`` (classes ``"same"``, ``"diff"``). Loop over documents passing the result back::

        acc = None
        for doc in docs: acc = attention_pair_means(pattern(doc), doc, assignment, into=acc)
        acc.ratio(), acc.per_head()

    Args:
        attn: ``(H, T, T)`` or ``(L, H, T, T)`` (any leading axes); see :meth:`PairAttention.add`.
        word_ids: ``(T,)`` token ids; ``offset`` is subtracted to get word ids.
        assignment: word -> topics (needed when ``into`` is None).
        debias: multiply each document's weights by ``len / 100``.
        into: see :class:`PairAttention`.
        key_mask: see :class:`PairAttention`.
        batch_dim: see :class:`PairAttention`.
        offset: see :class:`PairAttention`.
    Returns:
        the accumulator.
    """
    if into is None:
        if assignment is None:
            raise ValueError("attention_pair_means: give an assignment or an accumulator (into=)")
        into = PairAttention.from_assignment(assignment, debias=debias, offset=offset)
    return into.add(attn, word_ids, key_mask=key_mask, batch_dim=batch_dim)


def _doc_word_matrix(lda_docs: list[list[int]], words: np.ndarray) -> sparse.csc_matrix:
    """``(D, m)`` 0/1 sparse: document ``r`` holds ``words[a]``."""
    words = np.asarray(words, dtype=np.int64)
    top = max([int(words.max()) + 1 if words.size else 0] + [max(d) + 1 for d in lda_docs if d])
    lookup = np.full(top, -1, dtype=np.int64)
    lookup[words] = np.arange(words.size)
    rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for r, d in enumerate(lda_docs):
        c = np.unique(lookup[np.asarray(d, dtype=np.int64)]) if d else np.zeros(0, np.int64)
        c = c[c >= 0]
        rows.append(np.full(c.size, r, dtype=np.int64))
        cols.append(c)
    row_ids, col_ids = np.concatenate(rows), np.concatenate(cols)
    return sparse.csc_matrix(
        (np.ones(row_ids.size, dtype=np.int32), (row_ids, col_ids)), shape=(len(lda_docs), words.size)
    )


def cooccurrence_matrix(lda_docs: list[list[int]], words: np.ndarray) -> sparse.csr_matrix:
    """``(m, m)`` sparse counts: entry ``[a, b]`` = number of documents holding both ``words[a]`` and
    ``words[b]`` (the window is the document, Table 2); the diagonal = documents holding the word.
    Memory grows with the number of co-occurring pairs; :func:`top_cooccurring_pairs` works in blocks."""
    X = _doc_word_matrix(lda_docs, words)
    return (X.T @ X).tocsr()


def _top(cnt: np.ndarray, a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``k`` of ``(count, a, b)`` triples in the order (count descending, a, b ascending)."""
    if 0 < k < cnt.size:  # only the triples at or above the k-th largest count need sorting
        kth = np.partition(cnt, cnt.size - k)[cnt.size - k]
        sel = cnt >= kth
        cnt, a, b = cnt[sel], a[sel], b[sel]
    order = np.lexsort((b, a, -cnt))[:k]
    return cnt[order], a[order], b[order]


def cooc_k(set_size: int) -> int:
    """Table 2's cutoff: as many top co-occurring pairs as one topic of ``set_size`` words holds, C(s, 2)
    (105 = C(15, 2), 435 = C(30, 2), 1711 = C(59, 2) in seed 004's Table 2): the ``k`` of
    :func:`top_cooccurring_pairs`."""
    return set_size * (set_size - 1) // 2


def top_cooccurring_pairs(
    lda_docs: list[list[int]], words: np.ndarray, k: int, return_counts: bool = False, block_bytes: int = 1 << 24
):
    """Table 2's top co-occurring pairs: the ``k`` pairs of distinct words of ``words`` that occur
    together in the most documents.

    Counted in blocks of word rows (``X[:, block]ᵀ X`` densified, about ``block_bytes`` each) keeping each
    block's top ``k``: the order is total, so the top ``k`` of the union is the top ``k`` of the blocks'
    top ``k``, and memory stays bounded whatever the vocabulary.

    Args:
        lda_docs: per document its word ids (stop words already removed, as Table 2 says).
        words: candidate word ids (e.g. the LDA vocabulary, or the assigned words).
        k: number of pairs ``>= 0``.
        return_counts: also return each pair's document count.
        block_bytes: memory of one block of counts.
    Returns:
        ``(k', 2)`` int64 pairs ``(w, w')``, ``w < w'``, by decreasing count, ties by ``w`` then ``w'``
        (deterministic); ``k' = min(k, number of pairs co-occurring at least once)``. With
        ``return_counts``, ``(pairs, counts (k',))``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    words = np.unique(np.asarray(words, dtype=np.int64))
    m = words.size
    X = _doc_word_matrix(lda_docs, words)
    XT = X.T.tocsr()
    best = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    rows = max(1, int(block_bytes) // (4 * max(m, 1)))
    for i0 in range(0, m, rows):
        i1 = min(m, i0 + rows)
        C = (XT[i0:i1] @ X).toarray()  # (rows, m) counts of words i0..i1-1 with every word
        C[np.arange(i1 - i0)[:, None] >= np.arange(m)[None, :] - i0] = 0  # keep b > a: distinct, unordered
        floor = best[0][-1] if best[0].size == k and k > 0 else 1  # below the current k-th count: never kept
        a, b = np.nonzero(floor <= C)
        cnt = C[a, b].astype(np.int64)
        blk = _top(cnt, a.astype(np.int64) + i0, b.astype(np.int64), k)
        cnt_ab, a_ab, b_ab = (np.concatenate([x, y]) for x, y in zip(best, blk, strict=True))
        best = _top(cnt_ab, a_ab, b_ab, k)
    cnt, a, b = best  # words sorted: a < b means words[a] < words[b], and the order by index is by id
    pairs = np.stack([words[a], words[b]], axis=1).astype(np.int64).reshape(-1, 2)
    return (pairs, cnt.astype(np.int64)) if return_counts else pairs


def table2_means(
    pairs: Mapping[str, np.ndarray], emb: Tensor | np.ndarray, attention: PairAttention | None = None, offset: int = 0
) -> dict[str, dict[str, float | int | np.ndarray]]:
    """Table 2: mean debiased attention and mean embedding cosine over named lists of word pairs
    (e.g. ``{"same": pair_list(words, same), "cooc": top_cooccurring_pairs(...)}``).

    Args:
        pairs: name -> ``(P, 2)`` word-id pairs.
        emb: ``(..., V, d)`` embedding table indexed by token id (word ``w`` = row ``w + offset``).
        attention: an accumulator built with ``PairAttention.from_pairs(pairs)`` and fed the documents
            (None: attention is not reported).
        offset: the caller's special tokens before the words in ``emb``.
    Returns:
        name -> ``{"pairs": P, "cosine": mean cosine over the P pairs, "attention": mean debiased weight
        over the positions holding them, averaged over the accumulator's leading axes}``; floats for a
        2-D ``emb`` (arrays of the leading shape otherwise).
    """
    w = _rows(emb)
    w = w / w.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(F64).tiny)
    out: dict[str, dict[str, float | int | np.ndarray]] = {}
    for name, given in pairs.items():
        p = torch.as_tensor(np.asarray(given, dtype=np.int64).reshape(-1, 2)) + offset
        cos = (
            (w[..., p[:, 0], :] * w[..., p[:, 1], :]).sum(-1).mean(-1)
            if len(p)
            else torch.full(w.shape[:-2], float("nan"), dtype=F64)
        )
        row: dict[str, float | int | np.ndarray] = {"pairs": len(p), "cosine": _out(cos)}
        if attention is not None:
            row["attention"] = float(np.mean(attention.mean(name)))
        out[name] = row
    return out


# ----------------------------------------------------------------------------------------------
# Reading an encoder: its word embeddings and attention patterns (a trained GPT or a local checkpoint)


def model_embeddings(model: Any, offset: int) -> tuple[torch.Tensor, int]:
    """``((E, n_words, d) input embeddings of the corpus words, E)``: the token table's word rows.

    Args:
        model: a :class:`~tdlab.models.gpt.GPT` encoder whose vocabulary is the caller's special ids below
            ``offset``, the corpus words, then ``[UNK]`` last (:func:`~tdlab.tasks.text_corpus.encode_windows`
            with this ``offset``), or an :class:`~tdlab.models.hf_encoder.HFEncoder` (its own word rows).
    """
    if isinstance(model, GPT):
        w = model.wte.detach()[:, offset:-1]  # drop the special ids and [UNK]
        return w, w.shape[0]
    emb = model.word_embeddings()  # HFEncoder: (E, n_words, d), NaN rows for skipped words
    return emb, emb.shape[0]


@torch.no_grad()
def model_attention(model: Any, windows: torch.Tensor, device: str = "cpu") -> torch.Tensor:
    """``(E, B, L, H, T, T)`` attention patterns of every member on ``windows (B, T)`` (model ids), unmasked."""
    if not isinstance(model, GPT):
        return model.window_attention(windows)
    E = model.members
    x = windows.to(device).unsqueeze(0).expand(E, *windows.shape)
    names = [f"blocks.{layer}.attn.pattern" for layer in range(model.cfg.layers)]
    with model.cache(names) as c:
        model(x)
    return torch.stack([c[n] for n in names], dim=2).cpu()  # (E, B, L, H, T, T)
