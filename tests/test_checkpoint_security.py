"""Checkpoints never execute code and a damaged or foreign one is refused with one line, exit 2.

A planted pickle (whose unpickling would create a marker file) is refused unread by ``tdlab run
--resume`` and by ``tdlab sweep``; a truncated checkpoint, a config.yaml edited after checkpointing
and a binary config.yaml are each one line and exit code 2. The checkpoint files themselves are
crash-safe: a write killed half-way leaves the previous checkpoint readable.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from unittest import mock

import pytest
import torch
import yaml
from typer.testing import CliRunner

import tdlab.train.checkpoint as ckpt
import tdlab.train.trainer as trainer_mod
from tdlab.cli import app
from tdlab.experiments.base import get
from tdlab.runs import RunWriter, staging_path
from tdlab.sweep import load_spec, plan
from tdlab.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

SETS = {
    "train.steps": 20,
    "train.seq_len": 16,
    "train.eval_every": 10,
    "train.eval_batches": 1,
    "archs": ["sec2"],
    "inits": ["standard"],
    "train.checkpoint_every": 5,
}
ARM_CK = "sec2__standard"  # the checkpoint name of the one arm


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def _stderr_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


def _assert_one_line_exit_2(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    lines = _stderr_lines(res)
    assert len(lines) == 1 and "Traceback" not in res.output, res.stderr
    for w in words:
        assert w in lines[0], lines[0]


class Planted:
    """Unpickling this calls ``open(marker, "w")``: the file appears iff the pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


class Stop(BaseException):
    """Stands in for SIGKILL right after the first checkpoint was written."""


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """The staging folder of a ``tdlab run`` stopped right after its first checkpoint (step 5 of 20)."""
    out = tmp_path_factory.mktemp("ck") / "runs"
    real = trainer_mod.save_checkpoint

    def save_then_stop(*args, **kwargs):
        real(*args, **kwargs)
        raise Stop

    args = ["run", "markov-init", "--seeds", "1", "--quiet", "--run-id", "r", "--out", str(out)]
    for k, v in SETS.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    with mock.patch.object(trainer_mod, "save_checkpoint", save_then_stop), pytest.raises(Stop):
        _cli(*args)
    staging = staging_path(out / "r")
    assert (staging / "checkpoints" / f"{ARM_CK}.json").is_file() and not (out / "r").exists()
    return staging


@pytest.fixture()
def copy(interrupted, tmp_path) -> Path:
    """A fresh copy of the interrupted run's staging folder; returns the final path to resume."""
    out = tmp_path / "runs"
    shutil.copytree(interrupted, staging_path(out / "r"))
    return out / "r"


def test_planted_pickle_is_refused_unread_by_resume(copy, tmp_path):
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(Planted(control)))  # the payload is live: loading it does create a file
    assert control.exists()
    marker = tmp_path / "marker"
    ckdir = staging_path(copy) / "checkpoints"
    (ckdir / f"{ARM_CK}.pt").write_bytes(pickle.dumps(Planted(marker)))  # where tdlab < 0.x kept it
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), f"{ARM_CK}.pt", "never unpickles")
    assert not marker.exists()
    (ckdir / f"{ARM_CK}.pt").unlink()
    (ckdir / f"{ARM_CK}.json").write_bytes(pickle.dumps(Planted(marker)))  # under the checkpoint's own name
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), f"{ARM_CK}.json", "pickle")
    assert not marker.exists()
    torch.save({"x": Planted(marker)}, ckdir / f"{ARM_CK}.json")  # torch.save's zip container
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), "pickle")
    assert not marker.exists()
    assert staging_path(copy).is_dir()  # a refused resume changes nothing


