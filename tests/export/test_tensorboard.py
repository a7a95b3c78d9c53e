"""A run's metrics as TensorBoard scalars: ``tdlab export RUN --to tensorboard`` after the fact and
``tdlab run NAME --tensorboard DIR`` live. Every ``(arm, member, name, step, value)`` of
``metrics.parquet`` is read back from the event files with TensorBoard's own reader (float32);
live, the scalars are in the event files while the run trains; bad folders are one line, exit 2,
nothing written."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import tdlab.cli as cli
from tdlab.export.tensorboard import TensorBoardScalars, export_run, read_scalars, tag
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.linear_attention import LCA
from tdlab.run_context import RunContext
from tdlab.runs import Run, RunWriter
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.train.live import arm_stream, streaming_to
from tdlab.train.regression import RegressionConfig, RegressionTrainer
from tdlab.train.trainer import TrainConfig, Trainer

TINY = [
    "--seeds",
    "2",
    "--set",
    "train.steps=20",
    "--set",
    "train.seq_len=16",
    "--set",
    "train.eval_every=5",
    "--set",
    "archs=[sec2]",
    "--quiet",
]


def _invoke(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real `markov-init` run (2 members, 20 steps, evaluated every 5) with --tensorboard: (run dir, live folder)."""
    base = tmp_path_factory.mktemp("tensorboard")
    res = _invoke("run", "markov-init", *TINY, "--run-id", "r", "--out", base / "runs", "--tensorboard", base / "live")
    assert res.exit_code == 0, res.output
    return base / "runs" / "r", base / "live"


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, width=400))


def _expected(df):
    """``{(member, tag, step): value}`` of a metrics table."""
    return {
        (int(m), tag(a, n), int(s)): float(v)
        for a, s, m, n, v in zip(df["arm"], df["step"], df["member"], df["name"], df["value"], strict=True)
    }


def _assert_round_trip(folder, df):
    got = read_scalars(folder)
    keys = list(zip(got["member"], got["tag"], got["step"], strict=True))
    assert len(keys) == len(set(keys)), "a scalar written twice"
    want = _expected(df)
    assert set(keys) == set(want)
    for k, v in zip(keys, got["value"], strict=True):
        assert v == np.float32(want[k]) or (math.isnan(v) and math.isnan(want[k])), (k, v, want[k])


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "/" for p in sorted(folder.rglob("*"))}


def _refused(res, option, words):
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}") and words in lines[0], res.stderr
    assert "Traceback" not in res.output


# ------------------------------------------------------------------------------------------------ after the fact


def test_export_writes_every_metric_of_the_run_one_run_per_member(run, tmp_path):
    run_dir, _ = run
    df = Run(run_dir).metrics()
    before = _tree(run_dir)
    res = _invoke("export", run_dir, "--to", "tensorboard", "--out", tmp_path / "tb")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["member-0", "member-1"]
    _assert_round_trip(tmp_path / "tb", df)
    tags = set(read_scalars(tmp_path / "tb")["tag"])
    for arm in ("sec2/standard", "sec2/local-to-global"):  # losses and the reference losses, as their own tags
        assert {f"{arm}/test_loss", f"{arm}/train_loss", f"{arm}/test_loss@bayes"} <= tags
    assert _tree(run_dir) == before  # the run directory is read-only to export


def test_export_filters_by_arm_and_member(run, tmp_path):
    run_dir, _ = run
    df = Run(run_dir).metrics()
    done = export_run(run_dir, tmp_path / "one", arm="sec2/standard", member=1)
    assert done.arms == ("sec2/standard",) and done.members == (1,)
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["member-1"]
    _assert_round_trip(tmp_path / "one", df[(df["arm"] == "sec2/standard") & (df["member"] == 1)])
    res = _invoke("export", run_dir, "--to", "tensorboard", "--arm", "sec2/local-to-global", "--out", tmp_path / "arm")
    assert res.exit_code == 0, res.output
    _assert_round_trip(tmp_path / "arm", df[df["arm"] == "sec2/local-to-global"])


def test_unknown_arm_or_member_is_one_line_and_nothing_written(run, tmp_path, wide):
    run_dir, _ = run
    _refused(
        _invoke("export", run_dir, "--to", "tensorboard", "--arm", "nope", "--out", tmp_path / "x"),
        "--arm",
        "arms with metrics: sec2/local-to-global, sec2/standard",
    )
    _refused(
        _invoke("export", run_dir, "--to", "tensorboard", "--member", "7", "--out", tmp_path / "x"),
        "--member",
        "members 0..1",
    )
    _refused(_invoke("export", run_dir, "--to", "transformer-lens", "--out", tmp_path / "x"), "--arm", "required")
    assert list(tmp_path.iterdir()) == []


