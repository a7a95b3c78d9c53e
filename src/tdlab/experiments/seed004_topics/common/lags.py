"""The two-stage lag readings of topics-two-stage (Fig. 4) that topics-real-two-stage makes on real text (Fig. 5):
the stage (W^K, W^Q grew), the rule's thresholds and claim, and t½ and the lag of every member from its norm
curves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from tdlab.claims import ClaimSpec, Sample, Stage
from tdlab.config import Config
from tdlab.probes.curves import half_growth_steps

KQ_GREW = Stage(
    "kq-grew",
    "‖W^K‖ and ‖W^Q‖ at least double their initial norm within the horizon "
    "(claims.kq_growth_min; in every layer): stage 2 began, so there is a lag to measure",
)


class LagClaims(Config):
    """The two-stage rule's thresholds (ours, fixed before any run; shared by Figs. 4 and 5)."""

    half: float = Field(0.5, gt=0.0, lt=1.0)  # t½: the first step where g_X reaches this
    lag_share: float = Field(
        0.1, ge=0.0, lt=1.0
    )  # the earlier of W^K, W^Q at least this share of the horizon after W^V
    kq_growth_min: float = Field(2.0, gt=1.0)  # the stage: ‖W^K‖, ‖W^Q‖ at the horizon / at the start ≥ this


def value_first_claim(statement: str, **declared: Any) -> ClaimSpec:
    """The two-stage claim: W^V makes half its growth a tenth of the horizon before W^K and W^Q (Fig. 4, Fig. 5).
    ``declared``: what the paper says (``quote``, ``where``, ``form``, ``grid``, ``threshold``, ...), the caller's."""
    return ClaimSpec(
        "value-grows-first",
        statement,
        test="value",
        relation="ge",
        quantity="lag = (min(t½(W^K), t½(W^Q)) − t½(W^V)) / horizon, mean over the members: t½(X) = first step where "
        "‖X‖ has made half its growth over the horizon (known to one logging interval; censored when neither W^K "
        "nor W^Q grows)",
        expected="claims.lag_share",
        tolerance=0.0,
        horizon="budget",
        stage=KQ_GREW,
        **declared,
    )


@dataclass(frozen=True)
class Lags:
    """The two-stage rule's measurements of ``E`` members, each field ``(E,)``."""

    t_k: np.ndarray  # t½(W^K), steps (inf: never grows)
    t_q: np.ndarray
    t_v: np.ndarray
    lag: np.ndarray  # (min(t½K, t½Q) − t½V) / horizon
    censored: np.ndarray  # bool: neither W^K nor W^Q grows, the lag is a lower bound
    growth: np.ndarray  # min(‖W^K‖, ‖W^Q‖ at the horizon / at the start)
    first_step: np.ndarray  # first-step norm change of W^K (the smaller of K, Q) relative to W^V's

    def member(self, e: int) -> dict[str, float | bool]:
        return {k: (bool(v[e]) if v.dtype == bool else float(v[e])) for k, v in self.__dict__.items()}


def lags(steps: np.ndarray, norm_k: np.ndarray, norm_q: np.ndarray, norm_v: np.ndarray, half: float = 0.5) -> Lags:
    """The two-stage rule's measurements of every member from its norm curves over the horizon.

    Args:
        steps: ``(S,)`` the steps of the curves (the first is the start, increasing; the last is the horizon).
        norm_k: ``(E, S)`` Frobenius norms of ``W^K``.
        norm_q: ``(E, S)`` the same of ``W^Q``.
        norm_v: ``(E, S)`` the same of ``W^V``.
        half: the growth share that defines t½.
    Returns:
        :class:`Lags`. A member whose W^K and W^Q never grow has its lag censored at ``(horizon − t½V)/span``
        (a lower bound); one whose W^V never grows gets ``(min(t½K, t½Q) − span)/span`` (an upper bound ≤ 0).
    """
    steps = np.asarray(steps, dtype=float)
    K, Q, V = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (norm_k, norm_q, norm_v))
    if not (K.shape == Q.shape == V.shape) or K.shape[-1] != steps.size or steps.size < 2:
        raise ValueError(
            f"norm curves must share one (E, S) shape with S = len(steps) = {steps.size} ≥ 2; "
            f"got {K.shape}, {Q.shape}, {V.shape}"
        )
    t_k, t_q, t_v = (half_growth_steps(steps, x, half) for x in (K, Q, V))
    start, end = steps[0], steps[-1]
    span = end - start
    kq = np.minimum(t_k, t_q)
    censored = ~np.isfinite(kq) & np.isfinite(t_v)
    lag = (np.where(np.isfinite(kq), kq, end) - np.where(np.isfinite(t_v), t_v, end)) / span
    with np.errstate(invalid="ignore", divide="ignore"):
        growth = np.minimum(K[:, -1] / K[:, 0], Q[:, -1] / Q[:, 0])
        first = np.minimum(np.abs(K[:, 1] - K[:, 0]), np.abs(Q[:, 1] - Q[:, 0])) / np.abs(V[:, 1] - V[:, 0])
    return Lags(t_k=t_k, t_q=t_q, t_v=t_v, lag=lag, censored=censored, growth=growth, first_step=first)


def lag_sample(lg: Lags, steps: np.ndarray, members: Any = slice(None)) -> Sample:
    """The two-stage claim's sample of ``members`` (an index into the ``E`` axis): their lags, censored where
    neither W^K nor W^Q grows, each known to one logging interval of the horizon (``steps``: the curves' ``(S,)``)."""
    res = float(np.min(np.diff(steps))) / float(steps[-1] - steps[0])
    return Sample(lg.lag[members], censored=lg.censored[members], resolution=res)
