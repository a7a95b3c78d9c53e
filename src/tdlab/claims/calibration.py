"""Planted cases that calibrate a threshold of ours (:class:`~tdlab.claims.declare.Calibration`).

A threshold we chose may make a paper claim fail only once it is shown to separate, at the run's own
shapes (its members, its evaluation size), a case that satisfies the paper's statement from one that does
not. A claim's ``Calibration.plant(cfg, context)`` returns those two samples, built here from the values
the theory of the setting gives each case; ``tests/experiments/test_declared_claims.py`` judges every
declared plant (the satisfying one must hold, the other fail) at the quick and paper configs.
"""

from __future__ import annotations

import numpy as np

from tdlab.claims.declare import Sample

__all__ = ["planted_pair"]


def planted_pair(satisfies: float, violates: float, spread: float, members: int) -> tuple[Sample, Sample]:
    """Two planted samples of ``members`` values each, evenly spread over ``± spread`` around ``satisfies``
    (a case the paper's statement covers) and around ``violates`` (one it excludes). Deterministic."""
    if members < 1 or spread < 0:
        raise ValueError("planted cases need at least one member and a spread ≥ 0")
    offsets = np.linspace(-spread, spread, members) if members > 1 else np.zeros(1)
    return Sample(satisfies + offsets), Sample(violates + offsets)
