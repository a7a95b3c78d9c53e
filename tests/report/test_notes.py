"""The notes written from the verdicts: a held, a failed, a not-evaluable and a not-resolved group each give the
line that says so with its numbers or its cause, rows of ours are named as never deciding, sanity checks that
hold are counted once; and an experiment's own notes come after these."""

from __future__ import annotations

import math

import pytest

from tdlab.claims import ClaimSpec, Measurements, Sample, Stage, judge
from tdlab.claims.declare import Threshold
from tdlab.report.notes import MAX_ROWS, accepted, miss, verdict_notes

PAPER = Threshold("paper", "the paper's tolerance")
STAGE = Stage("left-plateau", "left the plateau")


def _spec(cid: str, statement: str, **kw) -> ClaimSpec:
    kw.setdefault("test", "value")
    kw.setdefault("relation", "close")
    kw.setdefault("horizon", "static")
    return ClaimSpec(cid, statement, quantity="loss", threshold=PAPER, unit=" nats", **kw)


SPECS = (
    _spec("reaches-rate", "Training reaches the entropy rate (Fig. 4)", expected=0.5, tolerance=0.01),
    _spec("stays-at-h-pi", "The standard init stays at H(π) (Fig. 4)", expected=0.69, tolerance=0.01),
    _spec("leaves-plateau", "Members leave the plateau (Fig. 4)", expected=0.5, tolerance=0.01, stage=STAGE),
    _spec("faster", "The proposed init is faster (Fig. 4)", test="compare", relation="lt", margin=0.0),
    _spec("by-construction", "The rank-one init stays rank one", kind="sanity", expected=0.0, tolerance=1e-6),
    _spec("also-by-construction", "Energy is conserved", kind="sanity", expected=0.0, tolerance=1e-6),
)


def _measured() -> Measurements:
    m = Measurements()
    m.row("reaches-rate", "sec2", Sample((0.5, 0.5, 0.5), deterministic=True), arms=["sec2"])
    m.row("reaches-rate", "wide", Sample((0.9, 0.9, 0.9), deterministic=True), arms=["wide"], provenance="ours")
    m.row("stays-at-h-pi", "sec2", Sample((0.55, 0.55, 0.55), deterministic=True), arms=["sec2"])
    m.row("leaves-plateau", "sec2", Sample((0.5, 0.5, 0.5), deterministic=True), arms=["sec2"])
    m.stage("sec2", STAGE, [0.1, 0.9, 0.9], 0.5, "lt", "test loss vs the plateau")
    m.row("faster", "steps", Sample((100.0, 110.0, 300.0)), Sample((200.0, 90.0, 100.0)), arms=["sec2"])
    m.row("by-construction", "", Sample((0.0,), deterministic=True))
    m.row("also-by-construction", "", Sample((0.0,), deterministic=True))
    return m


@pytest.fixture(scope="module")
def notes() -> list[str]:
    m = _measured()
    groups = judge(SPECS, m, cfg=None)
    verdicts = {g.id: g.verdict for g in groups}
    assert verdicts == {
        "reaches-rate": "holds",
        "stays-at-h-pi": "fails",
        "leaves-plateau": "not evaluable",
        "faster": "not resolved",
        "by-construction": "holds",
        "also-by-construction": "holds",
    }
    return verdict_notes(groups, m)


def _line(notes: list[str], start: str, cid: str) -> str:
    (line,) = [n for n in notes if n.startswith(start) and f"({cid})" in n]
    return line


def test_a_held_group_says_so_with_the_numbers_that_decided_it(notes):
    line = _line(notes, "Holds — ", "reaches-rate")
    assert "Training reaches the entropy rate (Fig. 4)" in line
    assert "sec2: measured 0.5" in line and "nats, accepted 0.49..0.51" in line
    assert "wide" not in line  # a row of ours never decides: it has its own line


def test_a_failed_group_says_by_how_much(notes):
    line = _line(notes, "Fails — ", "stays-at-h-pi")
    assert "sec2: measured 0.55" in line and "accepted 0.68..0.7" in line
    assert "outside by 0.13 nats" in line


def test_a_not_evaluable_group_says_why_and_which_members_missed_the_stage(notes):
    line = _line(notes, "Not evaluable — ", "leaves-plateau")
    assert "stage not reached" in line
    assert "stage 'left-plateau': sec2: 1/3 members passed (test loss vs the plateau)" in line


def test_a_not_resolved_group_gives_its_cause_and_interval(notes):
    line = _line(notes, "Not resolved — ", "faster")
    assert "spread" in line and "steps: difference" in line and "accepted < 0" in line


def test_rows_of_ours_are_named_as_never_deciding(notes):
    (line,) = [n for n in notes if n.startswith("Ours — reaches-rate")]
    assert "1 of its 2 rows are settings of ours" in line and "never deciding" in line and "fails 1" in line


def test_sanity_checks_that_hold_are_one_count_line(notes):
    assert [n for n in notes if n.startswith("Sanity checks")] == [
        "Sanity checks: 2/2 hold (by-construction, also-by-construction)."
    ]
    assert not any("(by-construction)" in n for n in notes)


def test_a_sanity_check_that_fails_is_spelled_out():
    m = Measurements()
    m.row("by-construction", "", Sample((0.5,), deterministic=True))
    groups = judge(SPECS[4:5], m, cfg=None)
    (line,) = verdict_notes(groups, m)
    assert line.startswith("Fails — The rank-one init stays rank one (by-construction): measured 0.5")


def test_a_grid_names_a_few_rows_and_counts_the_rest():
    spec = _spec("grid", "Every cell reaches the rate", expected=0.5, tolerance=0.01)
    m = Measurements()
    for k in range(MAX_ROWS + 4):
        m.row("grid", f"k{k}", Sample((0.5,), deterministic=True))
    (line,) = verdict_notes(judge((spec,), m, cfg=None), m)
    assert "k0: " in line and f"k{MAX_ROWS}: " not in line and "(and 4 more rows)" in line


def test_accepted_and_miss_read_the_relation():
    m = Measurements()
    m.row("stays-at-h-pi", "", Sample((0.75,), deterministic=True))
    (g,) = judge(SPECS[1:2], m, cfg=None)
    r = g.rows[0]
    assert accepted(r) == pytest.approx((0.68, 0.70)) and miss(r) == pytest.approx(0.05)
    m = Measurements()
    m.row("faster", "", Sample((1.0, 2.0, 3.0)), Sample((1.0, 2.0, 3.0)))
    (g,) = judge(SPECS[3:4], m, cfg=None)
    lo, hi = accepted(g.rows[0])
    assert math.isinf(lo) and hi == 0.0 and miss(g.rows[0]) == 0.0


def test_an_experiment_keeps_only_its_own_notes_after_the_generic_ones():
    from tdlab.experiments.base import Experiment

    class Planted(Experiment):
        name = "planted-notes"
        claims = SPECS

        def run(self, cfg, ctx):  # pragma: no cover - never trained
            raise NotImplementedError

        def notes(self, cfg, measured, groups):
            return [*super().notes(cfg, measured, groups), "a measured fact of its own"]

    m = _measured()
    groups = judge(SPECS, m, cfg=None)
    out = Planted().notes(None, m, groups)
    assert out[:-1] == verdict_notes(groups, m) and out[-1] == "a measured fact of its own"
