"""``tdlab results reproduce``: a record trained again, row by row identical, within float rounding or not."""

from __future__ import annotations

import math
from pathlib import Path

from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.reproduce import ROUNDING, compare_rows

ROOT = Path(__file__).resolve().parents[1]


def _group(values, expected=0.0, tolerance=0.01, rid="g/r", verdict="holds"):
    row = {
        "id": rid,
        "measured": values,
        "reference": None,
        "expected": expected,
        "tolerance": tolerance,
        "verdict": verdict,
    }
    return [{"id": "g", "rows": [row]}]


def test_rows_are_identical_within_rounding_or_different():
    (same,) = compare_rows(_group([0.5, 0.25]), _group([0.5, 0.25]))
    assert same.status == "identical" and same.max_rel == 0.0
    (near,) = compare_rows(_group([0.5, 0.25]), _group([0.5 * (1 + ROUNDING / 2), 0.25]))
    assert near.status == "within float rounding" and 0 < near.max_rel <= ROUNDING
    (far,) = compare_rows(_group([0.5, 0.25]), _group([0.5 * (1 + 10 * ROUNDING), 0.25], verdict="fails"))
    assert far.status == "differ" and (far.verdict, far.verdict_now) == ("holds", "fails")
    (gone,) = compare_rows(_group([0.5]), _group([0.5, 0.1]))
    assert gone.status == "missing" and math.isinf(gone.max_rel)
    assert compare_rows(_group([math.nan]), _group([math.nan]))[0].status == "identical"


def test_a_value_that_is_itself_rounding_is_judged_at_its_rows_scale():
    """A conservation error of 9.3e-12 that moves by 4e-15 (markov-landscape's energy rows) is rounding: the
    row's tolerance (1e-6) sets the scale, not the tiny value."""
    (r,) = compare_rows(_group([9.2858e-12], tolerance=1e-6), _group([9.2814e-12], tolerance=1e-6))
    assert r.status == "within float rounding"
    (r,) = compare_rows(_group([9.2858e-12], tolerance=0.0), _group([9.2814e-12], tolerance=0.0))
    assert r.status == "differ"


def test_reproducing_markov_landscape_gives_its_numbers_and_names_what_differs(tmp_path):
    res = CliRunner().invoke(
        app,
        ["results", "reproduce", "markov-landscape", "--results", str(ROOT / "results"), "--out", str(tmp_path)],
        env={"COLUMNS": "250"},
    )
    assert res.exit_code == 0, res.output
    assert "differ\n" not in res.output and " 0 differ" not in res.output
    assert "identical" in res.output
    assert "differs from the record: commit" in res.output or "the record's" in res.output


def test_a_missing_record_is_one_line_and_exit_2(tmp_path):
    res = CliRunner().invoke(app, ["results", "reproduce", "markov-landscape", "--results", str(tmp_path)])
    assert res.exit_code == 2 and "no published record" in res.output and len(res.output.strip().splitlines()) == 1
