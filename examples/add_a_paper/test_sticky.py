"""Seed 999's tests (an example paper). In tdlab: ``tests/tasks/test_sticky.py`` for the task and
``tests/experiments/test_sticky_copy.py`` for the experiment, run by ``python -m pytest -q``.

The task against its closed form; every declared claim planted to hold and to fail (the judge decides,
not the experiment); the experiment end to end, a short run judged from its stored metrics.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from paper999_sticky.copying import CLAIMS, StickyCopy
from paper999_sticky.task import StickyTokens, entropy_rate

from tdlab import runner
from tdlab.claims import Measurements, Sample, judge


def test_entropy_rate_is_the_bayes_predictors_loss_on_samples():
    task = StickyTokens(vocab=5, r=0.3)
    x = task.sample([torch.Generator().manual_seed(s) for s in range(2)], batch=400, length=64)
    assert x.shape == (2, 400, 64) and int(x.min()) >= 0 and int(x.max()) < 5
    probs = task.optimal_probs(x[..., :-1])
    nll = -torch.log(probs.gather(-1, x[..., 1:].unsqueeze(-1))).mean()
    assert float(nll) == pytest.approx(entropy_rate(5, 0.3), abs=0.01)
    assert entropy_rate(5, 0.0) == pytest.approx(math.log(5))  # no stickiness: i.i.d. uniform


def test_each_member_draws_from_its_own_stream():
    task = StickyTokens()
    one = task.sample([torch.Generator().manual_seed(7)], batch=3, length=10)
    two = task.sample([torch.Generator().manual_seed(1), torch.Generator().manual_seed(7)], batch=3, length=10)
    assert torch.equal(one[0], two[1])


@pytest.mark.parametrize("spec", CLAIMS, ids=lambda s: s.id)
def test_every_claim_can_hold_and_fail(spec):
    cfg = StickyCopy().make_config("quick")
    expected = 0.0 if spec.id == "ends-at-entropy-rate" else entropy_rate(cfg.task.vocab, cfg.task.r)
    tol = cfg.claims.tol_nats if spec.id == "ends-at-entropy-rate" else 0.05
    spread = tol / 20 * np.linspace(-1, 1, 8)
    for centre, verdict in ((expected, "holds"), (expected + 3 * tol, "fails")):
        m = Measurements()
        m.row(spec.id, "gpt2", Sample(tuple(centre + spread)), arms=["gpt2"])
        (group,) = judge([spec], m, cfg)
        assert group.verdict == verdict, group.rows[0].describe()


def test_a_short_run_is_judged_from_its_stored_metrics(tmp_path):
    exp = StickyCopy()
    cfg = exp.make_config("quick", ["train.steps=60"], members=2)
    run = runner.execute(exp, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done" and [g["id"] for g in s["claims"]] == ["ends-at-entropy-rate"]
    assert [g["id"] for g in s["sanity"]] == ["bayes-loss-is-entropy-rate"]
    assert (run.path / "figures" / "test_loss.png").is_file() and (run.path / "report.html").is_file()
    # re-judged from the stored run, the verdicts are the same: nothing decides outside the claims layer
    again = exp.analyse(cfg, run)
    assert [g.verdict for g in again.paper] == [g["verdict"] for g in s["claims"]]
