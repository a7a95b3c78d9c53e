"""Long computations that are not training, made resumable: a memo of their evaluations in a checkpoint.

A loss map on a grid, a Nelder-Mead polish of its minimiser, a Monte-Carlo reference: deterministic work
that can take an hour on a CPU and that :mod:`tdlab.train.stopping` could not stop, so a batch cut off
there lost all of it. :class:`CheckpointedMemo` keeps every evaluation it is handed, by key, in a
checkpoint (:mod:`tdlab.train.checkpoint`: safetensors + JSON, crash-safe, never unpickled), saves it on
the policy's wall-time interval, and on a stop request (SIGTERM, ``--until``) saves and raises
:class:`~tdlab.train.stopping.RunStopped`. A resumed run hands the same keys in the same order: the
evaluations done before come from the memo, so the computation continues where it stopped and ends with
the numbers of one never stopped (an optimiser such as Nelder-Mead replays its path from the memo's
values, which are the values it saw).

A memo written for another run config, or under another ``expected`` identity (the computation's
settings), is refused (:class:`~tdlab.safeio.CheckpointError`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdlab.train.checkpoint import load_checked, save_checkpoint
from tdlab.train.stopping import RunStopped, current

__all__ = ["CheckpointedMemo", "array_key"]


def array_key(*arrays: np.ndarray) -> str:
    """A key naming exact float inputs: the SHA-1 of their dtypes, shapes and bytes."""
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class CheckpointedMemo:
    """Evaluations by key (``str`` → ``np.ndarray``), kept in the checkpoint ``path``.

    Args:
        path: the checkpoint file (``DIR/NAME.json``); ``None``: an in-memory memo (never saved, never stops).
        config_hash: the run config's hash (a memo of an edited ``config.yaml`` is refused).
        expected: the computation's identity (its settings): a memo written under another is refused.
        label: names the computation in a stop's message.
    """

    def __init__(
        self, path: Path | None, config_hash: str | None = None, expected: dict[str, Any] | None = None, label: str = ""
    ) -> None:
        self.path, self.config_hash, self.expected, self.label = path, config_hash, dict(expected or {}), label
        self.values: dict[str, np.ndarray] = {}
        self.loaded = 0  # evaluations the checkpoint held when this memo was opened
        self._last_saved = time.monotonic()
        loaded = load_checked(path, config_hash, self.expected)
        if loaded is not None:
            self.values = {k: v.numpy() for k, v in loaded[1].items()}
            self.loaded = len(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __call__(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The value under ``key``: from the memo, else ``compute()``, kept; then a checkpoint when the policy
        says one is due, and :class:`RunStopped` after it when a stop was requested."""
        if key in self.values:
            return self.values[key]
        value = np.asarray(compute())
        self.values[key] = value
        policy = current()
        if self.path is not None and policy is not None and policy.due(self._last_saved):
            self.save()
            if policy.stop_requested():
                raise RunStopped(len(self.values), self.label)
        return value

    def save(self) -> None:
        """Write the memo to its checkpoint now (nothing without a path)."""
        if self.path is None:
            return
        meta = {"config_hash": self.config_hash, **self.expected, "evaluations": len(self.values)}
        save_checkpoint(self.path, meta, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in self.values.items()})
        self._last_saved = time.monotonic()
