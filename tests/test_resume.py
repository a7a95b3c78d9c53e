"""Resuming interrupted runs: a ``tdlab run`` killed with SIGKILL finishes with ``--resume`` and ends
with exactly the numbers of an uninterrupted run; the trainer resumes mid-chunk from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.index import RunIndex
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.run_context import RunContext
from tdlab.runs import Run, RunWriter, staging_path
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer

TASK = MarkovChain(0.5, 0.8)
MODEL = GPTConfig(arch="sec2", d=4, max_len=16)
SETS = [
    "train.steps=40",
    "train.seq_len=16",
    "train.eval_every=10",
    "train.eval_batches=1",
    "archs=[sec2]",
    "train.checkpoint_every=10",
]


def _run_args(run_id: str, out: Path) -> list[str]:
    args = ["run", "markov-init", "--seeds", "2", "--quiet", "--run-id", run_id, "--out", str(out)]
    for s in SETS:
        args += ["--set", s]
    return args


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _sorted_metrics(run_dir: Path) -> pd.DataFrame:
    return Run(run_dir).metrics().sort_values(["arm", "name", "member", "step"]).reset_index(drop=True)


def _assert_same_states(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b) and len(a) > 0
    for sa, sb in zip(a, b, strict=True):
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k]), k


# ------------------------------------------------------------------------------------------------
# A real process, killed outright.


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """``killed``: a ``tdlab run`` process SIGKILLed while training its second arm, then resumed;
    ``full``: the same config and seed, never interrupted."""
    out = tmp_path_factory.mktemp("resume") / "runs"
    staging = staging_path(out / "killed")
    second_arm_ck = staging / "checkpoints" / "sec2__local-to-global.json"
    env = {**os.environ, "TDLAB_THREADS": "2"}  # the same thread count as this process (conftest)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tdlab.cli", *_run_args("killed", out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300  # importing torch on a loaded machine can take a while
    try:
        while not second_arm_ck.is_file():
            assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no checkpoint of the second arm appeared"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    # What the killed process left behind.
    left = {
        "final_exists": (out / "killed").exists(),
        "staging_exists": staging.is_dir(),
        "first_arm_arrays": (staging / "arrays" / "sec2__standard.safetensors").is_file(),
        "second_arm_arrays": (staging / "arrays" / "sec2__local-to-global.safetensors").is_file(),
        "stored_arms": set(Run.read_metrics(staging / "metrics.parquet")["arm"]),
    }
    resumed = _cli("run", "--resume", str(out / "killed"), "--quiet")
    full = _cli(*_run_args("full", out))
    return out, left, resumed, full


def test_ctrl_c_stops_after_the_step_keeps_a_checkpoint_says_how_to_resume_and_the_resume_says_where(
    killed_and_resumed,
):
    """Ctrl-C (SIGINT) on `tdlab run`: the fit in training checkpoints after its step and the run exits 130
    naming the resume command; the resume says where it continues and ends with the uninterrupted numbers."""
    out, _, _, _ = killed_and_resumed
    staging = staging_path(out / "ctrlc")
    env = {**os.environ, "TDLAB_THREADS": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tdlab.cli", *_run_args("ctrlc", out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (staging / "config.yaml").is_file():  # written inside the stopping block: the handler is set
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be interrupted"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Ctrl-C: stopping after the current step" in err and f"tdlab run --resume {out / 'ctrlc'}" in err
    assert list((staging / "checkpoints").glob("*.json"))
    resumed = subprocess.run(
        [sys.executable, "-m", "tdlab.cli", "run", "--resume", str(out / "ctrlc"), "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming sec2/standard" in resumed.stderr and "continue from step" in resumed.stderr
    pd.testing.assert_frame_equal(_sorted_metrics(out / "ctrlc"), _sorted_metrics(out / "full"), check_exact=True)


def test_killed_process_leaves_only_its_staging_folder(killed_and_resumed):
    _, left, _, _ = killed_and_resumed
    assert left == {
        "final_exists": False,
        "staging_exists": True,
        "first_arm_arrays": True,
        "second_arm_arrays": False,
        "stored_arms": {"sec2/standard"},
    }


def test_resumed_run_equals_uninterrupted_run_exactly(killed_and_resumed):
    out, _, resumed, full = killed_and_resumed
    assert resumed.exit_code == 0, resumed.output
    assert full.exit_code == 0, full.output
    a, b = _sorted_metrics(out / "killed"), _sorted_metrics(out / "full")
    assert len(a) > 0 and set(a["arm"]) == {"sec2/standard", "sec2/local-to-global"}
    assert not a.duplicated(["arm", "name", "member", "step"]).any()
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a["step"].max() == 40 and sorted(set(a["member"])) == [0, 1]
    for arm in ("sec2__standard", "sec2__local-to-global"):
        ka = load_file(str(out / "killed" / "arrays" / f"{arm}.safetensors"))
        kb = load_file(str(out / "full" / "arrays" / f"{arm}.safetensors"))
        assert ka.keys() == kb.keys()
        for k in ka:
            assert torch.equal(ka[k], kb[k]), (arm, k)


def test_resumed_run_is_finished_indexed_and_clean(killed_and_resumed):
    out, _, _, _ = killed_and_resumed
    run = Run(out / "killed")
    s = run.summary
    assert s["status"] == "done" and s["run_id"] == "killed"
    full = Run(out / "full").summary
    assert s["claims_total"] == full["claims_total"] == len(s["claims"]) >= 2
    assert (run.path / "report.html").is_file()
    assert not staging_path(out / "killed").exists()
    assert not (run.path / "checkpoints").exists()
    assert not any(p.name.startswith(".staging-") for p in out.iterdir())
    measured = lambda summ: json.dumps([(g["id"], [r["mean"] for r in g["rows"]]) for g in summ["claims"]])  # noqa: E731
    assert measured(s) == measured(full)  # NaN-safe: the same numbers, as text
    (row,) = RunIndex(out).query("run_id = 'killed'")
    assert row["status"] == "done" and row["path"] == str((out / "killed").resolve())


def test_resume_of_a_finished_or_missing_run_exits_2(killed_and_resumed):
    out, _, _, _ = killed_and_resumed
    before = sorted(p.name for p in out.iterdir() if not p.name.startswith("index.sqlite"))
    res = _cli("run", "--resume", str(out / "full"))
    assert res.exit_code == 2 and "finished run" in res.output
    res = _cli("run", "--resume", str(out / "never-ran"))
    assert res.exit_code == 2 and "no interrupted run" in res.output
    res = _cli("run", "markov-init", "--resume", str(out / "full"))
    assert res.exit_code == 2 and "--resume" in res.output
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("index.sqlite")) == before
    assert "Traceback" not in res.output


# ------------------------------------------------------------------------------------------------
# The trainer, interrupted in-process.


class Interrupted(Exception):
    pass


class InterruptAfter:
    """The task, except that the ``n``-th+1 call of ``sample`` raises (a crash mid-chunk)."""

    def __init__(self, task, n: int) -> None:
        self.task, self.n, self.calls, self.vocab = task, n, 0, task.vocab

    def __getattr__(self, name):  # the task's reference predictors (test_loss@bayes rows) too
        return getattr(self.task, name)

    def sample(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.n:
            raise Interrupted(f"sample call {self.calls}")
        return self.task.sample(*args, **kwargs)


def _train_cfg(chunk) -> TrainConfig:
    # log_every and eval_every not multiples of checkpoint_every: the running loss and the random
    # streams must be restored mid-window.
    return TrainConfig(
        steps=23, batch=4, seq_len=16, eval_every=4, eval_batches=2, log_every=3, checkpoint_every=5, chunk=chunk
    )


def _build(s):
    return GPT(MODEL, s)


@pytest.fixture(scope="module")
def uninterrupted():
    seeds = member_seeds(7, 2)
    return {chunk: Trainer(_train_cfg(chunk), progress=False).fit(_build, seeds, TASK) for chunk in (1, 2)}


# Sample calls per chunk: 2 (eval at 0) + 23 (steps) + 2 * 6 (evals at 4..20 and 23) = 37.
@pytest.mark.parametrize("chunk, calls", [(1, 20), (1, 37), (1, 37 + 30), (2, 16)])
def test_trainer_resumed_mid_chunk_equals_uninterrupted_fit(tmp_path, uninterrupted, chunk, calls):
    seeds = member_seeds(7, 2)
    ck = tmp_path / "ck" / "arm.json"
    flaky = InterruptAfter(TASK, calls)
    with pytest.raises(Interrupted):
        Trainer(_train_cfg(chunk), progress=False, checkpoint=ck).fit(_build, seeds, flaky)
    assert flaky.calls == calls + 1
    resumed = Trainer(_train_cfg(chunk), progress=False, checkpoint=ck).fit(_build, seeds, TASK)
    want = uninterrupted[chunk]
    assert resumed.rows == want.rows
    _assert_same_states(resumed.states, want.states)
    assert ck.is_file() and not list(ck.parent.glob("*.tmp"))


def test_finished_checkpoint_returns_the_result_without_training(tmp_path, uninterrupted):
    seeds = member_seeds(7, 2)
    ck = tmp_path / "arm.json"
    first = Trainer(_train_cfg(1), progress=False, checkpoint=ck).fit(_build, seeds, TASK)
    assert first.rows == uninterrupted[1].rows
    built = []
    again = Trainer(_train_cfg(1), progress=False, checkpoint=ck).fit(
        lambda s: built.append(s) or _build(s), seeds, InterruptAfter(TASK, 0)
    )
    assert built == [] and again.rows == first.rows
    _assert_same_states(again.states, first.states)


def test_checkpoint_of_another_config_is_refused(tmp_path):
    seeds = member_seeds(7, 2)
    ck = tmp_path / "arm.json"
    with pytest.raises(Interrupted):
        Trainer(_train_cfg(1), progress=False, checkpoint=ck).fit(_build, seeds, InterruptAfter(TASK, 12))
    other = _train_cfg(1).model_copy(update={"lr": 0.5})
    with pytest.raises(ValueError, match="different config or seeds"):
        Trainer(other, progress=False, checkpoint=ck).fit(_build, seeds, TASK)
    with pytest.raises(ValueError, match="different config or seeds"):
        Trainer(_train_cfg(1), progress=False, checkpoint=ck).fit(_build, member_seeds(8, 2), TASK)


# ------------------------------------------------------------------------------------------------
# The run context: an arm whose metrics were stored but whose arrays were not (killed in between).


class Killed(BaseException):
    pass


def test_arm_killed_between_metrics_and_arrays_is_not_stored_twice(tmp_path, uninterrupted):
    seeds = member_seeds(7, 2)
    cfg = _train_cfg(1)
    w = RunWriter(tmp_path, "exp", run_id="r")
    w.write_config({"experiment": "markov-init", "config": {}})

    def die(*_args, **_kw):
        raise Killed

    w.save_arrays = die  # the process dies right after the arm's metrics were flushed
    with pytest.raises(Killed):
        RunContext(w, progress=False).fit("sec2/a", Trainer(cfg, progress=False), _build, seeds, TASK)
    w.release()  # the killed process's lock on the run ends with it
    reopened = RunWriter.reopen(tmp_path / "r")
    result = RunContext(reopened, progress=False).fit("sec2/a", Trainer(cfg, progress=False), _build, seeds, TASK)
    assert result.rows == uninterrupted[1].rows
    stored = Run.read_metrics(reopened.path / "metrics.parquet")
    assert len(stored) == len(uninterrupted[1].rows)
