"""`tdlab results compare`: verdicts group by group, and rows' numbers by a Welch interval over the members with
Holm over the rows (checked against scipy's Welch t-test), on published records and edited copies of them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from tdlab.claims.stats import holm
from tdlab.cli import app
from tdlab.pages.compare import (
    compare_folders,
    compare_records,
    folder_markdown,
    folder_rows,
    row_estimate,
    summary_line,
)
from tdlab.records import Record, RecordError
from tdlab.results import load_record

REPO = Path(__file__).resolve().parents[2]
REC = REPO / "results" / "paper" / "topics-real-two-stage.json"


def _rec() -> Record:
    return load_record(REC)


def _other(rec: Record) -> str:
    """A kind of device other than ``rec``'s: its members are drawn independently."""
    return "cpu" if rec.device.startswith("cuda") else "cuda"


def _edit_rows(rec: Record, edit, **update: Any) -> Record:
    """``rec`` with ``edit(row)`` applied to every row of every group (a new dict per row)."""
    doc = json.loads(json.dumps(rec.model_dump()))
    for g in doc["claims"] + doc["sanity"]:
        g["rows"] = [edit(dict(r)) for r in g["rows"]]
    doc.update(update)
    return Record.model_validate(doc)


def test_a_record_against_itself_agrees_with_every_row_identical():
    c = compare_records(_rec(), _rec())
    assert c.agree and c.same_stream and c.rows
    assert c.identical == len(c.rows)
    assert all(g.agreement == "same" for g in c.groups)


def test_holds_against_fails_is_a_contradiction_and_a_missing_verdict_a_difference_in_certainty():
    a = _rec()
    held = next(g for g in a.claims if g["verdict"] == "holds")
    flipped = [{**g, "verdict": "fails", "cause": "decided"} if g is held else g for g in a.claims]
    c = compare_records(a, a.model_copy(update={"claims": flipped}))
    assert [g.id for g in c.contradictions] == [held["id"]] and not c.agree
    unsure = [{**g, "verdict": "not resolved", "cause": "spread"} if g is held else g for g in a.claims]
    c = compare_records(a, a.model_copy(update={"claims": unsure}))
    assert c.agree and next(g for g in c.groups if g.id == held["id"]).agreement == "certainty"


def test_a_row_shifted_far_beyond_its_spread_differs_and_one_within_it_does_not():
    a = _rec()
    target = "value-grows-first/L0"  # a value row: three members' lags

    def shift(by: float):
        def edit(r):
            if r["id"] == target:
                r["measured"] = [v + by for v in r["measured"]]
            return r

        return edit

    far = compare_records(a, _edit_rows(a, shift(1.0), device=_other(a), gpu=None))
    assert not far.same_stream and [r.id for r in far.differing] == [target] and not far.agree
    near = compare_records(a, _edit_rows(a, shift(0.001), device=_other(a), gpu=None))
    assert near.agree and not near.differing


def test_the_rows_p_values_are_welchs_t_test_and_holm_decides_which_differ():
    def exact(r):  # no resolution bound: the interval is Welch's alone
        r["resolution"] = 0.0
        return r

    a = _edit_rows(_rec(), exact)
    rng = np.random.default_rng(0)
    noise = {}

    def edit(r):
        if r["test"] == "value":
            noise[r["id"]] = [
                v + float(x) for v, x in zip(r["measured"], rng.normal(0.02, 0.02, len(r["measured"])), strict=True)
            ]
            r["measured"] = noise[r["id"]]
        return r

    b = _edit_rows(a, edit, device=_other(a))
    c = compare_records(a, b)
    rows_a = {r["id"]: r for g in a.claims for r in g["rows"]}
    compared = [r for r in c.rows if r.status == "compared"]
    assert {r.id for r in compared} >= set(noise)
    for r in compared:
        if r.id in noise:
            want = stats.ttest_ind(rows_a[r.id]["measured"], noise[r.id], equal_var=False).pvalue
            assert r.p == pytest.approx(want, rel=1e-9)
    rejected = holm([r.p for r in compared], 1 - a.confidence)
    assert [r.differs for r in compared] == rejected


