"""A finished run as an experiment reads it: the metrics table read once and indexed by arm and
name, curves and final values per member, the learning-rate schedule, end drift, saved arrays.

``measure()`` and ``plot()`` take a :class:`RunView`; every read of the same run shares one parse
of ``metrics.parquet``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tdlab.claims.health import end_drift
from tdlab.runs import Run, RunDirError

__all__ = ["ArmKey", "RunView"]


class ArmKey:
    """A typed arm: a frozen dataclass whose ``name`` is the arm's stored name.

    Subclass it with fields and a ``name`` property, e.g. ``InitArm(arch="sec2", init="standard")``
    named ``"sec2/standard"``; :class:`RunView` takes a key or a plain name wherever it takes an arm.
    """

    @property
    def name(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


def _name(arm: str | ArmKey) -> str:
    return arm.name if isinstance(arm, ArmKey) else str(arm)


@dataclass(frozen=True)
class _Series:
    steps: np.ndarray  # (S,)
    values: np.ndarray  # (E, S), NaN where a member has no value at a step


class RunView:
    """Read-only view of a run directory for measurement and plotting."""

    def __init__(self, run: Run | Path | str) -> None:
        self.run = run if isinstance(run, Run) else Run(Path(run))
        self._arrays: dict[str, dict[str, torch.Tensor]] = {}
        self._cache: dict[tuple[str, str], _Series] = {}
        self._metrics: pd.DataFrame | None = None
        self._arm_members: dict[str, np.ndarray] = {}

    # ---- the run ------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def config(self) -> dict[str, Any]:
        return self.run.config

    @property
    def summary(self) -> dict[str, Any]:
        return self.run.summary

    def metrics(self) -> pd.DataFrame:
        """The long-format table (``arm, step, member, name, value``), read once."""
        if self._metrics is None:
            self._metrics = self.run.metrics()
        return self._metrics

    @cached_property
    def _rows(self) -> dict[tuple[str, str], np.ndarray]:
        """Row positions of every ``(arm, name)`` in the table, in the order first written."""
        df = self.metrics()
        if df.empty:
            return {}
        return {(str(a), str(n)): idx for (a, n), idx in df.groupby(["arm", "name"], sort=False).indices.items()}

    def _members(self, arm: str) -> np.ndarray:
        if arm not in self._arm_members:
            df = self.metrics()
            self._arm_members[arm] = np.unique(df["member"].to_numpy()[df["arm"].to_numpy() == arm])
        return self._arm_members[arm]

    def _series(self, key: tuple[str, str]) -> _Series | None:
        if key not in self._cache:
            idx = self._rows.get(key)
            if idx is None:
                return None
            df = self.metrics()
            step = df["step"].to_numpy()[idx]
            member = df["member"].to_numpy()[idx]
            value = df["value"].to_numpy(dtype=float)[idx]
            steps, s_at = np.unique(step, return_inverse=True)
            members = self._members(key[0])  # every member of the arm, so rows line up across metrics
            m_at = np.searchsorted(members, member)
            table = np.full((members.size, steps.size), np.nan)
            table[m_at, s_at] = value  # a later row for the same (member, step) wins
            self._cache[key] = _Series(steps, table)
        return self._cache[key]

    # ---- reading ------------------------------------------------------------------------------
    def arms(self) -> list[str]:
        """Arms with stored metrics, in the order they were written."""
        return list(dict.fromkeys(a for a, _ in self._rows))

    def names(self, arm: str | ArmKey) -> list[str]:
        a = _name(arm)
        return [n for (x, n) in self._rows if x == a]

    def has(self, arm: str | ArmKey, name: str) -> bool:
        return (_name(arm), name) in self._rows

    def curves(self, arm: str | ArmKey, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps (S,), values (E, S))`` of metric ``name`` in ``arm``."""
        key = (_name(arm), name)
        s = self._series(key)
        if s is None:
            raise RunDirError(f"{self.path / 'metrics.parquet'}: no metric {name!r} for arm {key[0]!r}")
        return s.steps, s.values

    def final(self, arm: str | ArmKey, name: str) -> np.ndarray:
        """``(E,)``: each member's last recorded value of ``name``."""
        return self._edge(arm, name, last=True)

    def initial(self, arm: str | ArmKey, name: str) -> np.ndarray:
        """``(E,)``: each member's first recorded value of ``name``."""
        return self._edge(arm, name, last=False)

    def _edge(self, arm: str | ArmKey, name: str, last: bool) -> np.ndarray:
        _, v = self.curves(arm, name)
        out = np.full(v.shape[0], np.nan)
        for e, row in enumerate(v):
            ok = np.nonzero(~np.isnan(row))[0]
            if ok.size:
                out[e] = row[ok[-1] if last else ok[0]]
        return out

    def lr(self, arm: str | ArmKey) -> tuple[np.ndarray, np.ndarray] | None:
        """``(steps, rate)`` of the arm's learning-rate schedule as logged (member 0), or ``None``."""
        if not self.has(arm, "lr"):
            return None
        steps, v = self.curves(arm, "lr")
        return steps, v[0]

    def drift(self, arm: str | ArmKey, name: str, minus: str | None = None, fraction: float = 0.1) -> float:
        """:func:`~tdlab.claims.end_drift` of ``name`` (or of ``name − minus``, e.g. a loss minus its
        reference predictor's on the same batches) over the last ``fraction`` of the arm's
        learning-rate integral."""
        steps, v = self.curves(arm, name)
        if minus is not None:
            s2, ref = self.curves(arm, minus)
            if not np.array_equal(s2, steps):
                raise RunDirError(f"{self.path}: {name!r} and {minus!r} of {_name(arm)!r} are not on the same steps")
            v = v - ref
        return self.curve_drift(arm, steps, v, fraction)

    def curve_drift(self, arm: str | ArmKey, steps: np.ndarray, values: np.ndarray, fraction: float = 0.1) -> float:
        """:func:`~tdlab.claims.end_drift` of a curve ``values (E, S)`` derived from ``arm``'s metrics on its
        evaluation ``steps (S,)`` (a ratio of two of them, a difference between arms), in ``arm``'s
        learning-rate time."""
        sched = self.lr(arm)
        return end_drift(steps, values, fraction, lr_steps=sched[0] if sched else None, lr=sched[1] if sched else None)

    def arrays(self, arm: str | ArmKey) -> dict[str, torch.Tensor]:
        """Saved parameters of ``arm``, each with a leading member axis (read once)."""
        a = _name(arm)
        if a not in self._arrays:
            self._arrays[a] = self.run.arrays(a)
        return self._arrays[a]
