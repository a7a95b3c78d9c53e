"""A run's record (:mod:`tdlab.records`): written as a run is reported, checked against its schema as it is
read back (a damaged one refused naming the field), a resumed run's commits named with their hours, a record
written in the old words read in today's, and where a published record lies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tdlab.records import RECORD_NAME, Record, RecordError, parse_record, record_path
from tdlab.results import rejudge


@pytest.fixture
def run_dir(make_markov_run) -> Path:
    """A finished run of markov-init (two members, written without training) reported again: its
    ``record.json`` as the runner writes it."""
    from tdlab.runner import rebuild

    _, path = make_markov_run(0.5, 0.8, {}, [0, 10], members=2)
    rebuild(path)
    return path


def test_a_published_record_lies_under_its_profile_named_for_its_experiment():
    assert record_path(Path("results"), "quick", "markov-init") == Path("results/quick/markov-init.json")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.update(format="other/1"), "format"),
        (lambda d: d.update(commit="not-a-commit"), "commit"),
        (lambda d: d.update(members=0), "members"),
        (lambda d: d["claims"][0].update(verdict="maybe"), "claims"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d.pop("config_hash"), "config_hash"),
        (lambda d: d.update(segments=[{"commit": "abcdef1", "device": "cpu", "threads": 1, "wall_s": -1}]), "segments"),
        (lambda d: d.update(segments=[{"commit": "HEAD", "device": "cpu", "threads": 1, "wall_s": 1}]), "segments"),
    ],
)
def test_a_damaged_record_is_refused_naming_the_field(run_dir, tmp_path, change, field):
    doc = json.loads((run_dir / RECORD_NAME).read_text())
    change(doc)
    f = tmp_path / "quick" / "markov-init.json"
    f.parent.mkdir()
    f.write_text(json.dumps(doc))
    with pytest.raises(RecordError, match=field):
        parse_record(f)


def test_a_resumed_record_names_every_commit_that_trained_it_with_its_hours(run_dir, tmp_path):
    doc = json.loads((run_dir / RECORD_NAME).read_text())
    assert "segments" not in doc  # one process trained it: its commit is the record's
    seg = {"device": "cpu", "threads": 1}
    doc["segments"] = [
        {**seg, "commit": None, "wall_s": 1800.0},  # a part run before segments were kept
        {**seg, "commit": "a" * 40, "wall_s": 3600.0},
        {**seg, "commit": "a" * 40, "wall_s": 3600.0},  # the same commit resumed: one entry
        {**seg, "commit": "b" * 40, "wall_s": 7200.0},
    ]
    f = tmp_path / "quick" / "markov-init.json"
    f.parent.mkdir()
    f.write_text(json.dumps(doc))
    assert parse_record(f).trained_by() == f"not recorded (0.5 h), {'a' * 12} (2.0 h), {'b' * 12} (2.0 h)"
    doc["segments"] = doc["segments"][1:3]  # stopped and resumed by one commit: that commit alone
    doc["commit"] = "a" * 40
    f.write_text(json.dumps(doc))
    assert parse_record(f).trained_by() == "a" * 12


def test_a_record_written_when_the_paper_was_called_seed_reads_in_todays_words_and_rejudges_alike(run_dir, tmp_path):
    """Records written before "seed" meant only a random seed named the paper "seed" (a row's provenance, in the
    groups and in the measurements the judge reads; the cause "no seed rows"; a settings diff's value; the
    measurement ``lr_vs_seed``): they load in today's words and re-judge to the verdicts they hold."""
    doc = json.loads((run_dir / RECORD_NAME).read_text())
    today = Record.model_validate(doc)
    old = json.loads(json.dumps(doc).replace('"provenance": "paper"', '"provenance": "seed"'))
    for rows in old["measured"]["rows"].values():
        for r in rows:
            if r["provenance"] == "paper":
                r["provenance"] = "seed"
    old["settings_diff"] = [{"field": "train.steps", "seed": 8000, "run": 200, "where": "Table 2"}]
    old["claims"][0] = {**old["claims"][0], "cause": "no seed rows"}
    old["measurements"] = {**old["measurements"], "lr_vs_seed": 100.0}
    assert '"seed"' in json.dumps(old["measured"]) or '"seed"' in json.dumps(old["claims"])
    rec = Record.model_validate(old)
    assert '"provenance": "seed"' not in json.dumps(rec.model_dump())
    assert rec.settings_diff == [{"field": "train.steps", "paper": 8000, "run": 200, "where": "Table 2"}]
    assert rec.claims[0]["cause"] == "no paper rows"
    assert rec.measurements["lr_vs_paper"] == 100.0 and "lr_vs_seed" not in rec.measurements
    assert [g.verdict for g in rejudge(rec)] == [g.verdict for g in rejudge(today)]