def test_planted_pickle_is_refused_by_a_sweep(tmp_path):
    spec_file = tmp_path / "pq.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {"name": "pq", "experiment": "markov-init", "seeds": 1, "set": SETS, "points": [{"task.p": 0.2}]}
        )
    )
    (point,) = plan(load_spec(spec_file))
    out = tmp_path / "runs"
    exp = get("markov-init")
    cfg = exp.make_config("quick", [f"{k}={json.dumps(v)}" for k, v in {**SETS, "task.p": 0.2}.items()], members=1)
    w = RunWriter(out, exp.name, point.run_id)  # the point's own config: only the pickle is wrong
    w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json"), "sweep": "pq"})
    marker = tmp_path / "marker"
    (w.path / "checkpoints").mkdir()
    (w.path / "checkpoints" / f"{ARM_CK}.pt").write_bytes(pickle.dumps(Planted(marker)))
    w.release()  # an interrupted run: no process holds it
    res = _cli("sweep", str(spec_file), "--out", str(out))
    assert res.exit_code == 1, res.output  # the point failed (README: a failed point exits 1)
    assert "pickled checkpoint" in res.stdout and "0 done, 1 failed" in res.stdout
    assert not marker.exists() and not (out / point.run_id).exists() and w.path.is_dir()


@pytest.mark.parametrize("part", ["tensors", "json"])
def test_truncated_checkpoint_is_one_line_exit_2(copy, part):
    ckdir = staging_path(copy) / "checkpoints"
    (f,) = ckdir.glob(f"{ARM_CK}-*.safetensors") if part == "tensors" else [ckdir / f"{ARM_CK}.json"]
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), "corrupt")


def test_config_edited_after_checkpointing_is_refused(copy):
    conf_file = staging_path(copy) / "config.yaml"
    conf = yaml.safe_load(conf_file.read_text())
    conf["config"]["task"]["p"] = 0.3  # not a training setting: only the run config hash sees it
    conf_file.write_text(yaml.safe_dump(conf, sort_keys=False))
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), "different run config")


def test_binary_config_is_refused(copy):
    (staging_path(copy) / "config.yaml").write_bytes(bytes(range(256)))
    _assert_one_line_exit_2(_cli("run", "--resume", str(copy), "--quiet"), "config.yaml")


# ------------------------------------------------------------------------------------------------
# The checkpoint files: round trip, crash safety, tampering.


def _tensors(x: float) -> dict[str, torch.Tensor]:
    return {"a": torch.full((2, 3), x), "g": torch.arange(5, dtype=torch.uint8)}


def test_round_trip_is_exact(tmp_path):
    meta = {"step": 7, "rows": [[1, 0, "loss", 0.1 + 0.2], [2, 0, "loss", float("nan")]], "none": None}
    save_checkpoint(tmp_path / "c.json", meta, _tensors(1.5))
    got_meta, got = load_checkpoint(tmp_path / "c.json")
    assert (
        got_meta["step"] == 7
        and got_meta["rows"][0][3] == 0.1 + 0.2
        and got_meta["rows"][1][3] != got_meta["rows"][1][3]
    )
    assert got.keys() == {"a", "g"} and torch.equal(got["a"], _tensors(1.5)["a"]) and got["g"].dtype == torch.uint8
    assert load_checkpoint(tmp_path / "missing.json") is None


def test_write_killed_half_way_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    save_checkpoint(path, {"step": 1}, _tensors(1.0))
    real, calls = ckpt._write_atomically, []

    def die_before_json(p, data):
        calls.append(p.name)
        if p.suffix == ".json":
            raise Stop  # killed after the new tensor file, before the JSON
        real(p, data)

    monkeypatch.setattr(ckpt, "_write_atomically", die_before_json)
    with pytest.raises(Stop):
        save_checkpoint(path, {"step": 2}, _tensors(2.0))
    assert len(calls) == 2 and len(list(tmp_path.glob("c-*.safetensors"))) == 2
    meta, tensors = load_checkpoint(path)
    assert meta == {"step": 1} and torch.equal(tensors["a"], _tensors(1.0)["a"])
    monkeypatch.setattr(ckpt, "_write_atomically", real)
    save_checkpoint(path, {"step": 3}, _tensors(3.0))
    assert load_checkpoint(path)[0] == {"step": 3} and len(list(tmp_path.glob("c-*.safetensors"))) == 1


