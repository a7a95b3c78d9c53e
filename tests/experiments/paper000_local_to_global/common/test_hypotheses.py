"""Seed 000's hypotheses: a row speaks for Thm. 2 (p + q > 1) or Thm. 8 (p + q < 1) by its own chain, for the
small-init consequences by its σ; a row that does not name them (an older record) meets none; and the
experiments declare them where their statements need them."""

from __future__ import annotations

import math

import pytest

from tdlab.claims import Row, Sample
from tdlab.experiments.base import registry
from tdlab.experiments.paper000_local_to_global.common.hypotheses import (
    ABOVE_LINE_ROW,
    BELOW_LINE_ROW,
    OFF_LINE_ROW,
    SMALL_INIT_STD,
    SMALL_SIGMA2,
    SMALL_SIGMA_ROW,
)


def _row(**context) -> Row:
    return Row("r", Sample([0.0]), context=context)


@pytest.mark.parametrize(
    "p,q,above,below",
    [(0.5, 0.8, True, False), (0.2, 0.3, False, True), (0.4, 0.6, False, False), (0.9, 0.9, True, False)],
)
def test_the_side_of_the_line_is_read_off_the_rows_chain(p, q, above, below):
    row = _row(p=p, q=q)
    assert ABOVE_LINE_ROW.met(None, row) is above and BELOW_LINE_ROW.met(None, row) is below
    assert OFF_LINE_ROW.met(None, row) is (above or below)


def test_a_row_without_its_chain_or_sigma_meets_none():
    bare = _row(arm="p0.5_q0.8")
    assert not any(h.met(None, bare) for h in (ABOVE_LINE_ROW, BELOW_LINE_ROW, OFF_LINE_ROW, SMALL_SIGMA_ROW))
    assert ABOVE_LINE_ROW.met(None) is None  # a row hypothesis asked without a row


def test_small_means_an_order_of_magnitude_below_one_over_root_two():
    assert math.isclose(SMALL_SIGMA2, 0.1 / math.sqrt(2))
    for sigma, small in ((0.001, True), (0.02, True), (0.1, True), (0.26, True), (0.27, False), (1.0, False)):
        assert SMALL_SIGMA_ROW.met(None, _row(sigma=sigma)) is small
    bridge = registry()["markov-bridge"]
    assert SMALL_INIT_STD.met(bridge.make_config("paper"))
    assert not SMALL_INIT_STD.met(bridge.make_config("quick", ["model.init_std=0.5"]))


def test_every_paper_claim_of_seed_000_declares_its_hypotheses_where_its_statement_has_them():
    """Thm. 2 / Thm. 8 end states carry their side; flow statements p + q ≠ 1 and, for Gaussian inits, σ small;
    App. C's structure p + q < 1 except W_2 = ±W_1^T (both sides); Fig. 3's rank statements none (the seed:
    "for all values of (p, q)")."""

    def texts(name: str, claim: str) -> set[str]:
        (spec,) = [s for s in registry()[name].claims if s.id == claim]
        return {h.text for h in spec.hypotheses}

    assert ABOVE_LINE_ROW.text in texts("markov-bridge", "above-line-stays-at-H(pi)")
    assert BELOW_LINE_ROW.text in texts("markov-bridge", "below-line-ends-at-entropy-rate")
    for name, claim in (("markov-landscape", "small-gaussian-init"), ("markov-landscape-3d", "small-init-limit")):
        assert {OFF_LINE_ROW.text, SMALL_SIGMA_ROW.text} <= texts(name, claim)
    assert texts("markov-landscape", "basins-match-theorem") == {OFF_LINE_ROW.text}
    assert texts("markov-icommon", "icommon-reaches-entropy-rate") == {OFF_LINE_ROW.text}
    rank = registry()["markov-rank"]
    app_c = [s for s in rank.claims if s.id.startswith("app-c-")]
    assert all(any("App. C" in h.text for h in s.hypotheses) for s in app_c if s.id != "app-c-w2-transpose-w1")
    assert texts("markov-rank", "app-c-w2-transpose-w1") == set()
    assert all(not s.hypotheses for s in rank.claims if s.id.startswith("fig3-") and s.id != "fig3-converged")
    above = rank.make_config("quick", ["task.p=0.5", "task.q=0.8"])
    (positions,) = [s for s in app_c if s.id == "app-c-positions-along-e"]
    assert positions.outside(above, _row(arm="standard")) and not positions.outside(rank.make_config("quick"), _row())
