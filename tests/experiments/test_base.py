"""RunContext.fit_all: fits stored in their order whatever lane ends first, a diverging fit stored
with the others before its error goes up, fits a resumed run finished not trained again, and a stored
fit's checkpoints removed (a resume reads its arrays and rows)."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.run_context import Fit, RunContext
from tdlab.runs import RunWriter
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.checkpoint import save_checkpoint
from tdlab.train.lanes import limited_to
from tdlab.train.trainer import DivergenceError, TrainConfig, Trainer

TASK = MarkovChain(0.3, 0.6)
CFG = TrainConfig(steps=6, batch=4, seq_len=16, eval_every=3, eval_batches=1, log_every=1)
SEEDS = member_seeds(2, 2)


class NaNFrom(GPT):
    """A GPT whose training loss is NaN from its ``at``-th training forward on."""

    def __init__(self, cfg, seeds, at):
        super().__init__(cfg, seeds)
        self.at, self.calls = at, 0

    def forward(self, tokens):
        out = super().forward(tokens)
        if self.training:
            self.calls += 1
            if self.calls >= self.at:
                out = out * float("nan")
        return out


def _fits(steps=(6, 2, 4), bad=None):
    fits = []
    for i, n in enumerate(steps):
        model = GPTConfig(arch="sec2", d=4 + 2 * i, max_len=16)
        build = (lambda s, m=model: NaNFrom(m, s, at=2)) if i == bad else (lambda s, m=model: GPT(m, s))
        fits.append(
            Fit(f"cell{i}", Trainer(CFG.updated({"steps": n}), progress=False, label=f"cell{i}"), build, SEEDS, TASK)
        )
    return fits


_LIMITS: list[ExitStack] = []


@pytest.fixture(autouse=True)
def _lane_limits():
    """The lane limits a test sets (the runner's ``--lanes``, :func:`tdlab.train.lanes.limited_to`), lifted after it."""
    with ExitStack() as stack:
        _LIMITS.append(stack)
        yield
        _LIMITS.pop()


def _context(tmp_path, lanes):
    """A run context whose fits train on at most ``lanes`` lanes for the rest of the test."""
    _LIMITS[-1].enter_context(limited_to(lanes))
    w = RunWriter(tmp_path / "out", "probe", run_id=f"lanes{lanes}")
    w.write_config({"experiment": "probe"})
    return w, RunContext(w, progress=False)


@pytest.mark.parametrize("lanes", [1, 2])
def test_fits_are_stored_in_their_order_with_the_numbers_of_fits_one_after_another(tmp_path, one_thread, lanes):
    w, ctx = _context(tmp_path, lanes)
    results = ctx.fit_all(_fits())
    assert [a for a, *_ in w.rows] == sorted(a for a, *_ in w.rows)  # cell0's rows, then cell1's, cell2's
    alone = [Trainer(f.trainer.cfg, progress=False).fit(f.build, SEEDS, TASK) for f in _fits()]
    for f, got, ref in zip(_fits(), results, alone, strict=True):
        assert got.rows == ref.rows and w.arm_rows(f.arm) == ref.rows
        assert all(torch.equal(a[k], b[k]) for a, b in zip(got.states, ref.states, strict=True) for k in a)
        assert ctx.fits[f.arm][0] == SEEDS and (w.path / "arrays" / f"{f.arm}.safetensors").is_file()
    w.release()


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_diverging_fit_is_stored_with_the_others_before_its_error_goes_up(tmp_path, one_thread, lanes):
    w, ctx = _context(tmp_path, lanes)
    with pytest.raises(DivergenceError) as err:
        ctx.fit_all(_fits(bad=1))
    assert err.value.step == 2
    assert {a for a, *_ in w.rows} == {"cell0", "cell1", "cell2"}  # the fits after it trained and were stored
    assert "cell1" not in ctx.fits and {"cell0", "cell2"} <= set(ctx.fits)
    assert max(s for a, s, *_ in w.rows if a == "cell1") < 2  # what it measured before the NaN
    w.release()


def test_a_fit_a_resumed_run_finished_is_not_trained_again(tmp_path, one_thread):
    w, ctx = _context(tmp_path, 2)
    first = ctx.fit_all(_fits()[:1])
    fits = _fits()
    fits[0].trainer.fit = None  # would fail if called
    again = ctx.fit_all(fits)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first[0].states, again[0].states, strict=True) for k in a)
    w.release()