def test_bad_out_is_one_line_exit_2_and_nothing_written(run, tmp_path, wide):
    run_dir, _ = run
    (tmp_path / "file").write_text("x")
    (tmp_path / "used").mkdir()
    assert _invoke("export", run_dir, "--to", "tensorboard", "--out", tmp_path / "used").exit_code == 0
    before, run_before = _tree(tmp_path), _tree(run_dir)
    for out, words in (
        (tmp_path / "file", "not a folder"),
        (tmp_path / "file" / "sub", "is not a folder"),
        ("/proc/tdlab-tensorboard", "cannot write there"),
        (run_dir, "read-only to every command"),
        (run_dir / "arrays" / "tb", "read-only to every command"),
        (tmp_path / "used", "holds TensorBoard event files"),
    ):
        _refused(_invoke("export", run_dir, "--to", "tensorboard", "--out", out), "--out", words)
    assert _tree(tmp_path) == before and _tree(run_dir) == run_before


# ------------------------------------------------------------------------------------------------ live


def test_run_tensorboard_streams_every_stored_metric(run):
    run_dir, live = run
    assert sorted(p.name for p in live.iterdir()) == ["member-0", "member-1"]
    _assert_round_trip(live, Run(run_dir).metrics())


def test_bad_tensorboard_folder_is_one_line_exit_2_and_no_run(run, tmp_path, wide):
    run_dir, live = run
    (tmp_path / "file").write_text("x")
    before, run_before = _tree(tmp_path), _tree(run_dir)
    for tb, words in (
        (tmp_path / "file", "not a folder"),
        (tmp_path / "file" / "sub", "is not a folder"),
        ("/proc/tdlab-tensorboard", "cannot write there"),
        (run_dir / "tb", "read-only to every command"),
        (live, "holds TensorBoard event files"),
        (tmp_path / "runs" / "new", "inside the run directory"),
    ):
        _refused(
            _invoke("run", "markov-init", *TINY, "--run-id", "new", "--out", tmp_path / "runs", "--tensorboard", tb),
            "--tensorboard",
            words,
        )
    _refused(
        _invoke("run", "--resume", run_dir, "--tensorboard", tmp_path / "tb"), "--tensorboard", "not with --resume"
    )
    assert _tree(tmp_path) == before and _tree(run_dir) == run_before


def test_a_bad_config_leaves_the_tensorboard_folder_unmade(tmp_path, wide):
    res = _invoke(
        "run",
        "markov-init",
        *TINY,
        "--set",
        "train.steps=-1",
        "--out",
        tmp_path / "runs",
        "--tensorboard",
        tmp_path / "tb",
    )
    assert res.exit_code == 2 and not (tmp_path / "tb").exists()
    (tmp_path / "file").write_text("x")
    res = _invoke("run", "markov-init", *TINY, "--out", tmp_path / "file" / "runs", "--tensorboard", tmp_path / "tb")
    assert res.exit_code == 2 and not (tmp_path / "tb").exists(), res.output


TASK = MarkovChain(0.5, 0.8)
MODEL = GPTConfig(arch="sec2", d=4, max_len=16)


def _build(s):
    return GPT(MODEL, s)


class Watching(TensorBoardScalars):
    """Reads its own folder back with TensorBoard's reader after every call: what a TensorBoard sees then."""

    def __init__(self, folder, every=0):
        super().__init__(folder, every)
        self.seen: list[set] = []

    def add(self, arm, rows):
        super().add(arm, rows)
        got = read_scalars(self.folder)
        self.seen.append(set(zip(got["tag"], got["step"], got["member"], strict=True)))


def test_scalars_are_in_the_event_files_while_the_run_trains(tmp_path):
    """Each evaluation's test loss and reference losses are readable before training goes on (chunks of one
    member: members numbered across chunks)."""
    w = RunWriter(tmp_path / "runs", "exp", run_id="r")
    w.write_config({"experiment": "markov-init", "config": {}})
    cfg = TrainConfig(steps=12, batch=4, seq_len=16, eval_every=4, eval_batches=1, log_every=3, chunk=1)
    trainer = Trainer(cfg, progress=False)
    sink = Watching(tmp_path / "tb")
    with sink, streaming_to(sink):
        ctx = RunContext(w, progress=False)
        assert ctx.live is sink
        ctx.fit("sec2/a", trainer, _build, member_seeds(3, 2), TASK)
    assert trainer.live is None  # the arm's stream ends with its fit

    def first(name, step, member):  # the call after which TensorBoard could read the scalar
        return next(i for i, s in enumerate(sink.seen) if (f"sec2/a/{name}", step, member) in s)

    for member in (0, 1):
        for step in (0, 4, 8):  # each evaluation, reference losses included, readable before the member's last
            assert (
                first("test_loss", step, member)
                == first("test_loss@bayes", step, member)
                < first("test_loss", 12, member)
            )
        assert first("train_loss", 3, member) < first("train_loss", 6, member) < first("test_loss", 12, member)
    assert first("test_loss", 12, 0) < first("test_loss", 0, 1)  # member 1 is the second chunk
    _assert_round_trip(tmp_path / "tb", Run.read_metrics(w.path / "metrics.parquet"))
    w.release()


