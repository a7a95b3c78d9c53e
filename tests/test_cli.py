"""The ``tdlab`` command: bad input exits 2 naming the field and leaves nothing behind; a tiny real
run writes a complete run directory whose verdicts agree with theory and with its own metrics."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from rich.console import Console
from safetensors.torch import load_file
from scipy import stats
from typer.testing import CliRunner

import tdlab.cli as cli
from tdlab.experiments.base import registry
from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit
from tdlab.models.gpt import GPT
from tdlab.report.measurement_tables import format_cell
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import Trainer

TINY = [
    "--set",
    "train.steps=20",
    "--set",
    "train.seq_len=16",
    "--set",
    "train.eval_every=10",
    "--set",
    "train.eval_batches=1",
    "--seeds",
    "2",
    "--quiet",
]
ARMS = ["sec2/standard", "sec2/local-to-global", "gpt2/standard", "gpt2/local-to-global"]
# One printed line per claim group: "VERDICT  group-id: numbers".
VERDICT = re.compile(r"^(HOLDS|FAILS|NOT RESOLVED|NOT EVALUABLE)\s+(\S+): ")
GROUPS = [
    "proposed-init-ends-at-global-minimum",
    "standard-init-ends-at-theory-limit",
    "standard-init-leaves-plateau-later",
]


@pytest.fixture
def invoke(monkeypatch):
    """``invoke(*args) -> Result`` through CliRunner, with wide consoles so tables do not wrap."""
    monkeypatch.setattr(cli, "out_console", Console(width=400))
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, width=400))
    runner = CliRunner()

    def go(*args):
        return runner.invoke(cli.app, [str(a) for a in args])

    return go


def _h(x):
    return -x * math.log(x) - (1 - x) * math.log(1 - x)


# --- bad input -------------------------------------------------------------------------------------


def test_list_shows_markov_init(invoke):
    r = invoke("list")
    assert r.exit_code == 0
    row = next(line for line in r.output.splitlines() if "markov-init" in line)
    assert "000 Local to Global" in row and "Fig. 4" in row and "quick" in row


def test_unknown_experiment_exits_2_lists_allowed_and_writes_nothing(invoke, runs_dir):
    r = invoke("run", "no-such-exp", "--out", runs_dir, "--quiet")
    assert r.exit_code == 2
    assert "experiment" in r.output and "no-such-exp" in r.output
    assert "allowed" in r.output and "markov-init" in r.output
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


@pytest.mark.parametrize(
    "sets, field, words",
    [
        (["task.p=1.5"], "task.p", "less than 1"),
        (["train.foo=1"], "train.foo", "unknown field"),
        (["train.steps=many"], "train.steps", "integer"),
        (["archs=[sec2, rnn]"], "archs.1", "sec2"),
        (["task.p"], "task.p", "KEY=VALUE"),
    ],
)
def test_bad_set_exits_2_naming_the_field(invoke, runs_dir, sets, field, words):
    args = ["run", "markov-init", "--out", runs_dir, "--quiet"]
    for s in sets:
        args += ["--set", s]
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert field in r.output and words in r.output
    assert "Traceback" not in r.output
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_bad_seeds_profile_and_device_exit_2(invoke, runs_dir, monkeypatch):
    r = invoke("run", "markov-init", "--seeds", "0", "--out", runs_dir)
    assert r.exit_code == 2 and "members" in r.output
    r = invoke("run", "markov-init", "--profile", "huge", "--out", runs_dir)
    assert r.exit_code == 2 and "profile" in r.output and "quick" in r.output
    r = invoke("run", "markov-init", "--device", "tpu", "--out", runs_dir)
    assert r.exit_code == 2 and "device" in r.output and "cpu" in r.output
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = invoke("run", "markov-init", "--device", "cuda", "--out", runs_dir, *TINY)
    assert r.exit_code == 2 and "device" in r.output and "cuda" in r.output
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_report_on_missing_or_corrupt_directory_exits_2(invoke, tmp_path):
    r = invoke("report", tmp_path / "nope")
    assert r.exit_code == 2 and "nope" in r.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.yaml").write_text("experiment: [unclosed")
    (bad / "metrics.parquet").write_bytes(b"not parquet")
    r = invoke("report", bad)
    assert r.exit_code == 2 and "config.yaml" in r.output
    (bad / "config.yaml").write_text(yaml.safe_dump({"experiment": "markov-init", "profile": "quick", "config": {}}))
    r = invoke("report", bad)
    assert r.exit_code == 2 and "metrics.parquet" in r.output
    (bad / "config.yaml").write_text(yaml.safe_dump({"experiment": "markov-init", "config": {"task": {"p": 7}}}))
    r = invoke("report", bad)
    assert r.exit_code == 2 and "task" in r.output
    assert "Traceback" not in r.output


# --- a tiny real run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``tdlab run markov-init`` in a real subprocess: (completed process, out folder, run dir)."""
    out = tmp_path_factory.mktemp("cli") / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "COLUMNS": "300"}
    proc = subprocess.run(
        [sys.executable, "-m", "tdlab.cli", "run", "markov-init", *TINY, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    dirs = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")] if out.exists() else []
    return proc, out, dirs


def test_tiny_run_exits_0_and_prints_a_verdict_per_claim_group(tiny_run):
    proc, out, dirs = tiny_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = [m for m in (VERDICT.match(line.strip()) for line in proc.stdout.splitlines()) if m]
    assert [m.group(2) for m in verdicts] == GROUPS
    assert len(dirs) == 1 and not any(p.name.startswith(".staging") for p in out.iterdir())
    assert str(dirs[0]) in proc.stdout


def test_tiny_run_directory_is_complete_and_consistent(tiny_run):
    proc, _out, dirs = tiny_run
    assert proc.returncode == 0, proc.stderr
    run = dirs[0]
    conf = yaml.safe_load((run / "config.yaml").read_text())
    assert conf["experiment"] == "markov-init" and conf["profile"] == "quick"
    assert conf["config"]["train"]["steps"] == 20 and conf["config"]["members"] == 2

    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.columns) == ["arm", "step", "member", "name", "value"]
    assert sorted(df.arm.unique()) == sorted(ARMS)
    test = df[df.name == "test_loss"]
    assert sorted(test.step.unique()) == [0, 10, 20] and sorted(test.member.unique()) == [0, 1]
    assert test.value.map(math.isfinite).all()
    # A sigma = 0.02 standard init of the Sec. 2 model (no LayerNorm) predicts ~(1/2, 1/2): step-0 loss ln 2.
    start = test[(test.step == 0) & (test.arm == "sec2/standard")].value
    assert (start - math.log(2)).abs().max() < 5e-3

    arrays = sorted(p.name for p in (run / "arrays").glob("*.safetensors"))
    want = [f"{a.replace('/', '__')}{suffix}.safetensors" for a in ARMS for suffix in ("", "@init")]
    assert arrays == sorted(want)  # final and initial parameters of every arm
    for a in arrays:
        assert all(t.shape[0] == 2 for t in load_file(str(run / "arrays" / a)).values())

    png = run / "figures" / "fig4_test_loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    html = (run / "report.html").read_text()
    assert "fig4_test_loss.png" in html and "Paper claims" in html

    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "done" and s["claims_total"] == 3 and [g["id"] for g in s["claims"]] == GROUPS
    assert s["claims_total"] == sum(s[f"claims_{k}"] for k in ("held", "failed", "not_resolved", "not_evaluable"))
    p, q = conf["config"]["task"]["p"], conf["config"]["task"]["q"]
    assert p + q > 1
    for g in s["claims"][:2]:  # end-state groups: a row per arch, on the gap to a reference predictor
        for c in g["rows"]:
            arch = c["id"].rsplit("/", 1)[1]
            (arm,) = c["arms"]
            assert arm.startswith(arch)
            ref = "unigram" if arm.endswith("/standard") else "bayes"  # p + q > 1: H(pi) is the standard init's limit
            final = test[(test.arm == arm) & (test.step == 20)].sort_values("member").value.to_numpy()
            r = (
                df[(df.arm == arm) & (df.name == f"test_loss@{ref}") & (df.step == 20)]
                .sort_values("member")
                .value.to_numpy()
            )
            assert c["expected"] == 0.0 and c["measured"] == pytest.approx((final - r).tolist(), abs=1e-12)
            # the interval is the Student-t interval of the members' mean (scipy, independently)
            lo, hi = stats.t.interval(0.95, len(final) - 1, loc=np.mean(final - r), scale=stats.sem(final - r))
            assert c["interval"] == pytest.approx([lo, hi], rel=1e-9)
            inside = -c["tolerance"] <= lo and hi <= c["tolerance"]
            outside = hi < -c["tolerance"] or lo > c["tolerance"]
            if not c["reason"]:  # no gate, no drift: the verdict follows from the interval alone
                assert c["verdict"] == ("holds" if inside else "fails" if outside else "not resolved")
    # Printed verdicts agree with summary.json.
    printed = {m.group(2): m.group(1) for m in map(VERDICT.match, map(str.strip, proc.stdout.splitlines())) if m}
    assert printed == {g["id"]: g["verdict"].upper() for g in s["claims"]}


def test_tiny_run_arrays_equal_a_member_trained_alone(tiny_run):
    # The stored member 1 of sec2/local-to-global equals that model trained alone with member 1's seed.
    proc, _out, dirs = tiny_run
    assert proc.returncode == 0, proc.stderr
    run = dirs[0]
    exp = MarkovInit()
    cfg = exp.Config.model_validate(yaml.safe_load((run / "config.yaml").read_text())["config"])
    mcfg = cfg.arm_model("sec2", "local-to-global")
    alone = Trainer(cfg.train, progress=False).fit(
        lambda s: GPT(mcfg, s), [member_seeds(cfg.seed, 2)[1]], MarkovChain(cfg.task.p, cfg.task.q)
    )
    stored = load_file(str(run / "arrays" / "sec2__local-to-global.safetensors"))
    for k, v in alone.states[0].items():
        torch.testing.assert_close(stored[k][1], v, rtol=1e-5, atol=1e-6)


def test_report_rebuilds_the_same_claims(tiny_run, invoke):
    proc, _out, dirs = tiny_run
    assert proc.returncode == 0, proc.stderr
    run = dirs[0]
    before = json.loads((run / "summary.json").read_text())
    (run / "report.html").unlink()
    r = invoke("report", run)
    assert r.exit_code == 0, r.output
    after = json.loads((run / "summary.json").read_text())
    keys = ("id", "expected", "measured", "verdict", "tolerance", "interval", "reason")
    rows = lambda s: [{k: c[k] for k in keys} for g in s["claims"] for c in g["rows"]]  # noqa: E731
    assert rows(after) == rows(before) and after["arms"] == before["arms"]
    assert (run / "report.html").is_file()
    assert sum(1 for line in r.output.splitlines() if VERDICT.match(line.strip())) == len(GROUPS)


def test_the_printed_summary_shows_the_arms_measurements_as_a_table(tiny_run):
    proc, _out, dirs = tiny_run
    assert proc.returncode == 0, proc.stderr
    values = json.loads((dirs[0] / "summary.json").read_text())["measurements"]
    lines = proc.stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.strip() == "measurements")
    assert "final_test_loss" in lines[top + 1]
    for arm in ("sec2/standard", "sec2/local-to-global"):
        row = next(line for line in lines[top:] if line.split() and line.split()[0] == arm)
        first = values[arm]["final_test_loss"][0]
        assert f"{first:.3g}" in row  # the member values, as the report's table writes them
        assert format_cell(values[arm]["final_test_loss"]) in row  # whole, on the arm's line (a pipe: no folding)