def test_a_stored_fit_keeps_no_checkpoint_and_a_resume_removes_one_an_earlier_attempt_left(tmp_path, one_thread):
    w, ctx = _context(tmp_path, 2)
    folder = w.path / "checkpoints"
    ctx.fit_all(_fits()[:1])
    assert not list(folder.iterdir())  # the trainer checkpointed cell0 after its chunk; stored, it went
    # An attempt killed after storing cell0 but before removing its checkpoints (the untagged one and a
    # --decide round's +2), beside the checkpoint of a fit whose name extends cell0's, not finished:
    for name in ("cell0", "cell0+2", "cell0__more"):
        save_checkpoint(folder / f"{name}.json", {"step": 1}, {"w": torch.ones(1)})
    fits = _fits()
    fits[0].trainer.fit = None  # stored: not trained again
    ctx.fit_all(fits)
    assert sorted(f.name for f in folder.iterdir() if f.suffix == ".json") == ["cell0__more.json"]
    assert len(list(folder.glob("*.safetensors"))) == 1
    w.release()


def test_a_fit_stored_without_states_keeps_its_checkpoint(tmp_path, one_thread):
    """A fit whose result has no states (nothing in ``arrays/``) is trained again on a resume, from its
    checkpoint: that one stays."""
    w, ctx = _context(tmp_path, 1)
    save_checkpoint(w.path / "checkpoints" / "cell0.json", {"step": 1}, {"w": torch.ones(1)})
    ctx._drop_checkpoints("cell0")
    assert (w.path / "checkpoints" / "cell0.json").is_file()
    w.release()


@pytest.mark.parametrize("lanes", [1, 2])
def test_pieces_come_back_in_their_order_and_a_stop_starts_none_after_the_ones_running(tmp_path, one_thread, lanes):
    """:meth:`RunContext.pieces`: every result, in the jobs' order, whatever order they end in; a stop requested
    while ``lanes`` pieces run lets them finish and be yielded, starts no other, then goes up as a stored stop;
    an error of a piece goes up as it is."""
    import threading
    import time

    from tdlab.train.stopping import RunStopped, request_stop, stopping

    w, ctx = _context(tmp_path, lanes)
    assert list(ctx.pieces("p", [lambda k=k: (time.sleep(0.05 * (3 - k)), k * k)[1] for k in range(4)])) == [
        (0, 0),
        (1, 1),
        (2, 4),
        (3, 9),
    ]

    started, running = [], threading.Barrier(lanes)

    def piece(k):
        started.append(k)
        running.wait(timeout=60)  # every lane has its piece before the stop
        request_stop()  # asked by each running piece before it ends, so no lane is free before the stop
        return k

    got = []
    with stopping(signals=False), pytest.raises(RunStopped) as stop:
        for i, v in ctx.pieces("draws", [lambda k=k: piece(k) for k in range(5)]):
            got.append((i, v))
    assert sorted(started) == list(range(lanes)) and got == [(k, k) for k in range(lanes)]
    assert "draws" in str(stop.value) and w.keep

    def bad():
        raise ValueError("piece failed")

    with pytest.raises(ValueError, match="piece failed"):
        list(ctx.pieces("p", [lambda: 1, bad, lambda: 3]))
    w.release()


def test_the_run_machinery_is_not_the_experiments():
    """What the batch and ``--decide`` need of an experiment (its costs, fits, training length, reference draws,
    the seconds of a unit of work, the lanes) lives in their layers (tdlab.costs, tdlab.rounds,
    tdlab.train.lanes), never as a method, attribute or field of ``Experiment`` or ``RunContext``."""
    import ast
    from pathlib import Path

    import tdlab.experiments.base as base

    banned = {
        "fit_work",
        "fit_arms",
        "work",
        "train_length",
        "lengths",
        "reference_draws_field",
        "unit_seconds",
        "lanes",
    }
    tree = ast.parse(Path(base.__file__).read_text(encoding="utf-8"))
    defined = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.add(node.target.id)
            elif isinstance(node, ast.Assign):
                defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assigned = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    assert not banned & (defined | top | assigned | attributes)
