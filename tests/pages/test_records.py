"""Tables from published records: counts by seed add up to the records' groups, quick beside the seed's
settings, text from a record never becomes markup, and `tdlab findings --results` prints and writes them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.experiments.base import get, registry
from tdlab.pages.records import Published, experiment_table, group_table, load_published, paper_table, undecided_lines
from tdlab.records import Record
from tdlab.results import load_record

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "results" / "paper"


def _record(name: str) -> Record:
    return load_record(PAPER / f"{name}.json")


def test_seed_table_counts_every_paper_group_of_the_records():
    pub = load_published(REPO / "results")
    assert pub.paper, "results/paper holds records"
    table = paper_table(pub, list(registry().values()))
    total = sum(len(r.claims) for r in pub.paper.values())
    held = sum(r.counts()["holds"] for r in pub.paper.values())
    last = table.strip().splitlines()[-1].split("|")
    assert last[1].strip() == "all" and last[2].strip() == f"{len(pub.paper)} of {len(registry())}"
    assert int(last[3]) == held and int(last[7]) == total


def test_group_table_sets_quick_beside_the_seed_settings_and_says_how_to_reproduce():
    rec = _record("markov-landscape")
    quick = rec.model_copy(
        update={"profile": "quick", "claims": [{**g, "verdict": "not resolved", "cause": "spread"} for g in rec.claims]}
    )
    text = group_table(Published({"markov-landscape": rec}, {"markov-landscape": quick}), get("markov-landscape"))
    for g in rec.claims:
        line = next(ln for ln in text.splitlines() if f"`{g['id']}`" in ln)
        assert f"**{g['verdict']}**" in line and "**not resolved** (spread)" in line
    assert "tdlab run markov-landscape --profile paper --seed 0" in text
    empty = group_table(Published({}, {}), get("markov-landscape"))
    assert "No record at the seed's settings yet" in empty


def test_text_from_a_record_never_becomes_markup():
    rec = _record("markov-landscape")
    evil = "<script>alert(1)</script> [x](javascript:alert(1)) *bold* | cell"
    bad = rec.model_copy(
        update={
            "claims": [
                {
                    **g,
                    "verdict": "fails",
                    "cause": evil,
                    "reason": evil,
                    "rows": [{**r, "reason": evil, "verdict": "not evaluable"} for r in g["rows"]],
                }
                for g in rec.claims
            ],
            "gpu": evil,
            "device": "cuda",
        }
    )
    pub = Published({"markov-landscape": bad}, {})
    for text in (
        group_table(pub, get("markov-landscape")),
        experiment_table(pub, [get("markov-landscape")]),
        "\n".join(
            undecided_lines(
                Published(
                    {
                        "markov-landscape": bad.model_copy(
                            update={"claims": [{**g, "verdict": "not resolved"} for g in bad.claims]}
                        )
                    },
                    {},
                )
            )
        ),
    ):
        assert "<script" not in text
        assert not re.search(r"(?<!\\)\]\(javascript", text) and not re.search(r"(?<!\\)\*bold", text)  # escaped


def test_findings_results_prints_and_writes_the_tables(tmp_path):
    res = CliRunner().invoke(app, ["findings", "--results", str(REPO / "results")], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "**By seed**" in res.output and "| all |" in res.output and "`markov-landscape`" in res.output
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- paper-scale:start -->\nold\n<!-- paper-scale:end -->\nb\n")
    res = CliRunner().invoke(
        app, ["findings", "--results", str(REPO / "results"), "--readme", str(readme), "--section", "paper-scale"]
    )
    assert res.exit_code == 0, res.output
    text = readme.read_text()
    assert "\nold\n" not in text and "| all |" in text and text.startswith("a\n") and text.endswith("b\n")
    # one source at a time, and a folder of records
    both = CliRunner().invoke(app, ["findings", str(tmp_path), "--results", str(REPO / "results")])
    assert both.exit_code == 2 and "one of them" in both.output
    empty = tmp_path / "empty"
    (empty / "paper").mkdir(parents=True)
    none = CliRunner().invoke(app, ["findings", "--results", str(empty)])
    assert none.exit_code == 2 and "holds no record" in none.output
    shutil.copy(PAPER / "markov-landscape.json", empty / "paper" / "markov-rank.json")
    wrong = CliRunner().invoke(app, ["findings", "--results", str(empty)])
    assert wrong.exit_code == 2 and "named for its experiment" in wrong.output
    assert json.loads((PAPER / "markov-landscape.json").read_text())["experiment"] == "markov-landscape"


def test_what_changed_between_two_results_folders_names_every_moved_group(tmp_path):
    """An earlier folder where one group held as paper and another failed: the table lists both moves with
    the reason now, a group that went, and nothing for groups that did not move."""
    from tdlab.pages.records import record_changes

    now, before = tmp_path / "now", tmp_path / "before"
    for d in (now, before):
        (d / "paper").mkdir(parents=True)
    doc = json.loads((PAPER / "topics-wv.json").read_text())
    (now / "paper" / "topics-wv.json").write_text(json.dumps(doc))
    assert record_changes(now, now).startswith("Nothing moved")
    old = json.loads(json.dumps(doc))
    moved, kind = old["claims"][0], old["claims"][1]
    was = moved["verdict"]
    moved["verdict"], moved["cause"] = ("fails", "decided") if was != "fails" else ("holds", "decided")
    kind["kind"] = "sanity"
    old["claims"].append({**old["claims"][2], "id": "gone-group"})
    (before / "paper" / "topics-wv.json").write_text(json.dumps(old))
    table = record_changes(now, before)
    lines = [ln for ln in table.splitlines() if ln.startswith("| paper")]
    assert len(lines) == 3
    assert f"`{moved['id']}`" in lines[0] and f"| paper {was} ({doc['claims'][0]['cause']}) |" in lines[0]
    assert f"`{kind['id']}` | sanity " in lines[1] and "`gone-group`" in lines[2] and lines[2].endswith("| — |  |")
    res = CliRunner().invoke(app, ["findings", "--results", str(now), "--before", str(before)], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "**What changed**" in res.output and "`gone-group`" in res.output


def _regenerated(page: Path, tmp_path: Path, *args: str) -> str:
    """``page`` as `tdlab findings --results results ARGS --into PAGE` rewrites it (on a copy)."""
    copy = tmp_path / page.name
    shutil.copy(page, copy)
    res = CliRunner().invoke(app, ["findings", "--results", str(REPO / "results"), *args, "--into", str(copy)])
    assert res.exit_code == 0, res.output
    return copy.read_text(encoding="utf-8")


def test_the_readme_and_findings_page_hold_the_tables_of_the_committed_records(tmp_path):
    """Generated, never typed: after a record is published, the commands in the failure message rewrite them."""
    readme, page = REPO / "README.md", REPO / "docs" / "findings.md"
    assert _regenerated(readme, tmp_path, "--per-paper", "--section", "seeds") == readme.read_text(encoding="utf-8"), (
        "regenerate: tdlab findings --results results --per-paper --into README.md --section seeds"
    )
    assert _regenerated(page, tmp_path, "--section", "paper-scale") == page.read_text(encoding="utf-8"), (
        "regenerate: tdlab findings --results results --into docs/findings.md --section paper-scale"
    )


def test_per_seed_tables_have_a_row_per_experiment_with_quick_and_the_seeds_settings():
    from tdlab.pages.docs_site import PAPERS
    from tdlab.pages.records import paper_tables

    pub = load_published(REPO / "results")
    exps = list(registry().values())
    text = paper_tables(pub, exps, {s.number: s.title for s in PAPERS})
    assert text.count("**Seed ") == len({e.paper[:3] for e in exps})
    rows = {r.split("|")[1].strip(" `"): r.split("|")[3:5] for r in text.splitlines() if r.startswith("| `")}
    assert set(rows) == {e.name for e in exps}
    name = next(iter(pub.paper))  # a published paper record: both columns filled from the records
    held = sum(g["verdict"] == "holds" for g in pub.paper[name].claims)
    assert rows[name][1].strip().startswith(f"{held}/{len(pub.paper[name].claims)}")
    missing = next(e.name for e in exps if e.name not in pub.paper)
    pub.quick.pop(missing, None)  # an experiment with no record of either profile: two dashes
    rows = {
        r.split("|")[1].strip(" `"): r.split("|")[3:5]
        for r in paper_tables(pub, exps, {}).splitlines()
        if r.startswith("| `")
    }
    assert [c.strip() for c in rows[missing]] == ["—", "—"]
    res = CliRunner().invoke(app, ["findings", str(REPO), "--per-paper"])
    assert res.exit_code == 2 and "--per-paper" in res.output


def test_the_overview_counts_every_record_of_each_profile_by_seed_with_a_total():
    from tdlab.pages.records import overview_table

    pub = load_published(REPO / "results")
    exps = list(registry().values())
    lines = overview_table(pub, exps).splitlines()
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert set(cells) == {e.paper[:3] for e in exps} | {"all"}
    total = cells["all"]
    assert total[0] == f"{len(pub.quick)} of {len(exps)}" and total[6] == f"{len(pub.paper)} of {len(exps)}"
    for first, recs in ((1, pub.quick), (7, pub.paper)):
        groups = [g for r in recs.values() for g in r.claims]
        assert [int(c) for c in total[first : first + 5]] == [
            *(sum(g["verdict"] == v for g in groups) for v in ("holds", "fails", "not resolved", "not evaluable")),
            len(groups),
        ]
        assert sum(int(cells[k][first + 4]) for k in cells if k != "all") == len(groups)


def test_what_settles_an_undecided_group_says_members_training_or_nothing_more_of_this_run():
    from tdlab.pages.records import what_settles

    rec = _record("topics-wv").model_copy(update={"members": 4})
    row = {
        "provenance": "paper",
        "verdict": "not resolved",
        "test": "value",
        "relation": "close",
        "expected": 0.0,
        "tolerance": 1.0,
        # centre 0.8, half-width 0.4: 0.2 from the boundary -> (0.4 / 0.2)^2 = 4x the members
        "interval": [0.4, 1.2],
    }
    spread = {"cause": "spread", "kind": "paper", "verdict": "not resolved", "rows": [row]}
    assert what_settles("topics-wv", rec, spread) == (
        "about 16 members for its nearest row (`tdlab run topics-wv --profile paper --seeds 16`), 16 for every row"
    )
    near = dict(row, interval=[0.99, 1.01])  # centred on its boundary
    assert "no member count" in what_settles("topics-wv", rec, {**spread, "rows": [row, near]})
    moving = {**spread, "cause": "still moving"}
    assert "`--set train.steps=" in what_settles("topics-wv", rec, moving, "train.steps")
    assert what_settles("topics-wv", rec, {**spread, "cause": "no paper rows"}).startswith("not by more of this run")
    # "no rows" with no seed row at all is the same; with seed rows that measured nothing, the setting did run
    assert "has no row at the seed's setting" in what_settles(
        "topics-wv", rec, {**spread, "cause": "no rows", "rows": []}
    )
    empty = {**spread, "verdict": "not evaluable", "cause": "no rows", "rows": [dict(row, interval=None)]}
    text = what_settles("topics-wv", rec, empty, "train.steps")
    assert "has no row at the seed's setting" not in text and "the seed's setting ran" in text
    # arms that did not train: a longer run, not more members, and not the seed's setting
    text = what_settles("topics-wv", rec, {**empty, "cause": "not trained"}, "train.steps")
    assert text.startswith("not by more members") and "did not train" in text and "`--set train.steps=" in text
    # a claim about reaching a stage is not a claim about convergence, and a longer run leaves the seed's setting
    stage = {**spread, "verdict": "not evaluable", "cause": "stage not reached"}
    text = what_settles("topics-wv", rec, stage, "train.steps")
    assert text.startswith("not by more members") and "`--set train.steps=" in text and "convergence" not in text
    assert "not the seed's" in text
    # a sign test on 4 members cannot reach p < 0.05 whatever they show (2 · 0.5^4 = 0.125); 6 can (0.031)
    sign = dict(row, test="compare", interval=[360.0, 760.0], cause="members", confidence=0.95)
    text = what_settles("topics-wv", rec, {**spread, "cause": "members", "rows": [sign]})
    assert text.startswith("at least 6 members (`tdlab run topics-wv --profile paper --seeds 6`): on 4 ")
    short = what_settles("topics-wv", rec, {**spread, "cause": "shorter than the seed's length"})
    assert short.startswith("training to the seed's length")


@pytest.mark.parametrize(
    ("other", "section"), [("results/replicates/seed1/quick", "replicates"), ("results/paper", "quick-vs-paper")]
)
def test_the_findings_page_holds_the_comparison_tables_of_the_committed_records(tmp_path, other, section):
    """The root-seed replicates' table (results/quick against results/replicates/seed1/quick) and quick's
    verdicts against the seed's settings' (results/quick against results/paper) are generated from the records."""
    page = REPO / "docs" / "findings.md"
    copy = tmp_path / page.name
    shutil.copy(page, copy)
    res = CliRunner().invoke(
        app,
        [
            "results",
            "compare",
            str(REPO / "results" / "quick"),
            str(REPO / other),
            "--into",
            str(copy),
            "--section",
            section,
        ],
    )
    assert res.exit_code == 0, res.output
    assert copy.read_text(encoding="utf-8") == page.read_text(encoding="utf-8"), (
        f"regenerate: tdlab results compare results/quick {other} --into docs/findings.md --section {section}"
    )


def test_the_findings_of_a_profiles_records_have_a_row_and_a_line_per_group_of_each():
    from pathlib import Path

    from tdlab.experiments.base import registry
    from tdlab.pages.records import records_markdown
    from tdlab.results import load_records

    folder = Path(__file__).resolve().parents[2] / "results" / "quick"
    text = records_markdown(folder, list(registry().values()))
    recs = load_records(folder)
    assert text.count("\n| `") == len(recs)  # one table row per record
    for rec in recs.values():
        assert f"results/quick/{rec.experiment}.json" in text
        assert all(f"`{g['id']}`" in text for g in rec.claims)
