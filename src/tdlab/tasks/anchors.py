"""Composite anchor functions (seed 001, §3.1–3.2, §4.1, §4.5, App. A.1, Fig. 8).

Tokens are integers. Keys ``Z = {key_min..key_max}`` (default 21..120, ``N_Z = 100``), memory anchors
``A_mem = {1..10}``, reasoning anchors ``A_rsn = {11..20}``. A sequence of length ``L`` (Eq. 1)::

    X = [z_1, .., z_p, a_{p+1}, .., a_{p+q}, z_{p+q+1}, .., z_L]

holds one block of ``q`` consecutive anchors of one type; ``z_p`` just before the block is the *key*,
every other position is a *noise* key drawn from ``U(Z)``. The label depends on ``(z_p, a)`` only:

* reasoning (every ``a_i in A_rsn``): ``y = z_p + sum_i a_i``;
* memory (every ``a_i in A_mem``): ``y = y^(z_p, a)``, drawn once per pair and kept — from ``U(Z)``
  (``F_mem,1``, ``memory_labels="uniform"``) or from ``U{z_p - Σa .. z_p + Σa}`` (``F_mem,2``,
  ``"window"``, §4.5).

Anchor tuples in ``M`` (``test_tuples``, default ``{(11, 13), (13, 11)}``) form ``D_rsn,test``; the
training set is ``D_mem ∪ D_rsn,train`` with an equal number of sequences per anchor tuple (§4.1).

Choices where the seed is silent (all options):

* Key position: the seed's Eq. 1 only needs ``1 <= p <= L - q``; A.1 says the key-anchor pair "may
  occur at any position". Default ``p ~ U{1..L-q}`` (``p_min``, ``p_max``), as the same group's public
  anchor-function code does, so the anchors may end the sequence.
* Set sizes: the seed's "200000 data pairs, an equal number of samples for each anchor pair" is
  1000 per tuple over all 200 tuples (the masked ones included), so the defaults are
  ``n_train = 198000`` (198 training tuples) and ``n_test = 2000`` (the 2 tuples of ``M``). When ``n``
  is not a multiple of the tuple count, counts differ by at most one (the extra ones go to the first
  tuples of the split's list, so every member has the same number of sequences of each kind).
* Mixed-type tuples (memory and reasoning anchors in one block): none.
* Fig. 7a (§4.5) memory groups: the seed gives the label ranges ``{30..29 + 20 i}``, i = 1..4 (nested,
  all starting at 30); ``group_ranges="disjoint"`` offers ``{30 + 20(i-1)..29 + 20 i}``. Group make-up
  is unstated: the memory anchors are split into ``memory_groups`` consecutive equal groups and a
  tuple lies within one group. For Fig. 7a, use ``mix="memory"`` with e.g. ``mem_max=20``; with
  ``mix="memory"`` the reasoning range and ``test_tuples`` are unused and not checked.

Memory labels: a table ``(N_Z, number of memory tuples)`` drawn from a generator seeded by the data
generator's *seed* (``gen.initial_seed()``), not its position, so every split built from the same
member seed (train, a memory evaluation set, ...) gives every ``(z_p, a)`` the same label. Pass
``table=`` to share one table explicitly.

Generation is vectorised: no Python loop over samples.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor

from tdlab.config import Config
from tdlab.seeding import derive_seed

__all__ = [
    "KIND_MEM",
    "KIND_RSN_TEST",
    "KIND_RSN_TRAIN",
    "SPLITS",
    "Anchors",
    "AnchorsConfig",
    "Split",
    "anchor_splits",
    "chance_accuracy",
    "example_sequences",
    "label_marginal_losses",
    "memory_splits",
    "split_label_laws",
    "training_sets",
]

Split = Literal["train", "mem", "rsn_train", "test_rsn"]
SPLITS: tuple[str, ...] = ("train", "mem", "rsn_train", "test_rsn")
KIND_MEM, KIND_RSN_TRAIN, KIND_RSN_TEST = 0, 1, 2
_TABLE_STREAM = "anchors-memory-table"


class AnchorsConfig(Config):
    """The anchor-function data (seed 001 §4.1 defaults)."""

    key_min: int = Field(21, ge=0, le=65535)  # Z = {21..120} (§4.1)
    key_max: int = Field(120, ge=0, le=65535)
    mem_min: int = Field(1, ge=0, le=65535)  # A_mem = {1..10}
    mem_max: int = Field(10, ge=0, le=65535)
    rsn_min: int = Field(11, ge=0, le=65535)  # A_rsn = {11..20}
    rsn_max: int = Field(20, ge=0, le=65535)
    q: int = Field(2, ge=1, le=16)  # anchors per sequence (§4.1)
    L: int = Field(9, ge=2, le=512)  # sequence length (§4.1; L = q + 1 with p = 1 is the Emb-MLP task, §4.2)
    d_vob: int = Field(200, ge=2, le=65536)  # vocabulary (A.3)
    test_tuples: tuple[tuple[int, ...], ...] = ((11, 13), (13, 11))  # M (§4.1)
    n_train: int = Field(198_000, ge=1, le=100_000_000)  # 1000 per training tuple (module docstring)
    n_test: int = Field(2_000, ge=1, le=100_000_000)  # 1000 per tuple of M
    p_min: int = Field(1, ge=1, le=511)  # key position p (1-based) ~ U{p_min..p_max}; seed silent
    p_max: int | None = Field(None, ge=1, le=511)  # None: L - q
    mix: Literal["both", "memory", "reasoning"] = "both"  # mapping types in the training set
    memory_labels: Literal["uniform", "window"] = "uniform"  # F_mem,1 | F_mem,2 (§4.5)
    memory_groups: int = Field(0, ge=0, le=64)  # Fig. 7a: 0 = off, else groups of memory anchors
    group_ranges: Literal["nested", "disjoint"] = "nested"  # Fig. 7a label ranges (see module doc)
    group_label_start: int = Field(30, ge=0, le=65535)  # {30..29 + 20 i} (§4.5)
    group_label_width: int = Field(20, ge=1, le=65535)

    @model_validator(mode="after")
    def _check(self) -> AnchorsConfig:
        for lo_key, hi_key in (("key_min", "key_max"), ("mem_min", "mem_max"), ("rsn_min", "rsn_max")):
            if getattr(self, lo_key) > getattr(self, hi_key):
                raise ValueError(f"{lo_key}={getattr(self, lo_key)} must be <= {hi_key}={getattr(self, hi_key)}")
        if self.q >= self.L:
            raise ValueError(f"q={self.q} must be < L={self.L} (the key precedes the q anchors)")
        p_max = self.L - self.q if self.p_max is None else self.p_max
        if not 1 <= self.p_min <= p_max <= self.L - self.q:
            raise ValueError(
                f"p_min={self.p_min}, p_max={self.p_max}: need 1 <= p_min <= p_max <= L - q = {self.L - self.q}"
            )
        ranges = [("keys", self.key_min, self.key_max)]
        if self.mix != "reasoning":
            ranges.append(("memory anchors", self.mem_min, self.mem_max))
        if self.mix != "memory":
            ranges.append(("reasoning anchors", self.rsn_min, self.rsn_max))
        for (n1, a1, b1), (n2, a2, b2) in itertools.combinations(ranges, 2):
            if a1 <= b2 and a2 <= b1:
                raise ValueError(f"key/anchor ranges must be disjoint: {n1} {a1}..{b1} overlap {n2} {a2}..{b2}")
        top = max(b for _, _, b in ranges)
        if top >= self.d_vob:
            raise ValueError(f"d_vob={self.d_vob} must exceed every token id (largest {top})")
        if self.mix != "memory":
            y_max = self.key_max + self.q * self.rsn_max
            if y_max >= self.d_vob:
                raise ValueError(
                    f"d_vob={self.d_vob} must exceed the largest reasoning label key_max + q*rsn_max = {y_max}"
                )
            for t in self.test_tuples:
                if len(t) != self.q or not all(self.rsn_min <= a <= self.rsn_max for a in t):
                    raise ValueError(
                        f"test_tuples: {t} is not a reasoning tuple (need {self.q} anchors in {self.rsn_min}..{self.rsn_max})"
                    )
            if len(set(self.test_tuples)) != len(self.test_tuples):
                raise ValueError(f"test_tuples: duplicate tuples in {self.test_tuples}")
            if len(self.test_tuples) >= (self.rsn_max - self.rsn_min + 1) ** self.q:
                raise ValueError("test_tuples: every reasoning tuple is masked, D_rsn,train would be empty")
        if self.mix != "reasoning":
            n_mem = self.mem_max - self.mem_min + 1
            if self.memory_groups:
                if self.memory_labels != "uniform":
                    raise ValueError(
                        "memory_labels must be 'uniform' when memory_groups > 0 (groups set the label ranges)"
                    )
                if n_mem % self.memory_groups:
                    raise ValueError(f"memory_groups={self.memory_groups} must divide the {n_mem} memory anchors")
                hi = self.group_label_start + self.group_label_width * self.memory_groups - 1
                if hi >= self.d_vob:
                    raise ValueError(f"d_vob={self.d_vob} must exceed the largest group label {hi}")
            if self.memory_labels == "window":
                lo, hi = self.key_min - self.q * self.mem_max, self.key_max + self.q * self.mem_max
                if lo < 0 or hi >= self.d_vob:
                    raise ValueError(
                        f"memory_labels='window': labels z -/+ sum(a) span {lo}..{hi}, need 0..d_vob-1={self.d_vob - 1}"
                    )
        return self

    @property
    def p_hi(self) -> int:
        """Largest key position (1-based)."""
        return self.L - self.q if self.p_max is None else self.p_max


def _product(lo: int, hi: int, q: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(lo, hi + 1), repeat=q))


@dataclass
class Anchors:
    """The anchor-function task of seed 001: tuples, a memory-label table, fixed data sets.

    Attributes:
        cfg: the data configuration.
        vocab: ``cfg.d_vob``.
    """

    cfg: AnchorsConfig = field(default_factory=AnchorsConfig)

    def __post_init__(self) -> None:
        c = self.cfg
        self.vocab = c.d_vob
        keys = torch.arange(c.key_min, c.key_max + 1)
        self.keys = keys
        # Memory tuples: all q-tuples of memory anchors, or those within one group (Fig. 7a).
        mem: list[tuple[int, ...]] = []
        groups: list[int] = []
        if c.mix != "reasoning":
            if c.memory_groups:
                size = (c.mem_max - c.mem_min + 1) // c.memory_groups
                for g in range(c.memory_groups):
                    lo = c.mem_min + g * size
                    t = _product(lo, lo + size - 1, c.q)
                    mem += t
                    groups += [g] * len(t)
            else:
                mem = _product(c.mem_min, c.mem_max, c.q)
                groups = [0] * len(mem)
        rsn_train: list[tuple[int, ...]] = []
        test: list[tuple[int, ...]] = []
        if c.mix != "memory":
            masked = set(c.test_tuples)
            rsn_train = [t for t in _product(c.rsn_min, c.rsn_max, c.q) if t not in masked]
            test = list(c.test_tuples)
        q = c.q
        as_t = lambda ts: torch.tensor(ts, dtype=torch.long).reshape(-1, q)  # noqa: E731
        self.mem_tuples, self.rsn_train_tuples, self.test_tuples = as_t(mem), as_t(rsn_train), as_t(test)
        self.mem_groups = torch.tensor(groups, dtype=torch.long)

    # --- tuples and labels ------------------------------------------------------------------------
    def split_tuples(self, split: str) -> tuple[Tensor, Tensor]:
        """Anchor tuples of a split and their kind.

        Returns:
            ``tuples (k, q)`` long and ``kind (k,)`` int8 (0 memory, 1 reasoning-train, 2 reasoning-test);
            ``"train"`` lists the memory tuples first.
        """
        km = torch.full((len(self.mem_tuples),), KIND_MEM, dtype=torch.int8)
        kr = torch.full((len(self.rsn_train_tuples),), KIND_RSN_TRAIN, dtype=torch.int8)
        kt = torch.full((len(self.test_tuples),), KIND_RSN_TEST, dtype=torch.int8)
        if split == "train":
            return torch.cat([self.mem_tuples, self.rsn_train_tuples]), torch.cat([km, kr])
        if split == "mem":
            return self.mem_tuples, km
        if split == "rsn_train":
            return self.rsn_train_tuples, kr
        if split == "test_rsn":
            return self.test_tuples, kt
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")

    def group_range(self, g: int) -> tuple[int, int]:
        """Inclusive label range of memory group ``g`` (0-based) in Fig. 7a mode."""
        c = self.cfg
        hi = c.group_label_start + c.group_label_width * (g + 1) - 1
        lo = c.group_label_start if c.group_ranges == "nested" else c.group_label_start + c.group_label_width * g
        return lo, hi

    def token_classes(self) -> dict[str, list[int]]:
        """The token ids of each class: ``{"key": Z, "memory": A_mem, "reasoning": A_rsn}``, in increasing order."""
        c = self.cfg
        return {
            "key": list(range(c.key_min, c.key_max + 1)),
            "memory": list(range(c.mem_min, c.mem_max + 1)),
            "reasoning": list(range(c.rsn_min, c.rsn_max + 1)),
        }

    def memory_group(self, first_anchor: Tensor) -> Tensor:
        """Fig. 7a's memory group (0-based) of sequences whose first anchor is ``first_anchor`` (any shape,
        long): the memory anchors split into ``memory_groups`` consecutive equal groups, a tuple within one."""
        c = self.cfg
        size = (c.mem_max - c.mem_min + 1) // c.memory_groups
        return (first_anchor - c.mem_min) // size

    def memory_table(self, gen: torch.Generator | int) -> Tensor:
        """The memory labels ``y^(z, a)``: ``(N_Z, number of memory tuples)`` long, row ``z - key_min``,
        column the index of ``a`` in :attr:`mem_tuples`.

        Args:
            gen: a data generator (its *seed*, ``gen.initial_seed()``, is used, not its state) or that
                seed as an int. The table is drawn from a stream derived from it, so train and any
                memory evaluation set of one member agree.
        """
        c = self.cfg
        seed = gen.initial_seed() if isinstance(gen, torch.Generator) else int(gen)
        g = torch.Generator().manual_seed(derive_seed(seed, _TABLE_STREAM))
        nz, nt = len(self.keys), len(self.mem_tuples)
        if nt == 0:
            return torch.empty(nz, 0, dtype=torch.long)
        if c.memory_groups:
            bounds = torch.tensor([self.group_range(int(k)) for k in self.mem_groups], dtype=torch.long)  # (nt, 2)
            lo, width = bounds[:, 0], bounds[:, 1] - bounds[:, 0] + 1
            u = torch.rand(nz, nt, generator=g, dtype=torch.float64)
            return lo + (u * width).long().clamp(max=width - 1)
        if c.memory_labels == "uniform":  # F_mem,1: y ~ U(Z)
            return torch.randint(c.key_min, c.key_max + 1, (nz, nt), generator=g)
        # F_mem,2: y ~ U{z - S .. z + S}, S = sum(a)
        S = self.mem_tuples.sum(1)[None, :]
        z = self.keys[:, None]
        u = torch.rand(nz, nt, generator=g, dtype=torch.float64)
        return z - S + (u * (2 * S + 1)).long().clamp(max=2 * S)

    # --- data sets ----------------------------------------------------------------------------------
    def dataset(
        self, gen: torch.Generator, n: int, split: str = "train", table: Tensor | None = None
    ) -> dict[str, Tensor]:
        """``n`` sequences of one split, an equal count per anchor tuple (±1), in random order.

        Args:
            gen: the member's data generator (CPU).
            n: number of sequences.
            split: ``"train"`` (D_mem ∪ D_rsn,train), ``"mem"``, ``"rsn_train"`` or ``"test_rsn"`` (M).
            table: memory labels (:meth:`memory_table`); default ``memory_table(gen)``.
        Returns:
            dict with ``tokens (n, L)`` long, ``label (n,)`` long, ``kind (n,)`` int8 (0 mem,
            1 rsn-train, 2 rsn-test), ``key (n,)`` long (z_p), ``key_pos (n,)`` long (0-based index of
            z_p), ``anchors (n, q)`` long.
        """
        c = self.cfg
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        tuples, kinds = self.split_tuples(split)
        k = len(tuples)
        if k == 0:
            raise ValueError(f"split {split!r} has no anchor tuples under mix={c.mix!r}")
        if table is None:
            table = self.memory_table(gen)
        base, extra = divmod(n, k)
        counts = torch.full((k,), base, dtype=torch.long)
        counts[:extra] += 1  # the first tuples of the list: every member gets the same per-kind totals
        tid = torch.repeat_interleave(torch.arange(k), counts)[torch.randperm(n, generator=gen)]
        a = tuples[tid]  # (n, q)
        kind = kinds[tid]
        tokens = torch.randint(c.key_min, c.key_max + 1, (n, c.L), generator=gen)  # noise keys
        key_pos = torch.randint(c.p_min - 1, c.p_hi, (n,), generator=gen)  # 0-based index of z_p
        rows = torch.arange(n)[:, None]
        tokens[rows, key_pos[:, None] + 1 + torch.arange(c.q)[None, :]] = a
        key = tokens[torch.arange(n), key_pos]
        label = key + a.sum(1)  # reasoning
        is_mem = kind == KIND_MEM
        if bool(is_mem.any()):
            # Column of each memory tuple in the table: memory tuples come first in every split's list
            # that holds them, in the order of self.mem_tuples.
            mem_col = self._mem_column(a[is_mem])
            label[is_mem] = table[key[is_mem] - c.key_min, mem_col]
        return {"tokens": tokens, "label": label, "kind": kind, "key": key, "key_pos": key_pos, "anchors": a}

    def _mem_column(self, a: Tensor) -> Tensor:
        """Index of each memory tuple ``a (m, q)`` in :attr:`mem_tuples` (mixed-radix code lookup)."""
        c = self.cfg
        base = c.mem_max - c.mem_min + 1
        code = lambda t: ((t - c.mem_min) * base ** torch.arange(c.q - 1, -1, -1)).sum(-1)  # noqa: E731
        lut = torch.full((base**c.q,), -1, dtype=torch.long)
        lut[code(self.mem_tuples)] = torch.arange(len(self.mem_tuples))
        col = lut[code(a)]
        if bool((col < 0).any()):
            raise ValueError("a memory tuple outside the task's memory tuples")
        return col

    def splits(self, gen: torch.Generator, device: str | torch.device = "cpu") -> dict[str, dict[str, Tensor]]:
        """One member's data sets, the ``make(generator, device)`` of :class:`tdlab.train.data.FixedDataset`.

        Returns:
            ``{"train": D_mem ∪ D_rsn,train (cfg.n_train), "mem": its memory rows (D_mem),
            "rsn_train": its reasoning rows (D_rsn,train), "test": D_rsn,test (cfg.n_test)}``, each a
            :meth:`dataset` dict on ``device``. ``mem`` and ``rsn_train`` are the very training sequences
            (the seed reports loss and accuracy on the training sets, §4.1); one memory table serves all.
            Empty splits (``mix``) are left out. Data are drawn on the CPU; a generator on another device
            is replaced by a CPU one with its seed, so the data do not depend on the device.
        """
        cpu = gen if gen.device.type == "cpu" else torch.Generator().manual_seed(gen.initial_seed())
        table = self.memory_table(cpu)
        c = self.cfg
        train = self.dataset(cpu, c.n_train, "train", table)
        out = {"train": train}
        for name, kind in (("mem", KIND_MEM), ("rsn_train", KIND_RSN_TRAIN)):
            rows = train["kind"] == kind
            if bool(rows.any()):
                out[name] = {k: v[rows] for k, v in train.items()}
        if len(self.test_tuples):
            out["test"] = self.dataset(cpu, c.n_test, "test_rsn", table)
        return {k: {n: t.to(device) for n, t in v.items()} for k, v in out.items()}

    @staticmethod
    def emb_mlp_view(data: dict[str, Tensor]) -> Tensor:
        """The Emb-MLP input ``[z_p, a_{p+1}, .., a_{p+q}]`` (§4.2, ``L = q + 1``) of each sequence.

        Args:
            data: a :meth:`dataset` dict.
        Returns:
            ``(n, q + 1)`` long.
        """
        q = data["anchors"].shape[1]
        idx = data["key_pos"][:, None] + torch.arange(q + 1)[None, :]
        return torch.gather(data["tokens"], 1, idx)


def anchor_splits(
    task: Anchors,
    n_train: int,
    n_eval: int,
    n_test: int,
    view: Callable[[dict[str, Tensor]], Tensor] | None = None,
) -> Callable[..., dict[str, dict[str, Tensor]]]:
    """The ``make(gen, device)`` of :class:`tdlab.train.data.FixedDataset` with bounded evaluation sets:
    one member's ``train`` set (D_mem ∪ D_rsn,train, ``n_train`` sequences), its ``mem`` / ``rsn_train``
    evaluation subsets (the first ``n_eval`` training sequences of each kind: the seed measures both on
    the training sequences, §4.1) and the held-out ``test`` set (D_rsn,test, ``n_test`` sequences of ``M``).
    Unlike :meth:`Anchors.splits`, each set carries the model's input only (``view``) and the label.

    Args:
        view: maps a :meth:`Anchors.dataset` dict to the model's tokens (``Anchors.emb_mlp_view`` for the
            Emb-MLP); default the sequences themselves.
    Returns:
        ``make(gen, device) -> {split: {"tokens": (n, T) long, "label": (n,) long}}``; ValueError from
        ``make`` when the training set holds no sequence of a kind (``mix``).
    """
    view = view or (lambda d: d["tokens"])

    def make(gen: torch.Generator, device: str | torch.device = "cpu") -> dict[str, dict[str, torch.Tensor]]:
        train = task.dataset(gen, n_train, "train")  # the memory table comes from gen's seed
        test = task.dataset(gen, n_test, "test_rsn")
        tokens = view(train)
        out = {"train": {"tokens": tokens, "label": train["label"]}}
        for split, kind in (("mem", KIND_MEM), ("rsn_train", KIND_RSN_TRAIN)):
            idx = torch.nonzero(train["kind"] == kind).squeeze(1)[:n_eval]
            if idx.numel() == 0:
                raise ValueError(f"the training set holds no {split} sequences (task.mix={task.cfg.mix!r})")
            out[split] = {"tokens": tokens[idx], "label": train["label"][idx]}
        out["test"] = {"tokens": view(test), "label": test["label"]}
        return {k: {n: t.to(device) for n, t in v.items()} for k, v in out.items()}

    return make


def training_sets(
    task: Anchors, gens: Iterable[torch.Generator], n_train: int, keys: Sequence[str], first: int | None = None
) -> dict[str, Tensor]:
    """Each data generator's training set (``n_train`` sequences of D_mem ∪ D_rsn,train, its first draw, as
    :func:`anchor_splits` and :func:`memory_splits` draw it), its first ``first`` sequences (all: ``None``),
    stacked: ``{key: (len(gens), n, ...)}`` for each of ``keys`` (:meth:`Anchors.dataset`'s fields)."""
    sets = [task.dataset(g, n_train, "train") for g in gens]
    return {k: torch.stack([d[k][:first] for d in sets]) for k in keys}


def example_sequences(task: Anchors, seed: int, per_kind: int = 4) -> dict[str, dict[str, Tensor]]:
    """Seed 001 Fig. 8's example sequences: ``per_kind`` memory and ``per_kind`` reasoning (training) sequences,
    drawn from ``seed``: ``{"memory": ..., "reasoning": ...}``, each an :meth:`Anchors.dataset` dict."""
    g = torch.Generator().manual_seed(seed)
    mem = task.dataset(g, per_kind, "mem")
    rsn = task.dataset(g, per_kind, "rsn_train")
    return {"memory": mem, "reasoning": rsn}


def chance_accuracy(cfg: AnchorsConfig) -> float:
    """Chance accuracy on D_rsn,test: a guess from the held-out labels' marginal (``z + Σa`` with ``z``
    uniform: ``1/N_Z``)."""
    return 1.0 / (cfg.key_max - cfg.key_min + 1)


def memory_splits(task: Anchors, n_train: int, n_eval: int) -> Callable[..., dict[str, dict[str, Tensor]]]:
    """``make(gen, device)`` of a memory-only :class:`~tdlab.train.data.FixedDataset`: ``train`` and ``mem`` (its
    first ``n_eval`` sequences), each ``{"tokens", "label"}``."""

    def make(gen: torch.Generator, device: str | torch.device = "cpu") -> dict[str, dict[str, torch.Tensor]]:
        d = task.dataset(gen, n_train, "train")
        out = {
            "train": {"tokens": d["tokens"], "label": d["label"]},
            "mem": {"tokens": d["tokens"][:n_eval], "label": d["label"][:n_eval]},
        }
        return {k: {n: t.to(device) for n, t in v.items()} for k, v in out.items()}

    return make


def split_label_laws(task: Anchors) -> dict[str, np.ndarray]:
    """The label law of each split's population (seed 001, §4.1, §4.5): ``{"mem", "rsn_train",
    "test_rsn": (d_vob,)}`` float64 (splits with no tuple left out).

    Every tuple of a split weighs the same and the key is uniform on ``Z`` (as :meth:`Anchors.dataset`
    draws them); reasoning labels are ``z + Σa``; memory labels are averaged over the table's draw:
    ``U(Z)`` (F_mem,1), ``U{z − Σa .. z + Σa}`` (F_mem,2) or the tuple's group range (Fig. 7 left).
    """
    c = task.cfg
    V = c.d_vob
    z = np.arange(c.key_min, c.key_max + 1)
    out = {}
    for split in ("mem", "rsn_train", "test_rsn"):
        tuples, kinds = task.split_tuples(split)
        if len(tuples) == 0:
            continue
        law = np.zeros(V)
        for j, (t, kind) in enumerate(zip(tuples.tolist(), kinds.tolist(), strict=True)):
            S = int(sum(t))
            if kind != KIND_MEM:
                np.add.at(law, z + S, 1.0 / z.size)
            elif c.memory_groups:
                lo, hi = task.group_range(int(task.mem_groups[j]))
                law[lo : hi + 1] += 1.0 / (hi - lo + 1)
            elif c.memory_labels == "uniform":
                law[z] += 1.0 / z.size
            else:
                for zz in z:
                    law[zz - S : zz + S + 1] += 1.0 / ((2 * S + 1) * z.size)
        out[split] = law / len(tuples)
    return out


# evaluation split (:func:`anchor_splits`' names) -> the task split whose population it is drawn from
_TASK_SPLIT = {"mem": "mem", "rsn_train": "rsn_train", "test": "test_rsn"}


def label_marginal_losses(task: Anchors) -> dict[str, float]:
    """Cross-entropy (nats) of each split's labels under the *training set's* label marginal: the loss of
    a model that has learnt nothing but the marginal (the best input-blind predictor). Keys are the
    evaluation split names (``mem``, ``rsn_train``, ``test``)."""
    laws = split_label_laws(task)
    n_mem, n_rsn = len(task.mem_tuples), len(task.rsn_train_tuples)
    p = np.asarray(sum(w * laws[s] for s, w in (("mem", n_mem), ("rsn_train", n_rsn)) if s in laws) / (n_mem + n_rsn))
    out = {}
    for split, task_split in _TASK_SPLIT.items():
        if task_split not in laws:
            continue
        q = laws[task_split]
        on = q > 0
        with np.errstate(divide="ignore"):
            out[split] = float(-(q[on] * np.log(p[on])).sum())
    return out
