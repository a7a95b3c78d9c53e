"""Events on training curves: first crossings, and crossings of a gap to a reference beyond the noise; T50 and
AUC of accuracy curves; the relative growth of norm curves and its half-growth step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tdlab.probes.curves import (
    NOISE_SIGMAS,
    auc,
    evaluation_noise,
    first_crossing,
    gap_crossing,
    half_growth_steps,
    halving_epoch,
    lags,
    log_ratio_resolution,
    loss_auc,
    min_depths,
    relative_growth,
    rotation_means,
    stage_split,
    t50,
    table1_measures,
)


def test_first_crossing_is_censored_where_a_member_never_crosses():
    steps = np.array([0, 100, 200, 300])
    v = np.array([[1.0, 0.9, 0.4, 0.3], [1.0, 1.0, 0.9, 0.8]])
    c = first_crossing(steps, v, 0.5)
    assert c.steps.tolist() == [200, 300] and c.censored.tolist() == [False, True] and c.resolution == 100
    assert c.as_optional() == [200, None]


def test_evaluation_noise_is_the_rms_around_the_population_loss():
    ref = np.array([[0.6, 0.62, np.nan], [0.58, 0.6, 0.6]])
    assert evaluation_noise(ref, 0.6) == pytest.approx(np.sqrt((0.02**2 + 0.02**2) / 5))
    assert evaluation_noise(np.full((2, 3), np.nan), 0.6) == 0.0


def test_a_dip_that_the_reference_shares_on_the_same_batches_is_not_a_crossing():
    """Planted: the model sits on the unigram plateau (H(π) = 0.6) and an unlucky batch scores both it and the
    unigram predictor 0.594: a fixed level H(π) − 0.0054 reads an escape there, the gap on the same batches
    (0.5970 vs 0.5968: +0.0002) does not. A real escape (gap −0.05) is found at its step."""
    steps = np.array([0, 500, 1000, 1500, 2000, 2500])
    unigram = np.array([[0.6, 0.601, 0.599, 0.594, 0.6, 0.6]] * 2)
    loss = unigram.copy()
    loss[0, 3] = 0.5942  # on the plateau, +0.0002 above the unigram loss on that batch
    loss[1, 4:] = unigram[1, 4:] - 0.05  # left the plateau at 2000
    drop = 0.0054
    assert first_crossing(steps, loss, 0.6 - drop).steps[0] == 1500  # the fixed level: a false escape
    esc, margin = gap_crossing(steps, loss, unigram, drop, evaluation_noise(unigram, 0.6))
    assert esc.censored.tolist() == [True, False] and esc.steps[1] == 2000
    assert margin == pytest.approx(max(drop, NOISE_SIGMAS * evaluation_noise(unigram, 0.6)))


def test_the_margin_is_the_larger_of_the_drop_and_the_noise():
    """At the boundary: a gap just beyond the margin crosses, one just within does not, whichever sets it."""
    steps = np.array([0, 1, 2])
    ref = np.zeros((1, 3))
    for drop, noise in ((0.01, 0.001), (0.001, 0.01)):
        margin = max(drop, NOISE_SIGMAS * noise)
        inside = gap_crossing(steps, ref - 0.999 * margin, ref, drop, noise)[0]
        beyond = gap_crossing(steps, ref - 1.001 * margin, ref, drop, noise)[0]
        assert inside.censored.all() and not beyond.censored.any()


def test_relative_growth_and_stage_split_closed_forms():
    n = np.array([[1.0, 2.0, 5.0, 3.0], [2.0, 2.0, 2.0, 2.0], [4.0, 3.0, 6.0, 8.0]])
    g = relative_growth(n)
    np.testing.assert_allclose(g[0], [0.0, 0.25, 1.0, 0.5])
    np.testing.assert_allclose(g[1], 0.0)  # never rises: g = 0, not NaN
    np.testing.assert_allclose(g[2], [0.0, -0.25, 0.5, 1.0])
    assert stage_split(g, 0.8).tolist() == [2, -1, 3]
    assert stage_split(g, 0.25).tolist() == [1, -1, 2]
    steps = np.arange(0, 11) * 100
    ramp_v = 0.05 + (30.0 - 0.05) * np.clip(steps / 300, 0.0, 1.0)  # rises over steps 0-300
    ramp_k = 0.05 + (20.0 - 0.05) * np.clip((steps - 350) / 650, 0.0, 1.0)  # rises over steps 350-1000
    t = half_growth_steps(steps, np.stack([ramp_v, ramp_k, np.full(steps.size, 0.3)]))
    assert t[0] == 200 and t[1] == 700 and math.isinf(t[2])  # g_V(200) = 2/3 ≥ 0.5 > g_V(100); flat: never


def test_t50_is_the_first_epoch_above_the_threshold_censored_at_the_last_evaluation():
    epochs = np.array([0, 1, 2, 3, 4])
    acc = np.array(
        [
            [0.0, 0.2, 0.51, 0.9, 0.4],  # above 0.5 first at epoch 2
            [0.0, 0.1, 0.2, 0.3, 0.5],  # never strictly above: censored at the last evaluation
            [0.6, 0.7, 0.8, 0.9, 1.0],
        ]
    )  # already at init: epoch 0 does not count
    c = t50(epochs, acc)
    assert c.steps.tolist() == [2.0, 4.0, 1.0] and c.censored.tolist() == [False, True, False]
    assert c.resolution == 1.0
    assert t50(epochs, acc, 0.85).steps.tolist() == [3.0, 4.0, 3.0]


def test_auc_is_the_mean_accuracy_after_epoch_zero():
    epochs = np.array([0, 1, 2, 3])
    acc = np.array([[0.9, 0.0, 0.5, 1.0], [0.0, 0.3, 0.3, 0.3]])
    assert auc(epochs, acc) == pytest.approx([0.5, 0.3])
    with pytest.raises(ValueError, match="no evaluation"):
        auc(np.array([0]), np.array([[0.1]]))


def test_rotation_means_split_at_stage1_end():
    steps = np.arange(10, 401)
    rot = np.where(steps <= 100, 0.2, 0.05)[None].repeat(2, 0)
    s1, s2 = rotation_means(steps, rot, 100, 400)
    np.testing.assert_allclose(s1, 0.2)
    np.testing.assert_allclose(s2, 0.05)


LAG_STEPS = np.arange(0, 11) * 100  # 0, 100, ..., 1000


def _ramp(end, t0, t1, lo=0.05):
    """A norm that sits at ``lo`` until step ``t0``, rises linearly to ``end`` at ``t1``, then stays."""
    return lo + (end - lo) * np.clip((LAG_STEPS - t0) / (t1 - t0), 0.0, 1.0)


def test_lags_on_hand_made_curves():
    # seed 004 Fig. 4's picture: V rises over steps 0-300, K and Q over 350-1000
    V_OK, K_OK, Q_OK = _ramp(30.0, 0, 300), _ramp(20.0, 350, 1000), _ramp(25.0, 350, 1000)
    K = np.stack([K_OK, _ramp(20.0, 0, 300), np.full(LAG_STEPS.size, 0.05), K_OK])
    Q = np.stack([Q_OK, Q_OK, np.full(LAG_STEPS.size, 0.05), Q_OK])
    V = np.stack([V_OK, V_OK, V_OK, np.full(LAG_STEPS.size, 0.05)])
    lg = lags(LAG_STEPS, K, Q, V)
    # member 0: t½ K = 700, Q = 700, V = 200 -> lag 0.5; member 1: K with V (200, 200): lag 0
    assert lg.lag[:2].tolist() == pytest.approx([0.5, 0.0])
    assert lg.growth[0] == pytest.approx(20.0 / 0.05) and lg.growth[2] == pytest.approx(1.0)
    # member 2: K, Q never grow: the lag is censored at (1000 − 200)/1000 (a lower bound)
    assert lg.censored.tolist() == [False, False, True, False] and lg.lag[2] == pytest.approx(0.8)
    # member 3: V never grows: (700 − 1000)/1000, an upper bound at or below 0
    assert lg.lag[3] == pytest.approx(-0.3) and not lg.censored[3]
    with pytest.raises(ValueError, match="shape"):
        lags(LAG_STEPS[:-1], K, Q, V)


def test_min_depths_are_discrete_and_censored():
    gaps = {1: [0.1, 0.01, 0.2], 2: [0.015, 0.03, 0.2], 3: [0.001, 0.0, 0.05]}
    found = min_depths(gaps, 0.02)
    assert found.steps.tolist() == [2, 1, 4] and found.censored.tolist() == [False, False, True]  # max depth + 1
    assert found.resolution == 1.0 and found.as_optional() == [2, 1, None]
    assert min_depths({1: [0.0], 2: [0.0], 4: [0.0]}, 0.02).resolution == 2.0  # the grid's largest spacing


def test_table1_measures_choose_on_validation_and_report_best_test_and_final():
    epochs = np.array([0, 1, 2, 3, 4])
    val = np.array(
        [
            [0.9, 0.2, 0.5, 0.4, 0.5],  # epoch 0 excluded; best val first at epoch 2
            [0.1, 0.3, 0.3, 0.2, 0.1],
        ]
    )  # tie at 1 and 2: the first
    test = np.array([[0.95, 0.1, 0.3, 0.6, 0.2], [0.0, 0.25, 0.2, 0.4, 0.4]])
    m = table1_measures(epochs, val, test)
    assert m["val_choice"] == [0.3, 0.25] and m["val_choice_epoch"] == [2, 1]
    assert m["best_test"] == [0.6, 0.4] and m["best_epoch"] == [3, 3]
    assert m["final"] == [0.2, 0.4]


def test_halving_epoch_and_auc_on_built_curves():
    ep = np.arange(6.0)
    loss = np.array(
        [
            [4.0, 3.0, 2.0, 1.0, 1.0, 1.0],  # below half first at epoch 3 (2.0 is exactly half)
            [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
        ]
    )  # never: censored at the last evaluation
    h = halving_epoch(ep, loss)
    assert h.steps.tolist() == [3.0, 5.0] and h.censored.tolist() == [False, True] and h.resolution == 1.0
    assert loss_auc(ep, loss) == pytest.approx([np.mean([0.75, 0.5, 0.25, 0.25, 0.25]), 1.0])


def test_log_ratio_resolution_is_twice_the_largest_corner_move():
    t_mem, t_rsn, interval = np.array([10.0, 4.0, 30.0]), np.array([5.0, 8.0, 30.0]), 2.0
    moves = [
        abs(math.log((m + a) / (r + b)) - math.log(m / r))
        for m, r in zip(t_mem, t_rsn, strict=True)
        for a in (-1.0, 0.0, 1.0)
        for b in (-1.0, 0.0, 1.0)
    ]  # the log ratio is monotone in each T50: its largest move is at a corner of the ±h box
    assert log_ratio_resolution(t_mem, t_rsn, interval) == pytest.approx(2 * max(moves), rel=1e-12)
