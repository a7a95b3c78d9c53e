"""The plateau-escape reading and its stage (markov-init's, read by markov-rank, markov-bridge and
markov-icommon): when a member left the H(π) plateau, on the gap to the unigram predictor on the same
evaluation batches."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tdlab.claims import Stage
from tdlab.probes.curves import Crossings, evaluation_noise, gap_crossing
from tdlab.run_view import ArmKey, RunView
from tdlab.tasks.markov import entropy_rate, marginal_entropy


class _ChainPQ(Protocol):
    @property
    def p(self) -> float: ...

    @property
    def q(self) -> float: ...


class _EscapeClaims(Protocol):
    @property
    def escape_fraction(self) -> float: ...


class _StageClaims(_EscapeClaims, Protocol):
    @property
    def tol_nats(self) -> float: ...


class EscapeConfig(Protocol):
    """What :func:`plateau_escape` reads of a config (markov-init's, markov-rank's)."""

    @property
    def task(self) -> _ChainPQ: ...

    @property
    def claims(self) -> _EscapeClaims: ...


class StageConfig(Protocol):
    """What :func:`small_init_stage` reads of a config (markov-init's, markov-rank's)."""

    @property
    def task(self) -> _ChainPQ: ...

    @property
    def claims(self) -> _StageClaims: ...


def plateau_escape(cfg: EscapeConfig, run: RunView, arm: str | ArmKey) -> tuple[Crossings, np.ndarray, float]:
    """When each member of ``arm`` left the H(π) plateau, read on the gap to the unigram predictor on the
    same evaluation batches (any config with ``task.p``, ``task.q`` and ``claims.escape_fraction``:
    markov-rank reads it too).

    A fixed level below H(π) reads evaluation noise as an escape where escape_fraction · (H(π) − entropy
    rate) is near the noise (at (p, q) = (0.35, 0.85) it is 0.0054 nats, one evaluation's noise 0.002-0.003);
    the gap on the same batches cancels the batches' noise and the margin clears what is left.
    Returns the crossings, each member's final gap ``(E,)`` (nats) and the margin.
    """
    h_rate, h_pi = entropy_rate(cfg.task.p, cfg.task.q), marginal_entropy(cfg.task.p, cfg.task.q)
    steps, loss = run.curves(arm, "test_loss")
    _, unigram = run.curves(arm, "test_loss@unigram")
    drop = cfg.claims.escape_fraction * (h_pi - h_rate)
    esc, margin = gap_crossing(steps, loss, unigram, drop, evaluation_noise(unigram, h_pi))
    return esc, loss[:, -1] - unigram[:, -1], margin


LEFT_PLATEAU = Stage(
    "left-plateau",
    "the member's final test loss is below the unigram predictor's on the same batches by more than "
    "escape_fraction · (H(π) − entropy rate) and 3 standard deviations of one evaluation: it has left the unigram stage",
)


def distinct_minima(cfg: StageConfig) -> bool:
    """Whether the H(π) plateau lies above the entropy rate by more than the tolerance (near p + q = 1
    the chain is almost i.i.d. and there is no plateau to leave)."""
    return marginal_entropy(cfg.task.p, cfg.task.q) - entropy_rate(cfg.task.p, cfg.task.q) > cfg.claims.tol_nats


def small_init_stage(cfg: StageConfig) -> Stage | None:
    """The stage a small standard init's end-state claim needs (any config with ``task.p``, ``task.q``,
    ``claims.tol_nats`` and ``claims.escape_fraction``: markov-rank's Fig. 3 reads it too)."""
    # Thm. 8 (p + q < 1) predicts reaching the global minimum, which needs the plateau left first;
    # Thm. 2 (p + q > 1) predicts staying on it, which needs no stage.
    return LEFT_PLATEAU if cfg.task.p + cfg.task.q < 1 and distinct_minima(cfg) else None
