"""Data regimes: where a trainer's batches come from.

* :class:`Stream` — fresh samples of a task every step (seeds 000, 003; seed 004's population view).
* :class:`FixedDataset` — one fixed tensor set per member, built once from the member's seed, iterated
  in shuffled epochs, with named evaluation splits (seed 001's 200,000 sequences; seed 004's 10,000
  documents in the authors' setting).

Both hand the trainer *raw samples*; the objective (:mod:`tdlab.train.objectives`) turns them into
batches. A regime is bound to one chunk of member seeds at a time (:meth:`bind`); every draw derives
from the members' own seeds, so a member's data do not depend on which members train beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch

from tdlab.seeding import derive_seed, generators
from tdlab.train.objectives import Objective

__all__ = ["DATASET", "EPOCHS", "BoundData", "FixedDataset", "Stream", "steps_for"]

DATASET = "dataset"  # purpose of the stream a member's fixed data set is drawn from
EPOCHS = "epochs"  # purpose of the per-epoch shuffles


class Task(Protocol):
    vocab: int

    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> Any: ...


class BoundData(Protocol):
    """A regime bound to one chunk of members (what the trainer's loop talks to)."""

    def train_sample(self, step: int, gens: Sequence[torch.Generator]) -> Any:
        """The raw sample of training step ``step`` (1-based)."""

    def eval_samples(self, gens: Sequence[torch.Generator]) -> Iterator[tuple[str, Any]]:
        """``(split, raw sample)`` pairs of one evaluation; a split's metrics average over its samples."""

    @property
    def task(self) -> Any:
        """The task behind the data (its reference predictors score the same batches), or ``None``."""


class Stream:
    """Fresh samples every step: ``task.sample(gens, batch, seq_len + objective.extra_length)``.

    Evaluation draws ``eval_batches`` fresh batches from the members' evaluation streams, split ``test``.
    """

    def __init__(
        self,
        task: Task,
        batch: int,
        seq_len: int,
        eval_batches: int,
        extra_length: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        self._task, self.batch, self.length, self.eval_batches, self.device = (
            task,
            batch,
            seq_len + extra_length,
            eval_batches,
            device,
        )

    def bind(self, seeds: Sequence[int], device: str | torch.device) -> Stream:
        self.device = device
        return self

    @property
    def task(self) -> Task:
        return self._task

    def train_sample(self, step: int, gens: Sequence[torch.Generator]) -> Any:
        return self._task.sample(gens, self.batch, self.length, self.device)

    def eval_samples(self, gens: Sequence[torch.Generator]) -> Iterator[tuple[str, Any]]:
        for _ in range(self.eval_batches):
            yield "test", self._task.sample(gens, self.batch, self.length, self.device)


Maker = Callable[[torch.Generator, str | torch.device], Mapping[str, Mapping[str, torch.Tensor]]]


class FixedDataset:
    """A fixed data set per member, iterated in shuffled epochs.

    Args:
        make: ``make(generator, device) -> {split: {name: tensor (n_split, ...)}}``, one member's splits,
            drawn from the generator alone (tables a split shares with another, such as seed 001's
            memory labels, are drawn once inside ``make``). The split named ``train`` is trained on.
        batch: sequences per step and member. An epoch is ``n_train // batch`` steps (the remainder of a
            shuffle is dropped, so every step has the same shape).
        eval_splits: splits evaluated at each evaluation, in full, or their first ``eval_limit`` items.
            Metrics are named ``{split}_{metric}``; the health gate reads ``test_loss``, so the held-out
            split is best named ``test``.
        prepare_once: corrupt the data once when it is built (masks drawn once, as the seed-004 authors'
            code does) instead of every time a batch is drawn; needs ``objective``.
        data_seeds: draw member ``i``'s data set from ``data_seeds[i]`` instead of its own seed (members
            that should share one data set, e.g. arms that differ only in initialisation).
    """

    def __init__(
        self,
        make: Maker,
        batch: int,
        eval_splits: Sequence[str] = ("test",),
        eval_limit: int | None = None,
        eval_batch: int | None = None,
        prepare_once: bool = False,
        objective: Objective | None = None,
        data_seeds: Mapping[int, int] | None = None,
    ) -> None:
        if prepare_once and objective is None:
            raise ValueError("prepare_once needs the objective that prepares the data")
        self.make, self.batch, self.eval_splits, self.eval_limit = make, batch, tuple(eval_splits), eval_limit
        self.eval_batch = eval_batch or batch
        self.prepare_once, self.objective, self.data_seeds = prepare_once, objective, dict(data_seeds or {})
        self.seeds: list[int] = []
        self.splits: dict[str, dict[str, torch.Tensor]] = {}
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its shuffle) of the bound members

    @property
    def task(self) -> None:
        return None

    def bind(self, seeds: Sequence[int], device: str | torch.device) -> FixedDataset:
        """Build the chunk's data sets, ``{split: {name: (E, n, ...)}}``, on ``device`` (one tensor each).

        They are drawn on the CPU, with a CPU generator, and moved: a data set is made once, so this
        costs little, and the same seed gives the same data on every device."""
        self.seeds, self.device, self._order = list(seeds), device, None
        per_member = []
        for s in self.seeds:
            g = generators([self.data_seeds.get(s, s)], DATASET, "cpu")[0]
            splits = {k: dict(v) for k, v in self.make(g, "cpu").items()}
            if self.prepare_once and self.objective is not None:  # __init__: prepare_once needs the objective
                splits = {
                    k: self.objective.prepare({n: t.unsqueeze(0) for n, t in v.items()}, [g]).as_dict()
                    for k, v in splits.items()
                }
                splits = {k: {n: t[0] for n, t in v.items()} for k, v in splits.items()}
            per_member.append(splits)
        if "train" not in per_member[0]:
            raise ValueError(f"a fixed data set needs a 'train' split; make() returned {sorted(per_member[0])}")
        missing = [s for s in self.eval_splits if s not in per_member[0]]
        if missing:
            raise ValueError(f"eval_splits {missing} not among the data set's splits {sorted(per_member[0])}")
        self.splits = {
            k: {n: torch.stack([m[k][n] for m in per_member]).to(device) for n in per_member[0][k]}
            for k in per_member[0]
        }
        n = self.n_train
        if n < self.batch:
            raise ValueError(f"train split has {n} items, fewer than one batch of {self.batch}")
        return self

    @property
    def n_train(self) -> int:
        return next(iter(self.splits["train"].values())).shape[1]

    @property
    def steps_per_epoch(self) -> int:
        return self.n_train // self.batch

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """``(E, n_train)``: each member's shuffle of epoch ``epoch`` (0-based), derived from its seed and the
        epoch alone, so a resumed fit continues an epoch exactly where it stopped."""
        perms = []
        for s in self.seeds:
            g = torch.Generator(device="cpu").manual_seed(derive_seed(s, EPOCHS, epoch))
            perms.append(torch.randperm(self.n_train, generator=g))
        return torch.stack(perms).to(self.device)

    def train_sample(self, step: int, gens: Sequence[torch.Generator]) -> dict[str, torch.Tensor]:
        spe = self.steps_per_epoch
        epoch, k = divmod(step - 1, spe)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, self.epoch_order(epoch))
        idx = self._order[1][:, k * self.batch : (k + 1) * self.batch]  # (E, B)
        return _take(self.splits["train"], idx)

    def eval_samples(self, gens: Sequence[torch.Generator]) -> Iterator[tuple[str, Any]]:
        E = len(self.seeds)
        for split in self.eval_splits:
            data = self.splits[split]
            n = next(iter(data.values())).shape[1]
            n = min(n, self.eval_limit) if self.eval_limit else n
            for start in range(0, n, self.eval_batch):
                idx = torch.arange(start, min(n, start + self.eval_batch), device=self.device).expand(E, -1)
                yield split, _take(data, idx)


def _take(data: Mapping[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Items ``idx (E, B)`` of every ``(E, n, ...)`` tensor: ``{name: (E, B, ...)}``."""
    rows = torch.arange(idx.shape[0], device=idx.device).unsqueeze(1)
    return {k: v[rows, idx] for k, v in data.items()}


def steps_for(epochs: int, n_train: int, batch: int) -> int:
    """Training steps of ``epochs`` epochs over ``n_train`` items in batches of ``batch`` (remainder dropped)."""
    return epochs * max(1, n_train // batch)
