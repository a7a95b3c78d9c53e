"""Training objectives: what a model is asked to predict, and the per-member loss of that prediction.

An objective turns a task's raw sample into a :class:`Batch` (inputs, targets, the positions that
count) and scores a model on it, per ensemble member. The trainer knows nothing else about what is
learned, so one loop serves:

* :class:`NextToken` — next-token cross-entropy on a stream (seeds 000 and 003, Eq. (1) of 000);
* :class:`LastPosition` — the label of a sequence, read at its last position (seed 001, A.3);
* :class:`MaskedTokens` — masked-token prediction (seed 004, §3.2, Eqs. (1), (3), (4)).

Every loss is ``(E,)``: member ``e``'s loss depends on member ``e``'s parameters and data only, so the
summed loss's gradient is each member's own gradient.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Batch",
    "LastPosition",
    "MaskedTokens",
    "NextToken",
    "Objective",
    "mask_tokens",
    "next_token_loss",
    "weighted_mean",
]

Sample = torch.Tensor | Mapping[str, torch.Tensor]


@dataclass
class Batch:
    """One prepared batch of every member.

    ``inputs``: ``(E, B, T)`` token ids fed to the model; ``targets``: ``(E, B, T)`` (or ``(E, B)`` for
    one label per sequence); ``weights``: ``(E, B, T)`` share of each position in its sequence's loss
    (``None``: every position counts equally); ``model_kwargs``: extra arguments of ``model(inputs, ...)``
    (e.g. ``key_mask``).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor | None = None
    model_kwargs: dict[str, torch.Tensor] = field(default_factory=dict)

    def as_dict(self) -> dict[str, torch.Tensor]:
        """The batch as named tensors with leading ``(E, B)`` axes (a fixed data set stores this form)."""
        out = {"inputs": self.inputs, "targets": self.targets, **{f"kw.{k}": v for k, v in self.model_kwargs.items()}}
        if self.weights is not None:
            out["weights"] = self.weights
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, torch.Tensor]) -> Batch:
        return cls(d["inputs"], d["targets"], d.get("weights"), {k[3:]: v for k, v in d.items() if k.startswith("kw.")})


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, reduce_positions: bool = True) -> torch.Tensor:
    """Cross-entropy of next-token prediction, Eq. (1) of seed 000, per member.

    Args:
        logits: ``(E, B, T, V)``; targets: ``(E, B, T)``.
    Returns:
        ``(E,)`` mean loss per member, or ``(E, T)`` per position when ``reduce_positions=False``.
    """
    E, B, T, V = logits.shape
    nll = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none").reshape(E, B, T)
    return nll.mean(dim=(1, 2)) if reduce_positions else nll.mean(dim=1)


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """``(E, B, ...)`` -> ``(E,)``: the plain mean over everything but the member axis, or
    ``sum(w * values) / sum(w)`` per member (a member with no weight at all gets 0)."""
    dims = tuple(range(1, values.dim()))
    if weights is None:
        return values.mean(dim=dims)
    return (values * weights).sum(dim=dims) / weights.sum(dim=dims).clamp_min(torch.finfo(values.dtype).tiny)


