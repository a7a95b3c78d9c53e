"""Shared test settings and fixtures: two CPU threads (the target machine), a runs folder, a
factory for synthetic ``markov-init`` run directories whose metrics the test chooses exactly, and a
run stopped at every chance it has and resumed each time."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tdlab.cores import passive_openmp

passive_openmp()  # before torch is imported: the suite beside a run (or a run beside the suite) does not spin
# The suite's numbers do not depend on what else runs on the machine: a thread registry of its own (the cores
# other tdlab processes hold never change a run's thread count here) and one count for every run it starts.
os.environ["TDLAB_CORES_DIR"] = tempfile.mkdtemp(prefix="tdlab-cores-suite-")
os.environ["TDLAB_THREADS"] = "2"
# Tables and wrapped lines as on a wide terminal, whatever runs the suite (a terminal, a pipe, a pytest-xdist
# worker): a test of narrow output sets its own width.
os.environ["COLUMNS"] = "200"

import torch  # noqa: E402

torch.set_num_threads(2)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--fuzz-long``: many more examples per property of the bad-input fuzz suite (tests/robustness)."""
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        default=False,
        help="run the bad-input fuzz suite with many more hypothesis examples",
    )


def h(x: float) -> float:
    """Binary entropy in nats, written independently of tdlab."""
    return 0.0 if x <= 0 or x >= 1 else -x * math.log(x) - (1 - x) * math.log(1 - x)


def chain_truth(p: float, q: float) -> tuple[float, float]:
    """(entropy rate, H(pi)) of the binary chain P = [[1-p, p], [q, 1-q]], from first principles."""
    pi1 = p / (p + q)
    return (1 - pi1) * h(p) + pi1 * h(q), h(pi1)


_ANCHORS_TINY = (
    "task.key_min=21",
    "task.key_max=30",
    "task.n_train=600",
    "task.n_test=40",
    "model.d=8",
    "model.d_attn=4",
    "model.d_ff=8",
    "schedule.epochs=2",
    "schedule.n_eval=60",
    "train.lr=0.003",
    "snapshot_epochs=[1]",
)


@pytest.fixture
def anchors_tiny() -> list[str]:
    """The ``--set`` overrides of seed 001's anchors experiments (anchors-bias and those built on its task
    and GPT: attention, embedding, lowrank) at a tiny setting: keys 21..30, 600 training and 40 held-out
    sequences, d = 8, 2 epochs of 6 steps at lr 0.003, a snapshot after epoch 1. A fresh list per test."""
    return list(_ANCHORS_TINY)


