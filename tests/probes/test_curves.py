"""Events on training curves: first crossings, and crossings of a gap to a reference beyond the noise."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.probes.curves import NOISE_SIGMAS, evaluation_noise, first_crossing, gap_crossing


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