def test_a_paired_compare_row_is_estimated_by_its_member_differences():
    a = _rec()
    row = next(r for g in a.claims for r in g["rows"] if r["test"] == "compare")
    est = row_estimate(row)
    d = np.array(row["measured"]) - np.array(row["reference"])
    assert not isinstance(est, str)
    assert est.value == pytest.approx(d.mean(), rel=1e-12)
    assert est.se == pytest.approx(d.std(ddof=1) / math.sqrt(d.size), rel=1e-12)
    assert est.value == pytest.approx(row["difference"], rel=1e-9)


def test_censored_rows_and_rows_without_values_are_not_compared():
    a = _rec()

    def censor(r):
        r["censored"] = [True] + [False] * (len(r["measured"]) - 1)
        return r

    c = compare_records(a, _edit_rows(a, censor))
    assert c.rows and all(r.status == "censored" and not r.differs for r in c.rows)

    def blank(r):
        r["measured"] = [float("nan")] * len(r["measured"])
        return r

    c = compare_records(a, _edit_rows(a, blank))
    assert all(r.status == "no value" for r in c.rows)


def test_rows_without_spread_are_compared_with_the_relative_tolerance():
    a = _rec()

    def flat(by: float):
        def edit(r):
            r["test"], r["reference"], r["mc_se"], r["resolution"] = "value", None, 0.0, 0.0
            r["measured"] = [1.0 + by] * 3
            return r

        return edit

    base = _edit_rows(a, flat(0.0))
    assert compare_records(base, _edit_rows(a, flat(1e-9))).agree
    c = compare_records(base, _edit_rows(a, flat(1e-3)))  # the same members: they should agree to round-off
    assert c.same_stream and c.rows and all(r.status == "deterministic" and r.differs for r in c.rows)
    assert compare_records(base, _edit_rows(a, flat(1e-3)), rtol=1e-2).agree
    # drawn independently (another device): a value without spread may move with the draws; not evidence
    c = compare_records(base, _edit_rows(a, flat(1e-3), device=_other(a)))
    assert c.agree and all(r.status == "deterministic" and not r.equal for r in c.rows)

    def coarse(r):  # known to a grid of 0.01: a gap within both half-cells is no evidence
        r["resolution"] = 0.01
        return r

    coarse_base = _edit_rows(base, coarse)
    assert compare_records(coarse_base, _edit_rows(_edit_rows(a, flat(0.009)), coarse)).agree
    assert not compare_records(coarse_base, _edit_rows(_edit_rows(a, flat(0.011)), coarse)).agree


def test_records_at_different_configs_compare_verdicts_only():
    quick = load_record(REPO / "results" / "quick" / "topics-real-two-stage.json")
    c = compare_records(_rec(), quick)
    assert not c.same_config and c.rows == [] and c.groups
    assert "rows" not in summary_line(c)


def test_one_value_is_deterministic_when_its_interval_is_finite_and_of_unknown_spread_otherwise():
    a = _rec()

    def single(finite: bool, value: float):
        def edit(r):
            r["test"], r["reference"], r["mc_se"], r["resolution"], r["measured"] = "value", None, 0.0, 0.0, [value]
            r["interval"] = [value, value] if finite else [-math.inf, math.inf]
            return r

        return edit

    closed = compare_records(_edit_rows(a, single(True, 2.0)), _edit_rows(a, single(True, 2.5)))
    assert closed.rows and all(r.status == "deterministic" and r.differs for r in closed.rows)
    unknown = compare_records(_edit_rows(a, single(False, 2.0)), _edit_rows(a, single(False, 2.5), device=_other(a)))
    assert unknown.agree and all(r.status == "one member" for r in unknown.rows)


def test_two_root_seeds_of_one_config_are_replicates_whose_numbers_are_compared():
    a = _rec()
    b = a.model_copy(update={"seed": 1, "config": {**a.config, "seed": 1}, "config_hash": "0" * 64})
    c = compare_records(a, b)
    assert c.same_config and not c.same_stream and c.rows and c.agree
    other = a.model_copy(update={"config": {**a.config, "members": a.members + 1}, "config_hash": "1" * 64})
    assert compare_records(a, other).rows == []


