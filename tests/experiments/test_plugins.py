"""Experiments of the user's own package: found by `tdlab run`, `report`, `--resume`, `list` and `explain` through
the ``tdlab.experiments`` entry point group of an installed package, or with ``--include DIR``; one with a
quick profile alone; a broken package named, never a crash of tdlab.

The package is built here as an installed one is seen (a ``.dist-info`` folder with its entry points on
``sys.path``: what ``pip install -e`` leaves), so the test needs no network and changes no environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.base import include

MODULE = '''
"""my-chain: a one-layer GPT on a binary Markov chain ends at the entropy rate (one claim, a quick profile)."""
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from tdlab.claims import ClaimSpec, Measurements, Sample
from tdlab.claims.declare import Threshold
from tdlab.experiments.base import Experiment, ExperimentConfig, register
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import ChainConfig, MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer


class ChainExpConfig(ExperimentConfig):
    task: ChainConfig = ChainConfig()
    model: GPTConfig = GPTConfig(d=8)
    train: TrainConfig = TrainConfig(lr=1e-2)


@register
class MyChain(Experiment[ChainExpConfig]):
    name = "my-chain"
    paper = "900 My own question"
    figure = "Fig. 1"
    description = "My question: does a one-layer GPT reach the entropy rate of a binary chain?"
    Config = ChainExpConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {"members": 2, "train": {"steps": 60, "seq_len": 32, "eval_every": 20, "eval_batches": 2}}
    }
    claims = (
        ClaimSpec("reaches-entropy-rate", "ends at the entropy rate (Fig. 1)", test="value", relation="le",
                  quantity="final test loss - Bayes loss, nats", expected=0.0, tolerance=1.0, horizon="budget",
                  quote="it ends at the entropy rate", where="Fig. 1", threshold=Threshold("ours", "1 nat")),
    )

    def run(self, cfg, ctx):
        trainer = Trainer(cfg.train, ctx.device, ctx.progress, label="a")
        model = partial(GPT, cfg.model.updated({"max_len": cfg.train.seq_len}))
        ctx.fit("a", trainer, model, member_seeds(cfg.seed, cfg.members), MarkovChain(cfg.task.p, cfg.task.q))

    def measure(self, cfg, run):
        _, loss = run.curves("a", "test_loss")
        _, bayes = run.curves("a", "test_loss@bayes")
        out = Measurements()
        out.row("reaches-entropy-rate", "a", Sample(loss[:, -1] - bayes[:, -1]), arms=["a"])
        return out

    def plot(self, cfg, run, analysis, figdir: Path):
        return []
'''


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """``site/``: the package ``mylab`` (module ``mylab.chain``) and its ``.dist-info`` with the entry point, and
    the entry point of a package whose module does not import."""
    site = tmp_path_factory.mktemp("site")
    (site / "mylab").mkdir()
    (site / "mylab" / "__init__.py").write_text("")
    (site / "mylab" / "chain.py").write_text(MODULE)
    for dist, eps in (("mylab", "my-chain = mylab.chain"), ("broken", "broken-exp = no_such_module_of_anyones")):
        info = site / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[tdlab.experiments]\n{eps}\n")
    return site


def _tdlab(*args: str, site: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TDLAB_THREADS": "1", "COLUMNS": "250"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "tdlab.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def test_an_installed_package_runs_reports_resumes_and_explains(package: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    listed = _tdlab("list", site=package)
    assert listed.returncode == 0 and "my-chain" in listed.stdout and "broken-exp" not in listed.stdout
    ran = _tdlab("run", "my-chain", "--out", str(out), "--run-id", "a", "--quiet", site=package)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "reaches-entropy-rate" in ran.stdout
    rebuilt = _tdlab("report", str(out / "a"), site=package)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    said = _tdlab("explain", "my-chain", "--json", site=package)
    assert said.returncode == 0 and '"quote": "it ends at the entropy rate"' in said.stdout
    stopped = _tdlab(
        "run", "my-chain", "--out", str(out), "--run-id", "b", "--quiet", "--until", "1s",
        "--set", "train.steps=3000", site=package,
    )  # fmt: skip
    assert stopped.returncode == 3, stopped.stderr[-2000:]
    resumed = _tdlab("run", "--resume", str(out / "b"), "--quiet", site=package)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    only_quick = _tdlab("run", "my-chain", "--profile", "paper", "--out", str(out), site=package)
    assert only_quick.returncode == 2 and "allowed: quick" in only_quick.stderr


def test_include_runs_a_folder_of_ones_own_without_installing(package: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    ran = _tdlab("run", "--include", str(package / "mylab"), "my-chain", "--out", str(out), "--run-id", "a", "--quiet")
    assert ran.returncode == 0, ran.stderr[-2000:]
    bare = _tdlab("report", str(out / "a"))
    assert bare.returncode == 2 and "--include" in bare.stderr and "Traceback" not in bare.stderr
    assert len(bare.stderr.strip().splitlines()) == 1
    again = _tdlab("report", "--include", str(package / "mylab"), str(out / "a"))
    assert again.returncode == 0, again.stderr[-2000:]


def test_an_unknown_experiment_says_how_to_register_one_and_a_broken_package_is_named(package: Path) -> None:
    unknown = _tdlab("run", "no-such-experiment", site=package)
    assert unknown.returncode == 2 and "tdlab.experiments" in unknown.stderr and "--include" in unknown.stderr
    broken = _tdlab("run", "broken-exp", site=package)
    assert broken.returncode == 2 and "failed to import" in broken.stderr and "Traceback" not in broken.stderr


def test_include_refuses_what_is_not_a_module_folder_or_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--include"):
        include(tmp_path / "missing")
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('my bug')\n")
    with pytest.raises(ConfigError, match="my bug"):
        include(bad)


def test_the_example_package_declares_its_entry_point() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2] / "examples" / "add_a_paper"
    project = tomllib.loads((root / "pyproject.toml").read_text())
    (module,) = project["project"]["entry-points"]["tdlab.experiments"].values()
    assert (root / Path(*module.split("."))).with_suffix(".py").is_file()
    assert textwrap.dedent(MODULE).count("@register") == 1
