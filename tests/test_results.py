"""Published records: written with every run, published to results/PROFILE/NAME.json, checked on load,
re-judged from their stored measurements (the same verdicts; a changed measurement moves them), and every
committed record re-judges to the verdicts it stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.records import RECORD_NAME, Record, RecordError, record_text
from tdlab.results import load_record, load_records, publish, record_of_run, rejudge

REPO = Path(__file__).resolve().parents[1]
SETS = ["train.steps=60", "train.seq_len=16", "train.eval_every=10", "train.eval_batches=1", "archs=[sec2]"]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("records") / "runs"
    args = ["run", "markov-init", "--seeds", "2", "--quiet", "--run-id", "r", "--out", str(out)]
    for s in SETS:
        args += ["--set", s]
    res = _cli(*args)
    assert res.exit_code == 0, res.output
    return out / "r"


def _verdicts(groups):
    return {g["id"]: g["verdict"] for g in groups}


def test_every_run_writes_a_record_that_rejudges_to_its_own_verdicts(run_dir):
    rec = Record.model_validate(json.loads((run_dir / RECORD_NAME).read_text()))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rec.experiment == "markov-init" and rec.profile == "quick" and rec.members == 2
    assert _verdicts(rec.claims) == _verdicts(summary["claims"]) and rec.claims
    assert rec.measured is not None and rec.measured["rows"]
    assert {g.id: g.verdict for g in rejudge(rec)} == _verdicts(rec.claims + rec.sanity)


def test_a_changed_measurement_moves_the_rejudged_verdict(run_dir):
    rec = Record.model_validate(json.loads((run_dir / RECORD_NAME).read_text()))
    doc = rec.model_dump()
    # Plant a final loss 5 nats from the theory limit, the same in every member and no longer moving, in
    # every row of the claim that the standard init ends at it: the claim cannot hold on those numbers.
    claim = "standard-init-ends-at-theory-limit"
    assert claim in doc["measured"]["rows"], sorted(doc["measured"]["rows"])
    before = {g.id: g.verdict for g in rejudge(rec)}[claim]
    for row in doc["measured"]["rows"][claim]:
        row["measured"]["values"] = [row["measured"]["values"][0] + 5.0] * len(row["measured"]["values"])
        row["measured"]["drift"] = 0.0
    after = {g.id: g.verdict for g in rejudge(Record.model_validate(doc))}[claim]
    assert before != "fails" and after == "fails"


def test_publish_writes_profile_and_name_and_the_cli_checks_them(run_dir, tmp_path):
    res = tmp_path / "results"
    [path] = publish([run_dir], res)
    assert path == res / "quick" / "markov-init.json"
    assert (
        load_record(path).config_hash
        == Record.model_validate(json.loads((run_dir / RECORD_NAME).read_text())).config_hash
    )
    assert set(load_records(res / "quick")) == {"markov-init"}
    ok = _cli("results", "check", str(res / "quick"))
    assert ok.exit_code == 0 and "1 records" in ok.output and "0 groups" in ok.output, ok.output
    # a run with --set overrides is not the profile's config: named (not a verdict: exit 0)
    assert "1 not at their profile's current config" in ok.output and "markov-init; run them again" in ok.output
    # A record whose stored verdict the current rules would not give is named, exit 1.
    doc = json.loads(path.read_text())
    g = doc["claims"][0]
    g["verdict"] = "fails" if g["verdict"] != "fails" else "holds"
    path.write_text(json.dumps(doc))
    moved = _cli("results", "check", str(res / "quick"))
    assert moved.exit_code == 1 and g["id"] in moved.output
    fixed = _cli("results", "check", str(res / "quick"), "--write")
    assert fixed.exit_code == 0 and "1 records rewritten" in fixed.output, fixed.output
    assert _cli("results", "check", str(res / "quick")).exit_code == 0


@pytest.mark.parametrize("option", ["--to", "--results"])
def test_the_cli_publishes_into_the_folder_named_by_to_or_results(run_dir, tmp_path, option):
    res = tmp_path / "published"
    out = _cli("results", "publish", str(run_dir), option, str(res))
    assert out.exit_code == 0, out.output
    assert set(load_records(res / "quick")) == {"markov-init"}


def test_a_run_without_a_record_is_analysed_again(run_dir, tmp_path):
    import shutil

    copy_dir = tmp_path / "old"
    shutil.copytree(run_dir, copy_dir)
    (copy_dir / RECORD_NAME).unlink()
    doc = record_of_run(copy_dir, commit="abcdef1")
    own = json.loads((run_dir / RECORD_NAME).read_text())
    assert doc["commit"] == "abcdef1"
    assert _verdicts(doc["claims"]) == _verdicts(own["claims"]) and doc["measured"] == own["measured"]


def test_records_must_name_a_known_experiment_and_be_named_for_it(run_dir, tmp_path):
    doc = json.loads((run_dir / RECORD_NAME).read_text())
    f = tmp_path / "markov-rank.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(RecordError, match="named for its experiment"):
        load_record(f)
    g = tmp_path / "nope.json"
    g.write_text(json.dumps({**doc, "experiment": "nope"}))
    with pytest.raises(RecordError, match="not one tdlab has"):
        load_record(g)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordError, match="not a JSON record"):
        load_record(tmp_path / "bad.json")


def _assert_rejudges_to_its_verdicts(rec: Record, label: str) -> None:
    if rec.measured is None:
        return
    again = {g.id: (g.kind, g.verdict, g.cause) for g in rejudge(rec)}
    stored = {g["id"]: (g["kind"], g["verdict"], g["cause"]) for g in rec.claims + rec.sanity}
    assert again == stored, f"{label}: re-judged {again} vs stored {stored}"


@pytest.mark.parametrize("profile", ["paper", "quick", "standard"])
def test_every_committed_record_loads_and_rejudges_to_its_stored_verdicts(profile):
    """The records under results/ are the source of every published table: each must still be what the
    current claims layer says of its measurements (re-publish the records when a rule changes)."""
    records = load_records(REPO / "results" / profile)
    for name, rec in records.items():
        _assert_rejudges_to_its_verdicts(rec, f"{profile}/{name}")
    if profile == "paper":
        assert records, "results/paper holds the records of the seeds' settings"


@pytest.mark.parametrize("profile", ["paper", "quick", "standard"])
def test_every_committed_record_is_its_profile_as_the_code_defines_it(profile):
    """A profile changed after its record was published (members raised, a length changed) leaves a record
    of a run nobody can make any more: the record must be made again (tdlab results check names it)."""
    from tdlab.results import profile_config_hash

    for name, rec in load_records(REPO / "results" / profile).items():
        assert rec.config_hash == profile_config_hash(name, profile), (
            f"{profile}/{name}: made at a config its profile no longer has; run it again and publish"
        )


def test_every_replicate_record_is_its_profile_at_another_root_seed_and_rejudges_to_its_verdicts():
    """results/replicates/seedN/PROFILE/NAME.json: the same profile run from root seed N (`tdlab batch --profile
    quick --set seed=N --results results/replicates/seedN`), compared with results/PROFILE by `tdlab results
    compare`; each must be that profile at that seed as the code defines it, and judged as the rules judge."""
    from tdlab.results import profile_config_hash

    folders = sorted((REPO / "results" / "replicates").glob("seed*/*"))
    for folder in folders:
        for name, rec in load_records(folder).items():
            assert folder.parent.name == f"seed{rec.seed}" and folder.name == rec.profile, f"{folder}/{name}"
            assert rec.config_hash == profile_config_hash(name, rec.profile, [f"seed={rec.seed}"]), (
                f"{folder}/{name}: not the {rec.profile} profile at seed {rec.seed} as the code defines it"
            )
            _assert_rejudges_to_its_verdicts(rec, f"{folder}/{name}")


def test_a_recorded_paper_run_reproduces_its_numbers(tmp_path):
    """The committed record of topics-landscape at the seed's settings (a CPU-sized closed form), run again
    from its command: every measured value of every claim row is the recorded one."""
    path = REPO / "results" / "paper" / "topics-landscape.json"
    if not path.is_file():
        pytest.skip("no committed record of topics-landscape at the seed's settings")
    rec = load_record(path)
    res = _cli(
        "run",
        "topics-landscape",
        "--profile",
        "paper",
        "--seed",
        str(rec.seed),
        "--quiet",
        "--out",
        str(tmp_path),
        "--run-id",
        "again",
    )
    assert res.exit_code == 0, res.output
    again = Record.model_validate(json.loads((tmp_path / "again" / RECORD_NAME).read_text()))
    assert again.config_hash == rec.config_hash and again.members == rec.members
    assert _verdicts(again.claims + again.sanity) == _verdicts(rec.claims + rec.sanity)
    for claim, rows in rec.measured["rows"].items():
        for r, a in zip(rows, again.measured["rows"][claim], strict=True):
            assert r["key"] == a["key"]
            assert a["measured"]["values"] == pytest.approx(
                r["measured"]["values"], rel=1e-9, abs=1e-12, nan_ok=True
            ), f"{claim}/{r['key']}"


def test_a_nan_measurement_survives_publishing_and_rejudges(run_dir, tmp_path):
    """NaN (a member with no value) is kept as NaN through record.json, publish and re-judging, never turned
    into null (pydantic's JSON mode would)."""
    import math
    import shutil

    copy_dir = tmp_path / "nan"
    shutil.copytree(run_dir, copy_dir)
    doc = json.loads((copy_dir / RECORD_NAME).read_text())
    claim = next(iter(doc["measured"]["rows"]))
    doc["measured"]["rows"][claim][0]["measured"]["values"][0] = float("nan")
    (copy_dir / RECORD_NAME).write_text(record_text(doc))
    [path] = publish([copy_dir], tmp_path / "results")
    rec = load_record(path)
    assert math.isnan(rec.measured["rows"][claim][0]["measured"]["values"][0])
    assert {g.id for g in rejudge(rec)} == {g["id"] for g in rec.claims + rec.sanity}


def test_results_check_takes_a_replicate_at_its_own_root_seed_for_its_profile(tmp_path):
    """A record of the quick profile at root seed 1 is that profile (not a record to run again); the same
    record claiming seed 0 is not."""
    src = REPO / "results" / "replicates" / "seed1" / "quick" / "markov-landscape.json"
    if not src.is_file():
        pytest.skip("no committed replicate of markov-landscape")
    folder = tmp_path / "seed1" / "quick"
    folder.mkdir(parents=True)
    (folder / src.name).write_text(src.read_text())
    ok = _cli("results", "check", str(folder))
    assert ok.exit_code == 0 and "not at their profile" not in ok.output, ok.output
    doc = json.loads(src.read_text())
    doc["seed"] = 0  # its config still says seed 1: not the profile at the seed it claims
    (folder / src.name).write_text(json.dumps(doc))
    off = _cli("results", "check", str(folder))
    assert "1 not at their profile's current config" in off.output, off.output


def test_results_check_write_rewrites_the_records_of_the_folder_it_checks(tmp_path):
    """A replicate folder's record (profile quick) is rewritten where it lies, not into a `quick/` folder beside
    the folder that holds it."""
    src = REPO / "results" / "quick" / "markov-landscape.json"
    folder = tmp_path / "seed1" / "quick"
    folder.mkdir(parents=True)
    doc = json.loads(src.read_text())
    doc["claims"][0]["verdict"] = "fails"  # a stored verdict the current rules would move
    (folder / src.name).write_text(json.dumps(doc))
    res = _cli("results", "check", str(folder), "--write")
    assert res.exit_code == 0, res.output
    assert json.loads((folder / src.name).read_text())["claims"][0]["verdict"] != "fails"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["markov-landscape.json", "quick", "seed1"]