def test_measurements_printed_to_a_pipe_keep_each_row_on_one_line(monkeypatch):
    import io

    wide = {f"arm-{i}": {f"quantity_{j}": [0.123456 * (i + j), 0.654321, 0.5] for j in range(8)} for i in range(2)}
    for terminal in (False, True):
        console = Console(file=io.StringIO(), width=80, force_terminal=terminal, color_system=None)
        monkeypatch.setattr(cli, "out_console", console)
        cli._print_measurements(wide)
        text = console.file.getvalue()
        rows = [line for line in text.splitlines() if line.lstrip().startswith("arm-")]
        if not terminal:  # every cell whole on its arm's line
            assert len(rows) == 2 and all("0.654/0.5" in r for r in rows) and "0.123/0.654/0.5" in rows[0]
        else:  # a terminal keeps its 80 columns
            assert max(len(line) for line in text.splitlines()) <= 80


def test_runs_lists_the_run(tiny_run, invoke):
    proc, out, dirs = tiny_run
    assert proc.returncode == 0, proc.stderr
    r = invoke("runs", "--out", out)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if dirs[0].name in line)
    s = json.loads((dirs[0] / "summary.json").read_text())
    assert "markov-init" in row and "done" in row and f"{s['claims_held']}/{s['claims_total']}" in row