def test_two_experiments_or_a_bad_tolerance_are_refused():
    with pytest.raises(RecordError, match="two experiments"):
        compare_records(_rec(), load_record(REPO / "results" / "paper" / "markov-rank.json"))
    with pytest.raises(RecordError, match="rtol"):
        compare_records(_rec(), _rec(), rtol=-1.0)


def test_cli_exit_codes(tmp_path: Path):
    runner = CliRunner()
    same = runner.invoke(app, ["results", "compare", str(REC), str(REC)])
    assert same.exit_code == 0 and "0 contradict" in same.stdout and "identical" in same.stdout
    a = _rec()
    held = next(g for g in a.claims if g["verdict"] == "holds")
    flipped = a.model_copy(
        update={"claims": [{**g, "verdict": "fails", "cause": "decided"} if g is held else g for g in a.claims]}
    )
    folder = tmp_path / "paper"
    folder.mkdir()
    path = folder / REC.name
    path.write_text(json.dumps(flipped.model_dump()))
    bad = runner.invoke(app, ["results", "compare", str(REC), str(path)])
    assert bad.exit_code == 1 and "contradicts" in bad.stdout and held["id"] in bad.stdout
    other = runner.invoke(app, ["results", "compare", str(REC), str(REPO / "results" / "paper" / "markov-rank.json")])
    assert other.exit_code == 2 and "two experiments" in other.output
    missing = runner.invoke(app, ["results", "compare", str(REC), str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and len(missing.output.strip().splitlines()) == 1


def test_two_folders_compare_every_experiment_they_share(tmp_path: Path):
    a, b = tmp_path / "a" / "quick", tmp_path / "b" / "quick"
    a.mkdir(parents=True), b.mkdir(parents=True)
    for name in ("markov-landscape", "topics-landscape"):
        (a / f"{name}.json").write_text((REPO / "results" / "quick" / f"{name}.json").read_text())
    rec = load_record(a / "topics-landscape.json")
    held, unsure = [g for g in rec.claims if g["verdict"] == "holds"][:2]
    edits = {
        held["id"]: {"verdict": "fails", "cause": "decided"},
        unsure["id"]: {"verdict": "not resolved", "cause": "spread"},
    }
    flipped = rec.model_copy(update={"claims": [{**g, **edits.get(g["id"], {})} for g in rec.claims]})
    (b / "topics-landscape.json").write_text(json.dumps(flipped.model_dump()))
    cs = compare_folders(a, b)
    assert [c.a.experiment for c in cs] == ["topics-landscape"] and not cs[0].agree
    row = folder_rows(cs)[0]
    assert row[0] == "topics-landscape" and row[5] == "1"
    text = folder_markdown(cs)
    n = sum(r.status == "compared" for r in cs[0].rows)
    assert f"Before Holm, 0 of the {n} rows compared" in text
    # every group that moved is named under its kind of difference, with the cause of an undecided verdict
    opposite, certainty = text.split("Opposite verdicts:")[1].split("Differing in certainty only:")
    assert f"`{held['id']}` (paper): holds in A (quick, seed 0, cpu), fails in B (quick, seed 0, cpu)" in opposite
    assert f"`{unsure['id']}` (paper): holds in A (quick, seed 0, cpu), not resolved (spread) in B" in certainty
    assert held["id"] not in certainty and unsure["id"] not in opposite
    runner = CliRunner()
    res = runner.invoke(app, ["results", "compare", str(a), str(b)])
    assert res.exit_code == 1 and "topics-landscape" in res.stdout and held["id"] in res.stdout
    (tmp_path / "c").mkdir()
    none = runner.invoke(app, ["results", "compare", str(a), str(tmp_path / "c")])
    assert none.exit_code == 2 and "no record of the same experiment" in none.output
    mixed = runner.invoke(app, ["results", "compare", str(a), str(REC)])
    assert mixed.exit_code == 2 and "a folder of records with a folder" in mixed.output