class Objective(ABC):
    """What is predicted and how it is scored. Subclasses implement :meth:`prepare` and :meth:`pointwise`."""

    name: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]] = ("loss",)  # what evaluation reports per split
    extra_length: ClassVar[int] = 0  # tokens a stream draws beyond seq_len (next-token needs one more)

    @abstractmethod
    def prepare(self, sample: Sample, gens: Sequence[torch.Generator]) -> Batch:
        """A task's raw sample (``(E, B, T)`` tokens or a dict of ``(E, B, ...)`` tensors) as a :class:`Batch`;
        ``gens`` (one per member) drive any random corruption (masks)."""

    @abstractmethod
    def pointwise(self, outputs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, correct)`` at every scored position, both shaped like ``batch.targets``."""

    def outputs(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return model(batch.inputs, **batch.model_kwargs)

    def output_width(self, task: Any) -> int:
        """Scores a training step keeps per input position (the output layer's width where every position
        is scored: the vocabulary), 0 when it keeps few (one label per sequence). The trainer's CPU chunk
        of members keeps their logits within a cache (:func:`tdlab.train.trainer.auto_chunk`)."""
        return 0

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The training loss of every member: ``(E,)``."""
        return weighted_mean(self.pointwise(self.outputs(model, batch), batch)[0], batch.weights)

    def scores(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        """Every metric of :attr:`metrics` on ``batch``, ``{name: (E,)}`` float64."""
        loss, correct = self.pointwise(self.outputs(model, batch), batch)
        out = {"loss": weighted_mean(loss.double(), batch.weights)}
        if "acc" in self.metrics:
            out["acc"] = weighted_mean(correct.double(), batch.weights)
        return out

    def reference_scores(
        self, predictors: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], batch: Batch
    ) -> dict[str, torch.Tensor]:
        """The loss of reference predictors (``tokens (..., T) -> probabilities (..., T, V)``) on the very
        batch the model is scored on, ``{name: (E,)}``; objectives without a probabilistic reading return none."""
        return {}


class NextToken(Objective):
    """Next-token cross-entropy (seed 000 Eq. (1)): the sample's tokens ``0..T-1`` predict ``1..T``.

    A sample ``{"tokens": (E, B, T), "mask": (E, B, T)}`` holds right-padded sequences (seed 001's text
    mix): a target counts when ``mask`` is 1 there, so a batch's loss is the mean over its real targets
    (:func:`weighted_mean`) and padding never enters it. Without a mask every position counts equally.
    """

    name = "next-token"
    extra_length = 1

    def output_width(self, task: Any) -> int:
        return int(getattr(task, "vocab", 0) or 0)

    def prepare(self, sample: Sample, gens: Sequence[torch.Generator]) -> Batch:
        x = sample if isinstance(sample, torch.Tensor) else sample["tokens"]
        mask = None if isinstance(sample, torch.Tensor) else sample.get("mask")
        weights = None if mask is None else mask[..., 1:].to(torch.get_default_dtype())
        return Batch(x[..., :-1], x[..., 1:], weights)

    def pointwise(self, outputs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        E, B, T, V = outputs.shape
        nll = F.cross_entropy(outputs.reshape(-1, V), batch.targets.reshape(-1), reduction="none").reshape(E, B, T)
        return nll, outputs.argmax(-1) == batch.targets

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        if batch.weights is not None:
            return super().loss(model, batch)
        return next_token_loss(self.outputs(model, batch), batch.targets)  # the unweighted path, bit for bit as before

    def scores(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        if batch.weights is not None:
            return super().scores(model, batch)
        return {"loss": self.loss(model, batch).double()}

    def reference_scores(
        self, predictors: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], batch: Batch
    ) -> dict[str, torch.Tensor]:
        out = {}
        for k, predict in predictors.items():
            probs = predict(batch.inputs).to(torch.float64).clamp_min(1e-300)
            nll = -probs.log().gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)  # (E, B, T)
            out[k] = nll.mean(dim=(1, 2))
        return out