# --- one line, exit 2 ---------------------------------------------------------------------


def _one_error_line(r) -> str:
    """The single stderr line of a refused command (and no traceback anywhere)."""
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output and "╭" not in r.output
    return lines[0]


@pytest.mark.parametrize(
    "args, named",
    [
        (["run", "markov-init", "--seeds", "abc"], "'--seeds'"),
        (["sweep", "spec.yaml", "--workers", "0"], "'--workers'"),
        (["run", "markov-init", "--no-such-option"], "--no-such-option"),
        (["report"], "run_dir"),
        (["no-such-command"], "no-such-command"),
        (["runs", "--where"], "--where"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(invoke, args, named):
    """typer draws a multi-line box for these; tdlab prints one line naming the option."""
    assert named in _one_error_line(invoke(*args))


def test_runs_of_a_missing_folder_exits_2_and_makes_nothing(invoke, tmp_path):
    missing = tmp_path / "no" / "runs"
    line = _one_error_line(invoke("runs", "--out", str(missing)))
    assert "--out" in line and "does not exist" in line
    assert not (tmp_path / "no").exists()


def test_bare_tdlab_still_prints_the_help(invoke):
    r = invoke()
    assert "Usage" in r.stdout and "run" in r.stdout and r.stderr == ""


def test_messages_that_look_like_markup_are_printed_as_they_are(invoke, runs_dir):
    line = _one_error_line(invoke("run", "markov-init", "--set", "[/]=1", "--set", "[bold]x=2", "--out", runs_dir))
    assert "[/]: unknown field" in line
    assert not runs_dir.exists()


@pytest.mark.parametrize("kind", ["file", "under-a-file", "dev-null", "proc"])
def test_out_that_cannot_hold_run_directories_exits_2_before_writing(invoke, tmp_path, kind):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    out = {"file": a_file, "under-a-file": a_file / "runs", "dev-null": "/dev/null", "proc": "/proc/tdlab-runs"}[kind]
    line = _one_error_line(invoke("run", "markov-init", *TINY, "--out", out))
    assert f"--out '{out}'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and a_file.read_text() == "x"


@pytest.mark.parametrize(
    "sets, named",
    [
        (["train.steps=on"], "train.steps"),
        (["model.init_e=.nan"], "model.init_e"),
        (["train.chunk=0"], "train.chunk"),
        (["train.chunk=-1"], "train.chunk"),
        (["train.batch=1000000", "train.seq_len=65536"], "train.batch"),
        (["model.arch=gpt2", "model.vocab=3"], "archs="),
        (["x=" + "[" * 3 + ", ".join(["&a [1, 2]"] + ["*a"] * 9) + "]" * 3], "anchors and aliases"),
        (["archs=[sec2"], "cannot parse"),
    ],
)
def test_the_issues_bad_inputs_exit_2_with_one_line(invoke, runs_dir, sets, named):
    args = ["run", "markov-init", "--quiet", "--out", runs_dir]
    for s in sets:
        args += ["--set", s]
    line = _one_error_line(invoke(*args))
    assert named in line and len(line) < 2000
    assert not runs_dir.exists()


# --- newcomer friction and targets inside run directories ---------------------------------------------


def test_list_never_cuts_a_name_at_80_columns(monkeypatch):
    monkeypatch.setattr(cli, "out_console", Console(width=80))
    res = CliRunner().invoke(cli.app, ["list"])
    assert res.exit_code == 0
    assert "…" not in res.stdout
    for name in registry():
        assert name in res.stdout, name


@pytest.mark.parametrize("name", sorted(registry()))
def test_run_name_help_lists_every_config_key_with_type_default_and_meaning(monkeypatch, name):
    from tdlab.config_fields import config_fields
    from tdlab.experiments.base import get

    monkeypatch.setattr(cli, "out_console", Console(width=300))
    exp = get(name)
    res = CliRunner().invoke(cli.app, ["run", name, "--help"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert f"{exp.name}: seed {exp.paper}, {exp.figure}" in out and "--set" in out
    lines = out.splitlines()
    for f in config_fields(exp.Config):
        (line,) = [ln for ln in lines if ln.startswith(f"  {f.key}  ")]
        assert f.type_text in line and ("= " in line or "quick " in line), line
        if f.doc:
            assert f.doc.split()[0] in out


def test_run_help_shows_a_field_comment_and_every_profiles_defaults(monkeypatch):
    monkeypatch.setattr(cli, "out_console", Console(width=300))
    out = CliRunner().invoke(cli.app, ["run", "icl-avdigits", "--help"]).stdout
    assert "  data.n_train  int in [10, 1000000]  quick 1500, standard 1500, paper 60000" in out
    assert "  schedule.epochs  int in [1, 10000]  quick 5, standard 40, paper 100" in out
    assert "App. I.1: 60,000 training examples" in out
    bare = CliRunner().invoke(cli.app, ["run", "--help"]).stdout  # no name: the command's own help only
    assert "data.n_train" not in bare and "NAME --help" in bare


def test_run_help_shows_the_papers_setting_of_each_key_from_the_manifest(monkeypatch):
    """Under each key the paper states, its value and where (the experiment's manifest, declared once); under a key
    the paper is silent on, that it is ours."""
    monkeypatch.setattr(cli, "out_console", Console(width=300))
    out = CliRunner().invoke(cli.app, ["run", "markov-rank", "--help"]).stdout
    lines = out.splitlines()

    def under(key: str) -> list[str]:
        i = next(i for i, line in enumerate(lines) if line.startswith(f"  {key}  "))
        return [line.strip() for line in lines[i + 1 : i + 4]]

    assert "the paper: 0.2 (App. A.3.1 (Fig. 3))" in under("task.p")
    assert "the paper: 1024 (App. A.3.1 (N = 1024))" in under("train.seq_len")
    assert "the paper: silent (ours)" in under("train.eval_every")
    assert out.count("the paper: 0.2 (App. A.3.1 (Fig. 3))") == 1  # once, under its own key


def test_no_command_writes_into_a_run_directory(invoke, tmp_path):
    from tdlab.runs import RunWriter

    with RunWriter(tmp_path / "runs", "markov-init", run_id="r") as w:
        w.write_config({"experiment": "markov-init"})
        run = w.finish()
    (tmp_path / "spec.yaml").write_text("name: s\nexperiment: markov-init\npoints: [{task.p: 0.3}]\n")
    before = sorted(p.name for p in run.path.rglob("*"))
    for args in (
        ["run", "markov-init", *TINY, "--out", run.path],
        ["run", "markov-init", *TINY, "--out", run.path / "sub"],
        ["sweep", tmp_path / "spec.yaml", "--out", run.path],
        ["runs", "--out", run.path],
        ["atlas", "run", "markov-init", "--runs", run.path / "x"],
    ):
        res = invoke(*args)
        assert res.exit_code == 2 and "read-only to every command but" in _one_error_line(res), (args, res.output)
    assert sorted(p.name for p in run.path.rglob("*")) == before


def test_atlas_run_names_its_own_option(invoke, tmp_path):
    (tmp_path / "file").write_text("x")
    line = _one_error_line(invoke("atlas", "run", "markov-init", "--runs", tmp_path / "file"))
    assert line.startswith("error: --runs ") and "--out" not in line


@pytest.mark.parametrize(
    "share, args, want",
    [
        (None, [], "cores"),
        ("1", [], 1),
        (None, ["--lanes", "3"], 3),
        ("1", ["--lanes", "2"], 2),
        (None, ["--threads", "1"], 1),
    ],
)
def test_run_takes_its_lanes_from_lanes_else_from_its_share_of_the_cores(
    monkeypatch, invoke, runs_dir, tmp_path, share, args, want
):
    from tdlab import runner
    from tdlab.config import ConfigError
    from tdlab.cores import usable_cores
    from tdlab.train import lanes

    monkeypatch.setenv("TDLAB_CORES_DIR", str(tmp_path / "cores"))  # no other tdlab process holds a core
    want = usable_cores() if want == "cores" else want

    seen = []

    def execute(*a, **kw):
        seen.append(lanes.limit())
        raise ConfigError("stopped by the test")

    monkeypatch.setattr(runner, "execute", execute)
    if share is not None:
        monkeypatch.setenv("TDLAB_THREADS", share)
    else:  # outside a sweep (the suite pins one count for its own runs: conftest)
        monkeypatch.delenv("TDLAB_THREADS", raising=False)
    threads = torch.get_num_threads()
    try:
        r = invoke("run", "markov-init", "--out", runs_dir, "--quiet", *args)
    finally:
        torch.set_num_threads(threads)  # TDLAB_THREADS sets them for the process
    assert r.exit_code == 2 and "stopped by the test" in r.output and seen == [want]


def test_run_refuses_zero_lanes(invoke, runs_dir):
    r = invoke("run", "markov-init", "--out", runs_dir, "--quiet", "--lanes", "0")
    assert r.exit_code == 2 and "--lanes" in r.output and not runs_dir.exists()


def test_version_and_a_near_miss_experiment_name(invoke):
    import tdlab

    v = invoke("--version")
    assert v.exit_code == 0 and v.output.startswith(f"tdlab {tdlab.__version__}")
    miss = invoke("run", "markov-int")
    assert miss.exit_code == 2 and "did you mean markov-init?" in miss.output


def test_a_set_of_an_unknown_field_names_the_nearest_one(invoke, runs_dir):
    r = invoke("run", "markov-init", "--out", runs_dir, "--set", "train.step=3")
    assert r.exit_code == 2 and "did you mean train.steps?" in r.output and not runs_dir.exists()
    r = invoke("run", "markov-init", "--out", runs_dir, "--set", "trian.steps=3")
    assert r.exit_code == 2 and "did you mean train?" in r.output


def test_runs_lists_an_interrupted_run_with_the_command_that_resumes_it(invoke, runs_dir):
    stopped = invoke(
        "run", "markov-init", "--out", runs_dir, "--run-id", "halfway", "--until", "1s", "--quiet",
        "--set", "train.steps=3000", "--set", "train.seq_len=32",
    )  # fmt: skip
    assert stopped.exit_code == 3, stopped.output
    listed = invoke("runs", "--out", runs_dir)
    assert listed.exit_code == 0 and "0 run(s)" in listed.output
    assert "1 interrupted run(s)" in listed.output and f"tdlab run --resume {runs_dir / 'halfway'}" in listed.output


def test_an_experiments_help_says_what_it_is(invoke):
    from tdlab.experiments.base import get

    r = invoke("run", "markov-init", "--help")
    assert r.exit_code == 0 and get("markov-init").description.split()[0] in r.output


def test_the_summary_prints_brackets_in_notes_and_reasons_as_written(monkeypatch, tmp_path):
    console = Console(width=300)
    monkeypatch.setattr(cli, "out_console", console)
    summary = {
        "experiment": "x",
        "figure": "Fig. [1]",
        "status": "done",
        "arms": {"a[0]": {"trained": False, "status": "not trained", "reasons": ["loss [nan] at step 3"]}},
        "claims": [
            {"id": "g", "verdict": "fails", "rows": [], "counts": {"fails": 0}, "reason": "E[x] is [bold]not[/bold] 0"}
        ],
        "notes": ["MSE with E[y²] = 1 and [red]x[/red]"],
    }
    with console.capture() as out:
        cli._print_summary(summary, tmp_path)
    text = out.get()
    for written in (
        "Fig. [1]",
        "a[0]",
        "loss [nan] at step 3",
        "E[x] is [bold]not[/bold] 0",
        "E[y²] = 1 and [red]x[/red]",
    ):
        assert written in text, written