def test_tampered_checkpoints_are_refused(tmp_path):
    path = tmp_path / "c.json"
    save_checkpoint(path, {"step": 1}, _tensors(1.0))
    doc = json.loads(path.read_text())
    (tensor_file,) = tmp_path.glob("c-*.safetensors")
    other = tmp_path / "other.safetensors"
    shutil.copy(tensor_file, other)
    for change, message in [
        (lambda d: d.update(format="x"), "not a tdlab checkpoint"),
        (lambda d: d["tensors"].update(file="../c.safetensors"), "file name"),
        (lambda d: d["tensors"].update(sha256="0" * 64), "SHA-256"),
        (lambda d: d["tensors"]["manifest"]["a"].update(shape=[3, 2]), "dtype/shape"),
        (lambda d: d["tensors"]["manifest"].pop("g"), "not the ones"),
    ]:
        bad = json.loads(json.dumps(doc))
        change(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(path)
    path.write_text("[1, 2")
    with pytest.raises(CheckpointError, match="not JSON"):
        load_checkpoint(path)


def test_checkpoint_files_get_the_run_directory_mode(tmp_path):
    from tdlab.runs import file_mode

    save_checkpoint(tmp_path / "c.json", {}, _tensors(1.0))
    assert {f.stat().st_mode & 0o777 for f in tmp_path.iterdir()} == {file_mode()}


# ------------------------------------------------------------------------------------------------
# A well-formed checkpoint file (hash and manifest right) whose contents do not fit the fit.


class _StopAfter:
    """The Markov task, except that the ``n``+1-th ``sample`` call raises (a crash mid-chunk)."""

    def __init__(self, n: int) -> None:
        from tdlab.tasks.markov import MarkovChain

        self.task, self.n, self.calls = MarkovChain(0.5, 0.8), n, 0
        self.vocab = self.task.vocab

    def __getattr__(self, name):
        return getattr(self.task, name)

    def sample(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.n:
            raise Stop
        return self.task.sample(*args, **kwargs)


def _crafted(tmp_path, change):
    """Interrupt a tiny fit after its step-5 checkpoint, rewrite the checkpoint through ``change(meta,
    tensors)`` (hash and manifest made right again), and resume it."""
    from tdlab.models.gpt import GPT, GPTConfig
    from tdlab.seeding import member_seeds
    from tdlab.train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(steps=12, batch=2, seq_len=8, eval_every=6, eval_batches=1, log_every=3, checkpoint_every=5)
    build = lambda s: GPT(GPTConfig(arch="sec2", d=4, max_len=8), s)  # noqa: E731
    seeds, ck = member_seeds(1, 1), tmp_path / "arm.json"
    with pytest.raises(Stop):
        Trainer(cfg, progress=False, checkpoint=ck).fit(build, seeds, _StopAfter(8))
    meta, tensors = load_checkpoint(ck)
    change(meta, tensors)
    save_checkpoint(ck, meta, tensors)
    return lambda: Trainer(cfg, progress=False, checkpoint=ck).fit(build, seeds, _StopAfter(10**6))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m, t: m["chunk"]["sched"].update(base_lrs=["x"]), "schedule"),
        (lambda m, t: m["chunk"]["sched"].update(optimizer="x"), "schedule"),
        (lambda m, t: t.update({k: torch.zeros(3) for k in t if k.endswith("exp_avg")}), "optimiser"),
        (lambda m, t: t.update({k: v.double() for k, v in t.items() if k.startswith("model/")}), "model"),
        (lambda m, t: t.update(running=torch.zeros(2)), "running"),
        (lambda m, t: m["chunk"].update(step=99), "step"),
        (lambda m, t: m["rows"].append([1, 0, "x", "not a number"]), "rows"),
        (lambda m, t: t.update({"states/0/extra": torch.zeros(1)}), "corrupt"),
    ],
)
def test_crafted_checkpoint_contents_are_refused(tmp_path, change, message):
    resume = _crafted(tmp_path, change)
    with pytest.raises(CheckpointError, match=message):
        resume()


def test_unchanged_crafted_checkpoint_resumes(tmp_path):
    result = _crafted(tmp_path, lambda m, t: None)()
    assert max(s for s, *_ in result.rows) == 12 and len(result.states) == 1