class LastPosition(Objective):
    """Cross-entropy of one label per sequence, predicted at the last position (seed 001, A.3).

    Sample: ``{"tokens": (E, B, L), "label": (E, B)}``. A model that emits ``(E, B, L, V)`` is read at
    position ``L - 1``; one that emits ``(E, B, V)`` (a pooled model, e.g. Emb-MLP) is read as is.
    """

    name = "last-position"
    metrics = ("loss", "acc")

    def prepare(self, sample: Sample, gens: Sequence[torch.Generator]) -> Batch:
        if isinstance(sample, torch.Tensor):
            raise TypeError("last-position objective needs a sample {'tokens': (E,B,L), 'label': (E,B)}")
        if "inputs" in sample:
            return Batch.from_dict(sample)
        return Batch(sample["tokens"].long(), sample["label"].long())

    def pointwise(self, outputs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = outputs[:, :, -1] if outputs.dim() == 4 else outputs  # (E, B, V)
        E, B, V = logits.shape
        nll = F.cross_entropy(logits.reshape(-1, V), batch.targets.reshape(-1), reduction="none").reshape(E, B)
        return nll, logits.argmax(-1) == batch.targets


def mask_tokens(
    tokens: torch.Tensor,
    key_mask: torch.Tensor | None,
    gens: Sequence[torch.Generator],
    p_m: float = 0.15,
    p_c: float = 0.1,
    p_r: float = 0.1,
    mask_id: int = 0,
    words: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT-style masking, the corruption of :class:`MaskedTokens` (seed 004's §3.2 is this process).

    A real position (``key_mask`` True) joins M with probability ``p_m``; a position of M then keeps
    its word with probability ``p_c``, becomes a uniform draw from ``[words[0], words[1])`` (the
    original word included) with probability ``p_r``, and becomes ``mask_id`` otherwise. Positions
    outside M and padding are unchanged.

    Draws, per member from its own generator over the full ``(B, W)`` width: uniforms ``u (3, B, W)``
    (``u[0] < p_m`` selects; ``u[1]`` in ``[0, p_c)`` keeps, ``[p_c, p_c + p_r)`` replaces, else masks;
    ``u[2]`` unused) then the replacement words ``(B, W)``. Member ``e``'s masks depend on the width ``W``:
    keep it fixed (e.g. ``Topics.sample(length=...)``) for masks independent of the other members.

    Args:
        tokens: ``(E, B, W)`` long; key_mask: ``(E, B, W)`` bool or None (every position real).
        gens: one generator per member; p_m, p_c, p_r: in [0, 1] with ``p_c + p_r <= 1``.
        mask_id: the id a masked position becomes. words: half-open range of replacement ids, e.g. a topic
            task's ``words`` ``(1, Tv + 1)`` (§3.2); required (no default can know the vocabulary), None is
            refused. Seed 004's authors' code: ``(0, vocab)``.
    Returns:
        ``(corrupted (E, B, W) long, selected (E, B, W) bool)``: the masked document and M.
    """
    for name, p in (("p_m", p_m), ("p_c", p_c), ("p_r", p_r)):
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p}")
    if p_c + p_r > 1.0:
        raise ValueError(f"p_c + p_r must be at most 1, got p_c={p_c}, p_r={p_r}")
    if words is None or not words[0] < words[1]:
        raise ValueError(f"words must be a non-empty half-open id range (lo, hi), e.g. (1, Tv + 1), got {words}")
    if tokens.dim() != 3 or len(gens) != tokens.shape[0]:
        raise ValueError(f"tokens must be (E, B, W) with E = len(gens) = {len(gens)}, got {tuple(tokens.shape)}")
    _E, B, W = tokens.shape
    corrupted, selected = tokens.clone(), torch.zeros_like(tokens, dtype=torch.bool)
    for e, g in enumerate(gens):
        u = torch.rand((3, B, W), generator=g, device=tokens.device)
        replacement = torch.randint(words[0], words[1], (B, W), generator=g, device=tokens.device)
        sel = u[0] < p_m
        if key_mask is not None:
            sel &= key_mask[e]
        replace = sel & (u[1] >= p_c) & (u[1] < p_c + p_r)
        to_mask = sel & (u[1] >= p_c + p_r)
        corrupted[e] = torch.where(replace, replacement, corrupted[e]).masked_fill(to_mask, mask_id)
        selected[e] = sel
    return corrupted, selected


class MaskedTokens(Objective):
    """Masked-token prediction (seed 004, §3.2): Eq. (1)'s loss ``mean over documents of
    (1/|M|) Σ_{j in M} ℓ(f(X̃)_j, x_j)``, with ℓ the cross-entropy of Eq. (4) (``loss="ce"``) or the
    squared loss of Eq. (3) summed over the vocabulary (``loss="squared"``).

    Sample: ``{"tokens": (E, B, N), "key_mask": (E, B, N) bool}`` (``key_mask`` False on padding) or a
    bare ``(E, B, N)`` tensor. The model is called as ``model(corrupted, key_mask=...)``.

    Options the authors' code adds (``authors_compat`` of the topic experiments switches them on; the
    equations are the default): ``replace_from_all`` (random replacement drawn from every id, specials
    included), ``hide_selected`` (every position of M, kept ones too, hidden from attention as a key),
    ``at_least_one`` (a document whose M came out empty gets its first valid position masked). A document with empty M has no Eq. (1) term and weighs 0.
    """

    name = "masked-tokens"
    metrics = ("loss", "acc")

    def __init__(
        self,
        *,
        vocab: int,
        mask_id: int = 0,
        words: tuple[int, int] | None = None,
        p_m: float = 0.15,
        p_c: float = 0.1,
        p_r: float = 0.1,
        loss: Literal["ce", "squared"] = "ce",
        replace_from_all: bool = False,
        hide_selected: bool = False,
        at_least_one: bool = False,
        gather_queries: bool = False,
    ) -> None:
        for name, p in (("p_m", p_m), ("p_c", p_c), ("p_r", p_r)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        if p_c + p_r > 1.0:
            raise ValueError(f"p_c + p_r must be at most 1, got {p_c + p_r}")
        self.vocab, self.mask_id = vocab, mask_id
        self.words = (0, vocab) if replace_from_all else (words if words is not None else (mask_id + 1, vocab))
        self.p_m, self.p_c, self.p_r, self.kind = p_m, p_c, p_r, loss
        self.hide_selected, self.at_least_one, self.gather_queries = hide_selected, at_least_one, gather_queries

    def output_width(self, task: Any) -> int:
        return self.vocab

    def prepare(self, sample: Sample, gens: Sequence[torch.Generator]) -> Batch:
        if isinstance(sample, Mapping) and "inputs" in sample:
            return Batch.from_dict(sample)  # masks drawn once, when a fixed data set was built
        tokens = sample if isinstance(sample, torch.Tensor) else sample["tokens"]
        valid = None if isinstance(sample, torch.Tensor) else sample.get("key_mask")
        corrupted, sel = mask_tokens(
            tokens, valid, gens, self.p_m, self.p_c, self.p_r, mask_id=self.mask_id, words=self.words
        )
        if self.at_least_one:
            # The authors' builder keeps only documents with a masked token; masking the first valid
            # position of a document whose M came out empty is our deterministic stand-in.
            first = (
                valid.long().argmax(-1, keepdim=True)
                if valid is not None
                else torch.zeros((*sel.shape[:-1], 1), dtype=torch.long, device=sel.device)
            )
            add = torch.zeros_like(sel).scatter_(-1, first, True) & ~sel.any(-1, keepdim=True)
            sel = sel | add
            corrupted = corrupted.masked_fill(add, self.mask_id)
        weights = sel.to(torch.get_default_dtype())
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1.0)  # each document's M weighs 1 in all
        key_mask = torch.ones_like(sel) if valid is None else valid.clone()
        if self.hide_selected:
            key_mask &= ~sel
        if not self.gather_queries:
            return Batch(corrupted, tokens, weights, {"key_mask": key_mask})
        # Score only the masked positions: the model is asked for f at these columns (its ``queries``
        # argument), padded to the largest |M| of the batch with weight-0 slots.
        Q = max(1, int(sel.sum(-1).max()))
        order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True)[..., :Q]  # selected positions first
        slot = torch.arange(Q, device=sel.device) < sel.sum(-1, keepdim=True)
        return Batch(
            corrupted,
            torch.gather(tokens, -1, order),
            torch.gather(weights, -1, order) * slot,
            {"key_mask": key_mask, "queries": order},
        )

    def pointwise(self, outputs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        E, B, N, V = outputs.shape
        if self.kind == "squared":  # Eq. (3): ||f(X̃)_j - e_{x_j}||², summed over the vocabulary
            loss = (outputs - F.one_hot(batch.targets, V).to(outputs.dtype)).pow(2).sum(-1)
        else:  # Eq. (4)
            loss = F.cross_entropy(outputs.reshape(-1, V), batch.targets.reshape(-1), reduction="none").reshape(E, B, N)
        return loss, outputs.argmax(-1) == batch.targets
