"""Stopping cleanly: wall-time checkpoints, a stop on request or at a deadline saves the fit's state and
raises ``RunStopped``; resuming from that checkpoint ends with the numbers of a fit never stopped."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.checkpoint import load_checkpoint
from tdlab.train.stopping import RunStopped, Stopping, current, request_stop, stopping
from tdlab.train.trainer import TrainConfig, Trainer

TASK = MarkovChain(0.5, 0.8)
MODEL = GPTConfig(arch="sec2", d=4, max_len=16)
CFG = TrainConfig(steps=30, batch=4, seq_len=16, eval_every=5, eval_batches=1, log_every=2, chunk=2)
SEEDS = member_seeds(0, 4)  # two chunks of two members


def _build(seeds):
    return GPT(MODEL, seeds)


def _trainer(checkpoint, probes=()):
    return Trainer(CFG, progress=False, checkpoint=checkpoint, probes=list(probes), probe_every=1)


def _zero_probe(model):
    return {"probe": torch.zeros(len(model.seeds))}


def _stop_after(step):
    """A probe (called after every step, and once before the first) that asks for a stop after ``step``."""
    calls = {"n": 0}

    def probe(model):
        calls["n"] += 1
        if calls["n"] == step + 1:
            request_stop()
        return _zero_probe(model)

    return probe


def _same(a, b):
    assert a.rows == b.rows and a.rows
    assert len(a.states) == len(b.states) == len(SEEDS)
    for sa, sb in zip(a.states, b.states, strict=True):
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_policy_is_due_by_time_by_request_and_at_the_deadline():
    p = Stopping()
    assert not p.due(time.monotonic() - 1e6) and not p.stop_requested()
    assert Stopping(every_s=10).due(time.monotonic() - 11) and not Stopping(every_s=10).due(time.monotonic())
    assert Stopping(deadline=time.monotonic() - 1).stop_requested()
    p.requested.set()
    assert p.due(time.monotonic()) and p.stop_requested()
    with pytest.raises(ValueError), stopping(every_s=0):
        pass


def test_sigterm_inside_the_block_asks_for_a_stop_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with stopping() as policy:
        assert current() is policy
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # the handler runs between bytecodes of the main thread
            if policy.requested.is_set():
                break
            time.sleep(0.01)
        assert policy.requested.is_set()
    assert current() is None and signal.getsignal(signal.SIGTERM) == before


def test_a_stop_saves_the_checkpoint_and_the_resumed_fit_equals_one_never_stopped(tmp_path):
    full = _trainer(tmp_path / "full.json", [_zero_probe]).fit(_build, SEEDS, TASK)
    ck = tmp_path / "stopped.json"
    with stopping(), pytest.raises(RunStopped) as info:
        _trainer(ck, [_stop_after(12)]).fit(_build, SEEDS, TASK)
    assert info.value.step == 12
    meta, _ = load_checkpoint(ck)
    assert meta["finished"] == 0 and meta["chunk"]["step"] == 12  # mid-chunk, mid-run
    # Resumed under a standing stop request: one more step, then stopped again (a second interruption).
    with stopping():
        request_stop()
        with pytest.raises(RunStopped) as again:
            _trainer(ck, [_zero_probe]).fit(_build, SEEDS, TASK)
    assert again.value.step == 13
    resumed = _trainer(ck, [_zero_probe]).fit(_build, SEEDS, TASK)
    _same(resumed, full)


def test_a_deadline_in_the_past_stops_after_the_first_step_and_wall_time_checkpoints_keep_progress(tmp_path):
    ck = tmp_path / "ck.json"
    with stopping(until_s=0), pytest.raises(RunStopped) as info:
        _trainer(ck).fit(_build, SEEDS, TASK)
    assert info.value.step == 1
    # Every step due (a tiny interval): a checkpoint after every step; the fit runs on to its end.
    ck2 = tmp_path / "every.json"
    with stopping(every_s=1e-9):
        result = _trainer(ck2).fit(_build, SEEDS, TASK)
    meta, _ = load_checkpoint(ck2)
    assert meta["finished"] == len(SEEDS) and len(result.states) == len(SEEDS)
    _same(result, _trainer(tmp_path / "plain.json").fit(_build, SEEDS, TASK))


def test_a_fit_without_a_checkpoint_file_never_stops():
    with stopping(until_s=0):
        result = Trainer(CFG, progress=False).fit(_build, SEEDS, TASK)
    assert len(result.states) == len(SEEDS)
