"""The seed-002 set-up: Thm 6.3's initialisation and the one-parameter window of Sec. 6."""

from __future__ import annotations

import pytest

from tdlab.experiments.seed002_cross_attention.common.synthetic import one_param_init, two_param_init
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_of_beta

APP_H = MultiModalPrompts()


def test_the_initialisations_sit_in_the_middle_of_their_windows():
    # m_upper = 50 (two modalities, norms on [0, 5]): windows (0, 2/51) for alpha and (-2/51, 0) for beta
    assert one_param_init(APP_H) == pytest.approx(1 / 51)
    a0, b0 = two_param_init(APP_H, 3)
    assert b0 == pytest.approx(-1 / 51) and a0 == pytest.approx(alpha_of_beta(-1 / 51, 3, APP_H))
    assert two_param_init(APP_H, 3, fraction=0.25)[1] == pytest.approx(-0.5 / 51)
