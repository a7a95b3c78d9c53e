"""Lanes: independent jobs at once on threads, results handed back in job order, failures handed back
with their job, and two fits on two lanes compute bit for bit what they compute one after the other."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.lanes import in_lanes, lane_count, limit, limited_to, usable_cores
from tdlab.train.trainer import TrainConfig, Trainer


def test_results_come_back_in_job_order_whatever_order_the_jobs_end_in():
    ended = []

    def job(i, wait):
        def run():
            time.sleep(wait)
            ended.append(i)
            return i * i

        return run

    got = list(in_lanes([job(0, 0.2), job(1, 0.0), job(2, 0.05)], lanes=2))
    assert [i for i, _ in got] == [0, 1, 2]
    assert [o.value for _, o in got] == [0, 1, 4] and all(o.error is None for _, o in got)
    assert ended[0] == 1  # job 1 ended first, on the second lane, while job 0 still ran


def test_jobs_on_two_lanes_run_at_the_same_time():
    both = threading.Barrier(2, timeout=10)  # passes only when both jobs wait on it at once
    names = []

    def job():
        names.append(threading.current_thread().name)
        both.wait()
        return True

    assert [o.value for _, o in in_lanes([job, job], lanes=2)] == [True, True]
    assert len(set(names)) == 2 and all(n.startswith("tdlab-lane-") for n in names)


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_failing_job_is_handed_back_with_its_index_and_the_others_still_run(lanes):
    def bad():
        raise ValueError("boom")

    got = dict(in_lanes([lambda: 1, bad, lambda: 3], lanes=lanes))
    assert got[0].value == 1 and got[2].value == 3
    assert isinstance(got[1].error, ValueError) and str(got[1].error) == "boom"


def test_one_lane_runs_the_jobs_in_this_thread_one_after_another():
    here = threading.current_thread()
    assert all(o.value is here for _, o in in_lanes([threading.current_thread] * 3, lanes=1))


def test_lane_count(one_thread):
    assert lane_count(None, 5, "cpu") == min(usable_cores(), 5)
    assert lane_count(2, 5, "cpu") == 2 and lane_count(8, 3, "cpu") == 3 and lane_count(4, 0, "cpu") == 1
    assert lane_count(4, 5, "cuda") == 1  # off the CPU, fits go one after another
    with pytest.raises(ValueError, match="lanes must be >= 1"):
        lane_count(0, 5, "cpu")


def test_no_lanes_where_torch_runs_more_than_one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert lane_count(4, 5, "cpu") == 1  # another team's OpenMP threads would share the lanes' cores
    finally:
        torch.set_num_threads(old)


def test_limited_to_sets_the_lane_count_within_its_block():
    assert limit() is None
    with limited_to(1):
        assert limit() == 1
        with limited_to(2):
            assert limit() == 2
        assert limit() == 1
    assert limit() is None
    with pytest.raises(ValueError, match="lanes must be >= 1"), limited_to(0):
        pass


def test_two_fits_on_two_lanes_equal_the_same_fits_one_after_another(one_thread):
    task = MarkovChain(0.3, 0.6)
    cfg = TrainConfig(steps=8, batch=8, seq_len=32, eval_every=4, eval_batches=1, log_every=2)
    seeds = member_seeds(5, 2)

    def fit(arch):
        model = GPTConfig(arch=arch, d=8, max_len=32)
        return lambda: Trainer(cfg, progress=False).fit(lambda s: GPT(model, s), seeds, task)

    jobs = [fit("sec2"), fit("gpt2")]
    apart = [o.value for _, o in in_lanes(jobs, lanes=1)]
    together = [o.value for _, o in in_lanes(jobs, lanes=2)]
    for a, b in zip(apart, together, strict=True):
        assert a.rows == b.rows and len(a.rows) > 0
        for sa, sb in zip(a.states, b.states, strict=True):
            assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
