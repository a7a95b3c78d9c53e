"""tdlab.theory.markov_chain: the binary chain's closed forms (the enumeration checks are the task's,
tests/tasks/test_markov.py)."""

from __future__ import annotations

import math

import pytest

from tdlab.theory.markov_chain import binary_entropy, check_pq, stationary


def test_binary_entropy_values():
    assert binary_entropy(0.5) == pytest.approx(math.log(2))
    assert binary_entropy(0.0) == binary_entropy(1.0) == 0.0
    assert binary_entropy(0.2) == pytest.approx(binary_entropy(0.8))
    assert binary_entropy(0.1) == pytest.approx(-(0.1 * math.log(0.1) + 0.9 * math.log(0.9)))


@pytest.mark.parametrize("p,q", [(0.0, 0.5), (0.5, 1.0), (math.nan, 0.5)])
def test_parameters_outside_the_open_interval_are_refused(p, q):
    with pytest.raises(ValueError, match="open interval"):
        check_pq(p, q)
    with pytest.raises(ValueError):
        stationary(p, q)