def test_stored_rows_reach_the_sink_once_and_a_decide_round_numbers_the_new_members(tmp_path):
    w = RunWriter(tmp_path / "runs", "exp", run_id="r")
    w.write_config({"experiment": "markov-init", "config": {}})
    cfg = TrainConfig(steps=6, batch=4, seq_len=16, eval_every=3, eval_batches=1, log_every=2)
    seeds = member_seeds(5, 2)
    with Watching(tmp_path / "tb") as sink:
        ctx = RunContext(w, progress=False, live=sink)
        ctx.fit("sec2/a", Trainer(cfg, progress=False), _build, seeds[:1], TASK)
        ctx.store_rows("probe", [(0, 0, "score", 0.25), (0, 1, "score", float("nan")), (3, 0, "score", 1e-30)])
        ctx.start_round()  # --decide: member 0 is kept, member 1 trained as the trainer's member 0
        ctx.fit("sec2/a", Trainer(cfg, progress=False), _build, seeds, TASK)
        ctx.store_rows("probe", [(0, 0, "score", 0.25), (0, 1, "score", float("nan")), (3, 0, "score", 1e-30)])
        n = sink.scalars
        ctx.store_rows("sec2/a", w.arm_rows("sec2/a"))  # stored again: nothing new
        assert sink.scalars == n
    # member 1 streamed live as the arm's member 1 (not only when the arm was stored)
    seen = [i for i, got in enumerate(sink.seen) if ("sec2/a/test_loss", 0, 1) in got]
    assert seen and ("sec2/a/test_loss", 6, 1) not in sink.seen[seen[0]]
    _assert_round_trip(tmp_path / "tb", Run.read_metrics(w.path / "metrics.parquet"))
    w.release()


def test_regression_trainer_streams_its_rows():
    got = []
    trainer = RegressionTrainer(
        RegressionConfig(
            prompts=40, context=20, steps=20, eval_prompts=20, eval_every=10, log_every=5, lr=1e-2, grad_tol=None
        ),
        progress=False,
    )
    trainer.live = arm_stream(
        type("Sink", (), {"add": lambda self, arm, rows: got.append((arm, list(rows)))})(), "lca", 3
    )
    small = MultiModalPrompts(dims=(3, 2))
    result = trainer.fit(lambda s: LCA(small.d, 4, s, param="one", alpha0=0.0), member_seeds(1, 2), small)
    assert {a for a, _ in got} == {"lca"} and len(got) > 2
    assert [r for _, rows in got for r in rows] == [(s, m + 3, n, v) for s, m, n, v in result.rows]


def test_without_a_sink_nothing_is_streamed_and_tensorboard_is_not_imported():
    code = (
        "import sys, tdlab.cli, tdlab.experiments.base, tdlab.train.trainer, tdlab.train.regression;"
        "from tdlab.train.trainer import Trainer, TrainConfig;"
        "assert Trainer(TrainConfig(), progress=False).live is None;"
        "assert not [m for m in sys.modules if m.startswith(('tensorboard', 'torch.utils.tensorboard'))], 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_live_sink_holds_fast_calls_and_the_run_context_writes_them_when_a_fit_ends(tmp_path):
    sink = TensorBoardScalars(tmp_path / "held", every=3600)
    sink.add("a", [(0, 0, "x", 1.0)])  # the first call writes at once
    sink.add("a", [(1, 0, "x", 2.0), (0, 0, "x", 9.0)])  # held (the copy of step 0 dropped)
    assert list(read_scalars(tmp_path / "held")["step"]) == [0]
    sink.flush()
    assert list(read_scalars(tmp_path / "held")["value"]) == [1.0, 2.0]
    sink.close()

    w = RunWriter(tmp_path / "runs", "exp", run_id="r")
    w.write_config({"experiment": "markov-init", "config": {}})
    cfg = TrainConfig(steps=6, batch=4, seq_len=16, eval_every=3, eval_batches=1, log_every=1)
    sink = Watching(tmp_path / "tb", every=3600)
    ctx = RunContext(w, progress=False, live=sink)
    trainer = Trainer(cfg, progress=False)
    trainer.fit = lambda *a, fit=trainer.fit: (fit(*a), sink.seen.append("fit done"))[0]
    ctx.fit("sec2/a", trainer, _build, member_seeds(5, 2), TASK)
    during = sink.seen[: sink.seen.index("fit done")]
    assert len(during) > 2 and {step for _, step, _ in during[0]} == {0}
    assert all(seen == during[0] for seen in during)  # after the first write, rows held while the fit ran
    _assert_round_trip(tmp_path / "tb", Run.read_metrics(w.path / "metrics.parquet"))  # all there once it ended
    sink.close()
    w.release()
