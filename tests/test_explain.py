"""``tdlab explain``: each paper claim as the paper states it, on the published records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.config import ConfigError
from tdlab.experiments.base import registry
from tdlab.explain import explain, explain_lines, readings_lines, readings_markdown

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "results" / "paper"
KEYS = {"group", "quote", "where", "kind", "hypotheses", "settings_diff", "threshold_source", "verdict"}


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_paper_group_says_what_the_paper_says(name: str) -> None:
    for e in explain(name, results=PAPER):
        assert e.keys() >= KEYS
        for key in ("quote", "where", "kind", "threshold_source"):
            assert e[key], f"{name} {e['group']}: empty {key}"
        assert e["kind"] in ("settings", "limit", "existence")
        assert all({"text", "holds"} <= h.keys() for h in e["hypotheses"])
        assert all({"field", "paper", "run"} <= d.keys() for d in e["settings_diff"])


@pytest.mark.parametrize("name", sorted(p.stem for p in PAPER.glob("*.json")))
def test_a_published_refutation_is_inside_the_papers_hypotheses_settings_and_thresholds(name: str) -> None:
    for e in explain(name, results=PAPER):
        if e["verdict"] != "fails":
            continue
        assert all(h["holds"] is True for h in e["hypotheses"]), (name, e["group"], e["hypotheses"])
        assert e["settings_diff"] == [], (name, e["group"], e["settings_diff"])
        assert e["calibrated"], (name, e["group"], e["threshold"])


def test_the_genuine_markov_init_finding_still_fails_with_its_explanation() -> None:
    (e,) = explain("markov-init", "standard-init-ends-at-theory-limit", PAPER)
    assert e["verdict"] == "fails" and e["cause"] == "decided"
    assert "unigram" in e["quote"] and "Fig. 4" in e["where"] and e["kind"] == "settings"
    assert (
        e["hypotheses"] == [{"text": e["hypotheses"][0]["text"], "on": "config", "holds": True, "rows_outside": 0}]
        and "p + q > 1" in e["hypotheses"][0]["text"]
    )
    assert e["settings_diff"] == [] and e["threshold_source"] == "ours" and e["calibrated"]
    text = "\n".join(explain_lines([e]))
    assert "FAILS" in text and "calibrated (planted)" in text and "the seed's (every field" in text


def test_a_profile_without_a_record_is_explained_from_its_declarations(tmp_path: Path) -> None:
    (tmp_path / "quick").mkdir()
    entries = explain("markov-init", results=tmp_path / "quick")
    assert entries and all(e["verdict"] is None and e["record"] is None for e in entries)
    assert entries[0]["profile"] == "quick" and {d["field"] for d in entries[0]["settings_diff"]} >= {"train.steps"}


def test_the_command_prints_json_and_refuses_an_unknown_group_in_one_line() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["explain", "markov-init", "--results", str(PAPER), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [e["group"] for e in doc] == [s.id for s in registry()["markov-init"].claims if s.kind == "paper"]
    bad = runner.invoke(app, ["explain", "markov-init", "no-such-group"])
    assert bad.exit_code == 2 and "no-such-group" in bad.output and len(bad.output.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="unknown experiment"):
        explain("no-such-experiment")


def test_the_command_prints_how_the_experiment_reads_the_seed_above_the_groups() -> None:
    readings = registry()["markov-rank"].readings
    assert readings and any(r.option == "train.optimizer" for r in readings)
    res = CliRunner().invoke(app, ["explain", "markov-rank", "fig3-rank-one", "--results", str(PAPER)])
    assert res.exit_code == 0, res.output
    head, group = res.output.split("markov-rank · fig3-rank-one:", 1)
    block = readings_lines("markov-rank")
    assert block[0] == "markov-rank: how it reads the seed" and block[-1] == ""
    # every reading in order: its place and what the seed says, then the choice and the option that switches it
    assert block[1:-1] == [
        line
        for r in readings
        for line in (f"  {r.where}: {r.paper}", f"    → {r.chosen}" + (f" (option: {r.option})" if r.option else ""))
    ]
    assert " ".join(head.split()) == " ".join(" ".join(block).split())  # printed as is, above the groups
    assert "paper (App. A.3.1" in group
    assert readings_markdown("markov-rank")[0].startswith("- App. A.3.1; Table 2: the text says")


def test_an_experiment_without_readings_prints_no_block(monkeypatch) -> None:
    monkeypatch.setattr(type(registry()["markov-init"]), "readings", ())
    assert readings_lines("markov-init") == [] and readings_markdown("markov-init") == []
