"""The stage the seed-003 probes' in-context estimators define: the stage bound and its check per
member; the default share leaves every reach claim a failure region at the profiles' settings; the planted gap
that calibrates the reach tolerances is the source's own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.claims import Measurements
from tdlab.experiments.paper003_attention_markov.common.estimator_stage import (
    PAST_LOWER_ORDER,
    planted_reach,
    record_stage,
    stage_bound,
    stage_leaves_room,
)
from tdlab.tasks.markov_kth import InContextMarkov, estimator_gap
from tdlab.theory.kgram import estimator_losses


def test_stage_bound_and_check_per_member():
    lower, upper = np.array([0.60, 0.60, 0.60]), np.array([0.52, 0.52, 0.52])
    bound = stage_bound(lower, upper, 0.25)
    np.testing.assert_allclose(bound, [0.58] * 3)
    out = Measurements()
    record_stage(out, "a", [0.53, 0.579, 0.59], lower, upper, 0.25, 1)
    check = out.stages["a"][PAST_LOWER_ORDER.id]
    assert check.passed == [True, True, False] and "order-0 estimator" in check.evidence
    record_stage(out, "b", [0.5] * 3, lower, upper, 0.25, 1, source="a")
    assert "a's probe loss" in out.stages["b"][PAST_LOWER_ORDER.id].evidence


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_the_default_share_leaves_the_reach_claims_room_to_fail(k, one_thread):
    # T = 64 (the grids' quick length, the shortest of the profiles): the order-(k−1)/order-k gap is
    # 0.034–0.057 nats, so a member at the stage boundary is ≥ 0.026 nats above the estimator (> 0.02)
    x = InContextMarkov(k, 2, 1.0).sample([torch.Generator().manual_seed(k)], 400, 65)
    est = estimator_losses(x, k, 2, 1.0)
    lower, upper = est[k - 1].mean(-1).numpy(), est[k].mean(-1).numpy()
    assert stage_leaves_room(lower, upper, 0.25, 0.02)
    assert not stage_leaves_room(lower, upper, 0.75, 0.02)  # a late stage would swallow the failure region


def test_the_planted_gap_is_the_sources_own(one_thread):
    # the reach claims' calibration: the order-(k−1)/order-k gap of the source at the run's length
    # (tdlab.tasks.markov_kth.estimator_gap, tested in tests/tasks/test_markov_kth.py)
    gap = estimator_gap(1, 0, 65, 1.0)
    at, short = planted_reach(1, 0, 65, 1.0, 0.02, 5)
    assert at.mean == pytest.approx(0.0) and short.mean == pytest.approx(gap) and at.n == short.n == 5
    assert max(at.values) - min(at.values) == pytest.approx(2 * 0.02 / 5)
    assert planted_reach(1, 0, 65, 1.0, 0.02, 5, reach=False) == (short, at)
