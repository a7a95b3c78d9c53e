"""The two-stage lag readings of topics-two-stage (Fig. 4) that topics-real-two-stage makes on real text (Fig. 5):
the stage (W^K, W^Q grew), the rule's thresholds and claim, and the claim's sample of the lags
(:func:`tdlab.probes.curves.lags`: t½ and the lag of every member from its norm curves)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from tdlab.claims import ClaimSpec, Sample, Stage
from tdlab.config import Config
from tdlab.probes.curves import Lags

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


def lag_sample(lg: Lags, steps: np.ndarray, members: Any = slice(None)) -> Sample:
    """The two-stage claim's sample of ``members`` (an index into the ``E`` axis): their lags, censored where
    neither W^K nor W^Q grows, each known to one logging interval of the horizon (``steps``: the curves' ``(S,)``)."""
    res = float(np.min(np.diff(steps))) / float(steps[-1] - steps[0])
    return Sample(lg.lag[members], censored=lg.censored[members], resolution=res)
