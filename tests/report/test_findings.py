"""The README findings table is generated from run directories: counts and lines follow the summaries."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.report.findings import END, START, changes_markdown, findings_markdown, replace_between_markers
from tdlab.runner import rebuild

STEPS = [0, 100, 200, 300, 400]


def _run(make_markov_run):
    def h(x):
        return -x * math.log(x) - (1 - x) * math.log(1 - x)

    p, q = 0.5, 0.8
    pi1 = p / (p + q)
    rate, hpi = (1 - pi1) * h(p) + pi1 * h(q), h(pi1)
    spread = (-0.001, 0.0, 0.001)
    curves = {
        "sec2/standard": [[0.69] + [rate + d] * 4 for d in spread],  # not H(pi): that row fails
        "gpt2/standard": [[0.69] + [hpi + d] * 4 for d in spread],
        "sec2/local-to-global": [[0.69] + [rate + d] * 4 for d in spread],
        "gpt2/local-to-global": [[0.7] * 5] * 3,
    }  # never moved: not trained
    _, path = make_markov_run(p, q, curves, STEPS)
    return rebuild(path)


def test_findings_table_counts_come_from_the_summary(make_markov_run):
    run = _run(make_markov_run)
    s = run.summary
    text = findings_markdown([run.path])
    table = [line for line in text.splitlines() if line.startswith("| `markov-init`")]
    assert len(table) == 1
    held = sum(g["verdict"] == "holds" for g in s["claims"])
    assert f"| {held}/{len(s['claims'])}" in table[0]
    assert s["claims_failed"] >= 1 and f"{s['claims_failed']} fails" in table[0]
    for g in s["claims"]:
        assert f"**{g['verdict']}**" in text and f"`{g['id']}`" in text
    failing = [g for g in s["claims"] if g["verdict"] == "fails"]
    assert f"{len(failing)} finding" in table[0]  # a failing group past every gate is a finding
    assert "**fails** (finding) `standard-init-ends-at-theory-limit`" in text
    assert "arm `gpt2/local-to-global` **not trained**" in text


def test_decided_by_names_the_profile_or_the_rounds():
    from tdlab.report.findings import decided_by

    assert decided_by({"profile": "quick", "claims": []}) == "quick"
    rounds = [{"members": 3}, {"members": 6}, {"members": 12}]
    s = {
        "profile": "quick",
        "decide": {"rounds": rounds, "confidence": 0.9875, "stopped": "budget: …"},
        "claims": [{"verdict": "holds"}, {"verdict": "not resolved"}],
    }
    assert decided_by(s) == "decide: 12 members, 3 looks at 0.9875, 1 undecided (budget: …)"
    s["claims"][1]["verdict"] = "fails"
    assert decided_by(s) == "decide: 12 members, 3 looks at 0.9875"


def test_what_changed_against_earlier_runs(make_markov_run, tmp_path):
    import json
    import shutil

    run = _run(make_markov_run)
    before = tmp_path / "before"
    before.mkdir()
    shutil.copytree(run.path, before / "old")
    s = json.loads((before / "old" / "summary.json").read_text())
    s["claims"][0]["verdict"] = "fails"
    s["claims"].append({"id": "gone-group", "verdict": "holds", "rows": []})
    (before / "old" / "summary.json").write_text(json.dumps(s))
    text = changes_markdown([run.path], before)
    g = run.summary["claims"][0]
    assert f"`{g['id']}` fails → {g['verdict']}" in text and "`gone-group` was holds, restated or dropped" in text
    result = CliRunner().invoke(app, ["findings", str(run.path), "--before", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no run directories" in result.output


def test_bad_readme_and_bad_summaries_are_one_line(make_markov_run, tmp_path):
    import json

    run = _run(make_markov_run)
    for bad, words in ((tmp_path / "missing.md", "no such file"), (tmp_path, "a folder")):
        result = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(bad)])
        assert result.exit_code == 2 and words in result.output and len(result.output.strip().splitlines()) == 1
    latin = tmp_path / "latin.md"
    latin.write_bytes(f"{START}\n\xe9t\xe9\n{END}\n".encode("latin-1"))
    result = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(latin)])
    assert result.exit_code == 2 and "not UTF-8" in result.output
    s = json.loads((run.path / "summary.json").read_text())
    for broken in ({**s, "claims": "all hold"}, {**s, "claims": [{"id": "g", "rows": []}]}):
        (run.path / "summary.json").write_text(json.dumps(broken))
        result = CliRunner().invoke(app, ["findings", str(run.path)])
        assert result.exit_code == 2 and "summary.json" in result.output, result.output


def test_findings_written_between_markers_and_refused_without_them(make_markov_run, tmp_path):
    run = _run(make_markov_run)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold table\n{END}\noutro\n")
    result = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(readme)])
    assert result.exit_code == 0, result.output
    doc = readme.read_text()
    assert doc.startswith("intro\n") and doc.endswith("outro\n") and "old table" not in doc
    assert findings_markdown([run.path]) in doc
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    result = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(bare)])
    assert result.exit_code == 2 and "markers" in result.output
    assert bare.read_text() == "no markers\n"


def test_findings_on_a_folder_that_is_not_a_run(tmp_path):
    result = CliRunner().invoke(app, ["findings", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "not a run directory" in result.output


def test_replace_between_markers_keeps_the_rest(tmp_path):
    f = tmp_path / "r.md"
    f.write_text(f"a\n{START}x{END}\nb {START}y{END}\n")
    replace_between_markers(f, "new\n")
    assert f.read_text() == f"a\n{START}\nnew\n{END}\nb {START}y{END}\n"  # only the first block


def test_findings_write_into_a_named_section(tmp_path, make_markov_run):
    run = _run(make_markov_run)
    readme = tmp_path / "R.md"
    readme.write_text(
        "a\n<!-- findings:start -->\nold\n<!-- findings:end -->\n<!-- decide:start -->\n<!-- decide:end -->\n"
    )
    res = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(readme), "--section", "decide"])
    assert res.exit_code == 0, res.output
    text = readme.read_text()
    assert "<!-- findings:start -->\nold\n" in text and "decided by" in text.split("<!-- decide:start -->")[1]
    res = CliRunner().invoke(app, ["findings", str(run.path), "--readme", str(readme), "--section", "Bad name"])
    assert res.exit_code == 2 and "--section" in res.output


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(id=7),
        lambda r: r.update(interval=[0.1]),
        lambda r: r.update(verdict="maybe"),
    ],
)
def test_a_row_of_the_wrong_shape_is_refused_in_one_line_not_a_traceback(tmp_path, change):
    from tdlab.report.findings import findings_markdown
    from tdlab.runs import RunDirError

    d = tmp_path / "r"
    d.mkdir()
    (d / "config.yaml").write_text("experiment: markov-init\nprofile: quick\nconfig: {}\n")
    (d / "metrics.parquet").write_bytes(b"")
    row = {"id": "c/r", "verdict": "holds", "interval": [0.0, 1.0], "mean": 0.5, "expected": 0.5, "tolerance": 0.1}
    change(row)
    summary = {
        "experiment": "markov-init",
        "paper": "000",
        "figure": "Fig. 4",
        "claims": [{"id": "c", "verdict": "holds", "statement": "s", "rows": [row]}],
        "sanity": [],
    }
    (d / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RunDirError, match="rows of that form"):
        findings_markdown([d])
