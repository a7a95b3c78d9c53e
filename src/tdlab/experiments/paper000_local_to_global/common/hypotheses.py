"""The hypotheses seed 000's statements need, as predicates the judge checks (shared by its experiments).

Thms. 1, 2 and 8 (Sec. 3.1, Sec. 4, App. G) are stated for every (p, q) ∈ (0, 1)² with p + q ≠ 1 and, for the
flow, every initialisation; Thm. 2 for p + q > 1, Thm. 8 for p + q < 1. Their consequences for the standard
Gaussian init ``θ₀ ~ N(0, σ² I)`` assume ``σ² ≪ 1/√2``. A row whose chain (``row.context["p"]``,
``row.context["q"]``) or σ (``row.context["sigma"]``) lies outside is ours; a row without those keys (an
older record) meets none of them.
"""

from __future__ import annotations

import math
from typing import Any

from tdlab.claims.declare import Hypothesis

# "σ² ≪ 1/√2" (Thm. 2, Thm. 8, Thm. 11) needs a cut to be checked: we read "≪" as at least an order of
# magnitude below, σ² ≤ 0.1/√2 (σ ≤ 0.266). The seed's own runs use σ = 0.02 (App. A.3.2) and 0.001 (A.3.1).
SMALL_SIGMA2 = 0.1 / math.sqrt(2)


def switching(row: Any) -> float | None:
    """The row's switching factor p + q (Sec. 2), or None when its context does not name p and q."""
    ctx = row.context
    if "p" not in ctx or "q" not in ctx:
        return None
    return float(ctx["p"]) + float(ctx["q"])


def _above(cfg: Any, row: Any) -> bool:
    s = switching(row)
    return s is not None and s > 1


def _below(cfg: Any, row: Any) -> bool:
    s = switching(row)
    return s is not None and s < 1


def _off_line(cfg: Any, row: Any) -> bool:
    s = switching(row)
    return s is not None and abs(s - 1.0) > 1e-12


def _small_sigma(cfg: Any, row: Any) -> bool:
    sigma = row.context.get("sigma")
    return sigma is not None and float(sigma) ** 2 <= SMALL_SIGMA2


ABOVE_LINE_ROW = Hypothesis("p + q > 1 (Thm. 2), the row's chain", _above, on="row")
BELOW_LINE_ROW = Hypothesis("p + q < 1 (Thm. 8), the row's chain", _below, on="row")
OFF_LINE_ROW = Hypothesis("p + q ≠ 1 (Thms. 1, 2, 8), the row's chain", _off_line, on="row")
SMALL_SIGMA_ROW = Hypothesis(
    "σ² ≪ 1/√2 (Thms. 2, 8; read as σ² ≤ 0.1/√2), the row's σ of the Gaussian init", _small_sigma, on="row"
)
# The same for a config whose every row has one σ, ``model.init_std`` (markov-bridge's, markov-rank's).
SMALL_INIT_STD = Hypothesis(
    "σ² ≪ 1/√2 (Thms. 2, 8; read as σ² ≤ 0.1/√2), σ = model.init_std",
    lambda cfg: cfg.model.init_std**2 <= SMALL_SIGMA2,
)