@pytest.fixture
def one_thread():
    """One intra-op thread for tests on tiny tensors (on shared cores two threads spin-wait, ~40x slower)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """A folder to hold run directories (``--out``); not created yet."""
    return tmp_path / "runs"


@pytest.fixture
def make_markov_run(tmp_path: Path) -> Callable[..., tuple[object, Path]]:
    """``make(p, q, curves, steps, overrides=(), members=3) -> (cfg, run_dir)``.

    ``curves`` maps an arm (``"sec2/standard"``...) to one test-loss curve per member over ``steps``;
    arms left out get the entropy rate everywhere. The run is written with :class:`RunWriter`, as a
    real run would be, and nothing is trained.
    """
    from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit
    from tdlab.runs import RunWriter

    counter = iter(range(10_000))

    def make(
        p: float,
        q: float,
        curves: Mapping[str, Sequence[Sequence[float]]],
        steps: Sequence[int],
        overrides: Sequence[str] = (),
        members: int = 3,
    ):
        exp = MarkovInit()
        cfg = exp.make_config("quick", [f"task.p={p}", f"task.q={q}", *overrides], members=members)
        rate, hpi = chain_truth(p, q)
        with RunWriter(tmp_path / "synthetic", exp.name, run_id=f"synthetic-{next(counter)}") as w:
            w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
            for arm in (a.name for a in exp.arms(cfg)):
                member_curves = curves.get(arm, [[rate] * len(steps)] * members)
                assert len(member_curves) == members
                rows = [
                    (s, m, "test_loss", float(v))
                    for m, c in enumerate(member_curves)
                    for s, v in zip(steps, c, strict=True)
                ]
                rows += [
                    (s, m, "train_loss", float(v))
                    for m, c in enumerate(member_curves)
                    for s, v in zip(steps, c, strict=True)
                    if s > 0
                ]
                # the reference predictors' loss on the evaluation batches: here their population values
                rows += [
                    (s, m, f"test_loss@{ref}", v)
                    for ref, v in (("bayes", rate), ("unigram", hpi))
                    for m in range(members)
                    for s in steps
                ]
                w.add_metrics(arm, rows)
            run = w.finish()
        return cfg, run.path

    return make


@pytest.fixture
def stopped_everywhere() -> Callable[..., tuple[object, list]]:
    """``run(exp, cfg, out, on_first=None, limit=200) -> (finished Run, [RunStopped, ...])``: ``exp`` run under
    an expired ``--until`` (it stops at its first chance: a checkpoint after one step or evaluation, a stored
    piece), then resumed under one again and again until it finishes. ``on_first(stop)`` sees the first stop
    while its staging folder is there."""
    from tdlab.runner import execute, resume
    from tdlab.train.stopping import RunStopped, stopping

    def run(exp, cfg, out: Path, on_first: Callable[[RunStopped], None] | None = None, limit: int = 200):
        with stopping(until_s=0, signals=False), pytest.raises(RunStopped) as first:
            execute(exp, cfg, "quick", out, progress=False)
        if on_first is not None:
            on_first(first.value)
        stops = [first.value]
        for _ in range(limit):
            try:
                with stopping(until_s=0, signals=False):
                    return resume(first.value.run_dir, progress=False), stops
            except RunStopped as s:
                stops.append(s)
        raise AssertionError(f"the run never finished in {limit} resumes")

    return run


# --- planted parameters of seed 000's Sec. 2 model (its probes, markov-rank) ---------------------------------


def _rank_one_state(d: int, n_pos: int, rng, c: float = 0.7) -> dict:
    """One member's parameters at App. C's optimum: every matrix exactly rank one along e = c·alpha,
    p_n = -(c/2)·alpha, W_2 = W_1^T, W_O W_V = alpha v^T with v ⊥ alpha, W_Q^T W_K ∝ alpha alpha^T."""
    import numpy as np

    from tdlab.probes.sec2_weights import MATRICES

    alpha = rng.choice([-1.0, 1.0], size=d)
    w1 = np.outer(rng.choice([-1.0, 1.0], size=4 * d), alpha)
    v = rng.normal(size=d)
    v -= (v @ alpha) / d * alpha
    mats = {
        "W_Q": np.outer(rng.normal(size=d), alpha),
        "W_K": np.outer(rng.normal(size=d), alpha),
        "W_V": np.outer(alpha, v),
        "W_O": np.outer(alpha, alpha) / d,
        "W_1": w1,
        "W_2": w1.T,
    }
    st = {MATRICES[k]: torch.tensor(m, dtype=torch.float32) for k, m in mats.items()}
    st.update(
        e=torch.tensor(c * alpha, dtype=torch.float32),
        b=torch.zeros(()),
        wpe=torch.tensor(np.broadcast_to(-0.5 * c * alpha, (n_pos, d)).copy(), dtype=torch.float32),
    )
    return st


def _gaussian_state(d: int, n_pos: int, rng) -> dict:
    """A full-rank state (a standard Gaussian init)."""
    from tdlab.probes.sec2_weights import MATRICES

    shape = {"W_1": (4 * d, d), "W_2": (d, 4 * d)}
    st = {k: torch.tensor(rng.normal(size=shape.get(n, (d, d))), dtype=torch.float32) for n, k in MATRICES.items()}
    st.update(
        e=torch.tensor(rng.normal(size=d), dtype=torch.float32),
        b=torch.zeros(()),
        wpe=torch.tensor(rng.normal(size=(n_pos, d)), dtype=torch.float32),
    )
    return st


@pytest.fixture
def sec2_states():
    """``sec2_states.rank_one(d, n_pos, rng, c=0.7)`` (App. C's optimum) and ``sec2_states.gaussian(d, n_pos,
    rng)`` (full rank): one member's state dict of seed 000's Sec. 2 model, float32 like a stored run's."""
    from types import SimpleNamespace

    return SimpleNamespace(rank_one=_rank_one_state, gaussian=_gaussian_state)
