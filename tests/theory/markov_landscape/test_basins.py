"""Checks of tdlab.theory.markov_landscape.basins: Thm. 2 / Thm. 8's basins on named points, and the
separatrices on the saddle energy (Eq. 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK

F64 = torch.float64


def test_predict_basin_on_named_sets():
    s = ml.SADDLE_W
    pts = torch.tensor(
        [
            [0.0, -1.0],
            [0.0, s],
            [0.0, -0.3],
            [0.0, 0.0],
            [0.5, 0.0],
            [0.3, 0.5],
            [math.sqrt(0.09 - math.log(0.3) + ml.ENERGY_SADDLE), -0.3],
            [math.sqrt(4.0 - math.log(2.0) + ml.ENERGY_SADDLE), -2.0],
            [0.1, -0.3],
            [2.0, -0.3],
            [0.1, -2.0],
            [2.0, -2.0],
        ],
        dtype=F64,
    )
    big = [
        CK.LOCAL_MAX,
        CK.SADDLE,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.LOCAL_MIN,
        CK.SADDLE,
        CK.GLOBAL_MIN,
        CK.LOCAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
    ]
    small = [
        CK.LOCAL_MIN,
        CK.SADDLE,
        CK.LOCAL_MAX,
        CK.LOCAL_MAX,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.SADDLE,
        CK.GLOBAL_MIN,
        CK.GLOBAL_MIN,
        CK.LOCAL_MIN,
        CK.GLOBAL_MIN,
    ]
    # The separatrix points are built from g(w); exact float equality E == E_sad is not guaranteed,
    # so compare everything else exactly and those two within the construction.
    for (p, q), want in (((0.7, 0.8), big), ((0.2, 0.3), small)):
        got = ml.predict_basin(pts, p, q).tolist()
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if i in (6, 7) and b == CK.SADDLE:
                E = ml.energy(pts[i]).item()
                assert abs(E - ml.ENERGY_SADDLE) < 1e-14
            else:
                assert a == int(b), (p, q, i, a, b)
    b = ml.basin_boundaries(0.7, 0.8)["saddle"]
    E = ml.energy(torch.as_tensor(np.concatenate(b)))
    assert (E - ml.ENERGY_SADDLE).abs().max().item() < 1e-12


def test_max_energy_drift_is_relative_to_the_start_and_nan_on_the_e_axis():
    start = torch.tensor([[0.5, 1.0], [0.0, 2.0], [0.3, 0.0]], dtype=F64)  # E(0) = 0.25, −(4 + log 2), NaN
    E0 = ml.energy(start)
    moved = start.clone()
    moved[0, 0] = math.sqrt(0.25 + 0.5)  # E: 0.25 → 0.75, |ΔE| / max(1, 0.25) = 0.5
    moved[1, 0] = 1.0  # E rises by 1, relative to |E(0)| = 4 + log 2
    traj = torch.stack([start, start, moved])  # (K, n, 2)
    drift = ml.max_energy_drift(traj)
    assert drift.shape == (3,)
    assert abs(float(drift[0]) - 0.5) < 1e-12
    assert abs(float(drift[1]) - 1.0 / abs(float(E0[1]))) < 1e-12
    assert math.isnan(float(drift[2]))
    assert torch.all(ml.max_energy_drift(torch.stack([start[:2]] * 4)) == 0)  # a still trajectory conserves E


def _chain_entropies(p: float, q: float) -> tuple[float, float]:
    """(entropy rate, H(pi)) in nats, from first principles."""
    h = lambda x: -x * math.log(x) - (1 - x) * math.log(1 - x)  # noqa: E731
    pi1 = p / (p + q)
    return (1 - pi1) * h(p) + pi1 * h(q), h(pi1)


def test_gaussian_init_limit_is_the_likelier_minimum_with_thm1s_loss():
    """Small σ: Thm. 2 (p+q>1) sends GF to the w-axis local minima, loss H(π); Thm. 8 (p+q<1) to Θ_*, loss
    the entropy rate (Thm. 1); the probability is the larger of App. G's two; p + q = 1 is refused."""
    for (p, q), kind in (((0.5, 0.8), CK.LOCAL_MIN), ((0.2, 0.3), CK.GLOBAL_MIN)):
        got, loss, prob = ml.gaussian_init_limit(0.02, p, q)
        rate, h_pi = _chain_entropies(p, q)
        assert got == kind
        assert loss == pytest.approx(h_pi if kind == CK.LOCAL_MIN else rate, abs=1e-10)
        probs = ml.gaussian_basin_probability(0.02, p, q)
        assert prob == max(float(probs[CK.LOCAL_MIN]), float(probs[CK.GLOBAL_MIN])) and prob > 0.99
    with pytest.raises(ValueError, match="p \\+ q != 1"):
        ml.gaussian_init_limit(0.02, 0.3, 0.7)
