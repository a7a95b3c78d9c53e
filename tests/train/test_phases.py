"""The phase clock: exclusive time per phase, a no-op when no clock runs, and the trainers' marks
change no number."""

from __future__ import annotations

import time

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.phases import PhaseClock, phase
from tdlab.train.trainer import TrainConfig, Trainer


def test_nested_phases_count_their_time_once():
    with PhaseClock() as clock:
        with phase("outer"):
            time.sleep(0.02)
            with phase("inner"):
                time.sleep(0.04)
        time.sleep(0.01)
    assert clock.seconds["inner"] == pytest.approx(0.04, abs=0.02)
    assert clock.seconds["outer"] == pytest.approx(0.02, abs=0.015)  # the inner phase is not counted twice
    assert clock.calls == {"outer": 1, "inner": 1}
    assert clock.total == pytest.approx(sum(clock.seconds.values()) + clock.other)
    assert list(clock.shares())[-1] == "other" and sum(clock.shares().values()) == pytest.approx(1.0)


def test_without_a_clock_a_mark_does_nothing_and_clocks_do_not_nest():
    with phase("x"):
        pass
    with PhaseClock(), pytest.raises(RuntimeError, match="already running"), PhaseClock():
        pass


def test_the_trainer_marks_its_phases_and_they_change_no_number():
    cfg = TrainConfig(steps=6, batch=2, seq_len=8, eval_every=3, eval_batches=1, log_every=2)
    model = GPTConfig(arch="sec2", d=4, max_len=8)

    def fit():
        return Trainer(cfg, progress=False).fit(lambda s: GPT(model, s), member_seeds(0, 2), MarkovChain(0.5, 0.8))

    plain = fit()
    with PhaseClock() as clock:
        timed = fit()
    assert plain.rows == timed.rows
    assert all(torch.equal(a[k], b[k]) for a, b in zip(plain.states, timed.states, strict=True) for k in a)
    for name in ("data", "forward", "backward", "optimiser", "evaluation", "logging"):
        assert clock.calls[name] >= 1, name
    assert clock.calls["forward"] == 6 and clock.calls["backward"] == 6
    assert sum(clock.seconds.values()) <= clock.total


def test_phases_on_two_threads_nest_on_their_own_thread_and_add_up():
    import threading

    both = threading.Barrier(2, timeout=10)

    def lane(name):
        with phase(name):
            both.wait()  # both threads are inside their phase at once
            time.sleep(0.05)
            with phase(f"{name}-inner"):
                time.sleep(0.05)

    with PhaseClock() as clock:
        threads = [threading.Thread(target=lane, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for n in ("a", "b"):  # each thread's inner phase is taken out of its own outer phase, not the other's
        assert clock.seconds[n] == pytest.approx(0.05, abs=0.03)
        assert clock.seconds[f"{n}-inner"] == pytest.approx(0.05, abs=0.03)
    assert sum(clock.seconds.values()) > clock.total and clock.other == 0.0  # thread time adds up
