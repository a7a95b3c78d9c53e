"""markov-init: expected values follow (p, q) through theory; verdicts and plateau-escape steps
judged from (synthetic, exactly chosen) stored metrics; reaching claims need the plateau left first;
escape steps are discrete and censored, so few members never give a certain direction; a diverged
run is kept and labelled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit
from tdlab.probes.curves import plateau_escape_step
from tdlab.runner import execute, rebuild
from tdlab.runs import Run

STEPS = [0, 100, 200, 300]
ARMS = ["sec2/standard", "sec2/local-to-global", "gpt2/standard", "gpt2/local-to-global"]


def _h(x):
    return -x * math.log(x) - (1 - x) * math.log(1 - x)


def _truth(p, q):
    pi1 = p / (p + q)
    return (1 - pi1) * _h(p) + pi1 * _h(q), _h(pi1)  # entropy rate, H(pi)


def _flat(v, members=3):
    return [[v] * len(STEPS) for _ in range(members)]


def _rows(analysis):
    """``{arm: end-state row}`` and ``{arch: direction row}``."""
    groups = {g.id: g for g in analysis.groups}
    end = {}
    for gid, init in (
        ("proposed-init-ends-at-global-minimum", "local-to-global"),
        ("standard-init-ends-at-theory-limit", "standard"),
    ):
        for r in groups[gid].rows:
            end[f"{r.id.rsplit('/', 1)[1]}/{init}"] = r
    later = {r.id.rsplit("/", 1)[1]: r for r in groups["standard-init-leaves-plateau-later"].rows}
    return end, later


def _near(v, spread=0.001, members=3, start=0.69):
    """Curves that start at ``start`` and end at ``v`` plus a small member-to-member spread."""
    return [[start, v + d, v + d, v + d] for d in np.linspace(-spread, spread, members)]


def test_p_plus_q_above_one_standard_expects_h_pi_and_proposed_expects_entropy_rate(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    curves = {
        "sec2/standard": _near(hpi),
        "gpt2/standard": _near(hpi),
        "sec2/local-to-global": _near(rate),
        "gpt2/local-to-global": _near(rate),
    }
    cfg, path = make_markov_run(p, q, curves, STEPS, ["train.steps=8000"])  # the seed's length (Table 2)
    a = MarkovInit().analyse(cfg, Run(path))
    assert [g.id for g in a.paper] == [
        "proposed-init-ends-at-global-minimum",
        "standard-init-ends-at-theory-limit",
        "standard-init-leaves-plateau-later",
    ]
    end, _ = _rows(a)
    assert sorted(end) == sorted(ARMS)
    for arm in ARMS:
        assert end[arm].expected == 0.0 and end[arm].verdict == "holds"
    # Shorter than the seed's 8,000 steps, "stays at H(π)" (Thm. 2) cannot hold yet; reaching the minimum can.
    short_cfg, short_path = make_markov_run(p, q, curves, STEPS)
    assert short_cfg.train.steps < 8000
    short, _ = _rows(MarkovInit().analyse(short_cfg, Run(short_path)))
    for arm in ARMS:
        want = ("not resolved", "shorter than the seed's length") if arm.endswith("/standard") else ("holds", "decided")
        assert (short[arm].verdict, short[arm].cause) == want, arm
        assert end[arm].measured.values == pytest.approx([-0.001, 0.0, 0.001], abs=1e-12)  # gap to the reference
    assert end["sec2/standard"].learning_required is False and end["sec2/local-to-global"].learning_required
    assert a.measurements["sec2/standard"]["final_gap_to_unigram"] == pytest.approx([-0.001, 0.0, 0.001], abs=1e-12)
    assert a.measurements["entropy_rate"] == pytest.approx(rate, abs=1e-12)
    assert a.measurements["marginal_entropy"] == pytest.approx(hpi, abs=1e-12)
    # A wrong measurement: a standard-init arm at the entropy rate disagrees with Thm. 2 (gap 0.047 > tol 0.01).
    cfg, path = make_markov_run(p, q, {"sec2/standard": _near(rate)}, STEPS)
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert end["sec2/standard"].verdict == "fails"
    assert end["sec2/standard"].mean == pytest.approx(rate - hpi, abs=1e-9)


def test_p_plus_q_below_one_standard_expects_the_entropy_rate(make_markov_run):
    p, q = 0.2, 0.3
    rate, hpi = _truth(p, q)
    cfg, path = make_markov_run(p, q, {"sec2/standard": _near(hpi), "gpt2/standard": _near(rate)}, STEPS)
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    # still on the H(π) plateau at the end: Thm. 8's global minimum may be reached later, so the run's
    # budget decides nothing (not evaluable, the stage named), never "fails"
    assert end["sec2/standard"].verdict == "not evaluable" and end["sec2/standard"].cause == "stage not reached"
    assert "left the unigram stage" in end["sec2/standard"].reason
    assert end["gpt2/standard"].verdict == "holds"
    # past the plateau but stopped short of the entropy rate: a finding
    cfg, path = make_markov_run(p, q, {"sec2/standard": _near(rate + 0.05)}, STEPS)
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert end["sec2/standard"].verdict == "fails"


def test_the_proposed_init_on_the_plateau_is_not_evaluable_not_failing(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    cfg, path = make_markov_run(p, q, {"sec2/local-to-global": _near(hpi), "gpt2/local-to-global": _near(rate)}, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    end, _ = _rows(a)
    assert end["sec2/local-to-global"].verdict == "not evaluable"
    assert a.result("proposed-init-ends-at-global-minimum").verdict == "holds"  # gpt2's row decides
    cfg, path = make_markov_run(p, q, {"sec2/local-to-global": _near(hpi), "gpt2/local-to-global": _near(hpi)}, STEPS)
    g = MarkovInit().analyse(cfg, Run(path)).result("proposed-init-ends-at-global-minimum")
    assert g.verdict == "not evaluable" and g.cause == "stage not reached"


def test_p_plus_q_equal_one_is_iid_and_both_limits_coincide(make_markov_run):
    rate, hpi = _truth(0.3, 0.7)
    assert rate == pytest.approx(hpi, abs=1e-12)
    cfg, path = make_markov_run(0.3, 0.7, {arm: _near(rate) for arm in ARMS}, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    end, _ = _rows(a)
    assert all(r.verdict == "holds" for r in end.values())
    assert any("cannot tell the two minima apart" in n for n in a.notes)


def test_member_spread_decides_between_holds_fails_and_not_resolved(make_markov_run):
    p, q = 0.5, 0.8
    _rate, hpi = _truth(p, q)
    curves = {
        "sec2/standard": [[0.69, hpi + d, hpi + d, hpi + d] for d in (0.002, 0.016, 0.009)],  # straddles +0.01
        "gpt2/standard": [[0.8, hpi + d, hpi + d, hpi + d] for d in (0.03, 0.031, 0.029)],  # clearly outside
    }
    cfg, path = make_markov_run(p, q, curves, STEPS)
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert end["sec2/standard"].verdict == "not resolved"
    assert end["gpt2/standard"].verdict == "fails"
    # "stays at H(π)" holds only from a run of the seed's length (8,000 steps)
    cfg, path = make_markov_run(p, q, curves, STEPS, overrides=["claims.tol_nats=0.05", "train.steps=8000"])
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert end["sec2/standard"].verdict == "holds" and end["gpt2/standard"].verdict == "holds"


def test_a_curve_still_falling_at_the_end_is_not_resolved(make_markov_run):
    p, q = 0.5, 0.8
    _rate, hpi = _truth(p, q)
    steps = list(range(0, 1001, 50))
    falling = [
        [hpi + 0.2 - 2e-4 * s + d for s in steps] for d in (-0.001, 0.0, 0.001)
    ]  # ends at hpi, -0.02 per 100 steps
    cfg, path = make_markov_run(p, q, {"sec2/standard": falling}, steps)
    end, _ = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert end["sec2/standard"].verdict == "not resolved" and "still moving" in end["sec2/standard"].reason
    assert end["sec2/standard"].measured.drift == pytest.approx(-0.02, rel=1e-6)


def test_escape_direction_is_an_exact_paired_test_on_discrete_censored_steps(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    thr = hpi - 0.25 * (hpi - rate)
    below = thr - 0.01
    # standard leaves at 300 (or 200), proposed at 100: standard later in every member, by ≥ 1 interval
    late = [[0.69, hpi, hpi, below]] * 6  # two intervals after the proposed init's: certainly later
    early = [[0.69, below, below, below]] * 6
    cfg, path = make_markov_run(p, q, {"sec2/standard": late, "sec2/local-to-global": early}, STEPS, members=6)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    r = later["sec2"]
    assert r.verdict == "holds" and r.paired and "sign test" in r.reason
    assert r.measured.values == (300.0,) * 6 and r.reference.values == (100.0,) * 6
    assert r.measured.resolution == 100.0
    # three members can never decide an exact sign test at 95 % (2 · 1/8 = 0.25)
    cfg, path = make_markov_run(p, q, {"sec2/standard": late[:3], "sec2/local-to-global": early[:3]}, STEPS)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert later["sec2"].verdict == "not resolved" and later["sec2"].p_hold == pytest.approx(0.25)
    # one evaluation interval apart in every member (the quick gpt2 run: −100 steps in 3/3): no certain verdict
    one_early = [[0.69, below, below, below]] * 3
    one_late = [[0.69, hpi, below, below]] * 3
    cfg, path = make_markov_run(p, q, {"gpt2/standard": one_early, "gpt2/local-to-global": one_late}, STEPS)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert later["gpt2"].verdict == "not resolved" and later["gpt2"].interval.lo == -200.0
    # a member that never leaves is censored at the last evaluation: a lower bound of its escape step
    never = [[0.69, hpi, hpi, hpi]] + [[0.69, hpi, hpi, below]] * 2
    cfg, path = make_markov_run(p, q, {"gpt2/standard": never}, STEPS)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert later["gpt2"].measured.values == (300.0, 300.0, 300.0)
    assert later["gpt2"].measured.censored == (True, False, False)
    # the wrong direction: the proposed init leaves later than the standard one, in 6/6 members -> fails
    cfg, path = make_markov_run(p, q, {"sec2/standard": early, "sec2/local-to-global": late}, STEPS, members=6)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert later["sec2"].verdict == "fails"
    # both arms never leave: nothing is known about the direction
    stuck = [[0.69, hpi, hpi, hpi]] * 6
    cfg, path = make_markov_run(p, q, {"sec2/standard": stuck, "sec2/local-to-global": stuck}, STEPS, members=6)
    _, later = _rows(MarkovInit().analyse(cfg, Run(path)))
    assert later["sec2"].verdict == "not resolved" and later["sec2"].cause == "censored"


def test_all_members_nan_at_the_end_are_never_judged_on_an_earlier_step(make_markov_run):
    # If every member's last evaluation is NaN, the arm did not train (non-finite values): its rows are
    # not evaluable, never judged on the previous evaluation's (here perfect) losses.
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    nan = float("nan")
    curves = {"sec2/standard": [[0.69, hpi, hpi, nan]] * 3, "sec2/local-to-global": [[0.69, rate, rate, nan]] * 3}
    cfg, path = make_markov_run(p, q, curves, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    end, _ = _rows(a)
    for arm in ("sec2/standard", "sec2/local-to-global"):
        assert end[arm].verdict == "not evaluable" and "non-finite" in end[arm].reason
        assert all(math.isnan(v) for v in end[arm].measured.values)
    assert all(math.isnan(v) for v in a.measurements["sec2/standard"]["final_test_loss"])


def test_plateau_escape_steps_are_measured_from_the_curves(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    thr = hpi - 0.25 * (hpi - rate)
    curves = {
        # member 0 leaves the plateau at step 200, member 1 never, member 2 at step 100.
        "sec2/standard": [[0.69, hpi, thr - 1e-4, rate], [0.69, hpi, hpi, hpi], [0.69, thr - 0.01, rate, rate]],
    }
    cfg, path = make_markov_run(p, q, curves, STEPS)
    m = MarkovInit().analyse(cfg, Run(path)).measurements
    assert m["escape_threshold"] == pytest.approx(thr, abs=1e-12)
    assert m["sec2/standard"]["plateau_escape_step"] == [200, None, 100]
    assert m["sec2/standard"]["escaped_fraction"] == pytest.approx(2 / 3)
    assert m["sec2/standard"]["final_test_loss"] == pytest.approx([rate, hpi, rate])
    # the members' mean and spread are the table's, no note repeats them
    assert m["sec2/standard"]["final_test_loss_mean"] == pytest.approx((2 * rate + hpi) / 3)
    assert m["sec2/standard"]["final_test_loss_std"] == pytest.approx(np.std([rate, hpi, rate]))
    assert m["sec2/local-to-global"]["plateau_escape_step"] == [100, 100, 100]


def test_plateau_escape_step_function():
    steps = np.array([0, 10, 20, 30])
    assert plateau_escape_step(steps, np.array([0.1, 0.9, 0.9, 0.9]), 0.5) is None  # step 0 does not count
    assert plateau_escape_step(steps, np.array([0.9, 0.9, 0.4, 0.9]), 0.5) == 20
    assert plateau_escape_step(steps, np.array([0.9, 0.5, 0.5, 0.49]), 0.5) == 30  # strictly below
    assert plateau_escape_step(steps, np.array([0.9, np.nan, 0.9, 0.9]), 0.5) is None


def test_rebuild_writes_grouped_summary_and_gates_untrained_arms(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    curves = {
        "sec2/standard": _near(hpi),
        "gpt2/standard": _near(rate),
        "sec2/local-to-global": _near(rate),
        "gpt2/local-to-global": _flat(0.7),
    }  # never moved
    _cfg, path = make_markov_run(p, q, curves, STEPS, ["train.steps=8000"])  # the seed's length: "stays" can hold
    run = rebuild(path)
    s = run.summary
    assert s["status"] == "done" and s["claims_total"] == 3 and s["sanity"] == []
    groups = {g["id"]: g for g in s["claims"]}
    std = {r["id"]: r for r in groups["standard-init-ends-at-theory-limit"]["rows"]}
    assert std["standard-init-ends-at-theory-limit/gpt2"]["verdict"] == "fails"  # at the rate, not at H(pi)
    assert std["standard-init-ends-at-theory-limit/sec2"]["verdict"] == "holds"
    prop = {r["id"]: r for r in groups["proposed-init-ends-at-global-minimum"]["rows"]}
    assert prop["proposed-init-ends-at-global-minimum/gpt2"]["verdict"] == "not evaluable"
    assert "gpt2/local-to-global not trained" in prop["proposed-init-ends-at-global-minimum/gpt2"]["reason"]
    assert s["arms"]["gpt2/local-to-global"]["status"] == "not trained"
    assert s["arms"]["sec2/standard"]["status"] == "trained"
    assert s["claims_failed"] == sum(g["verdict"] == "fails" for g in s["claims"]) >= 1
    assert (
        s["figures"] == ["figures/fig4_test_loss.png"]
        and (path / "figures" / "fig4_test_loss.png").stat().st_size > 5000
    )


# --- a diverging run is kept, labelled, with what it measured ------------------------------------


def test_diverged_run_keeps_metrics_and_names_member_and_step(monkeypatch, runs_dir, stored_fits):
    import tdlab.experiments.paper000_local_to_global.initialisation as mi

    class NaNGPT(mi.GPT):
        calls = 0

        def forward(self, tokens):
            out = super().forward(tokens)
            if self.training:
                self.calls += 1
                if self.calls == 2:
                    out = out.clone()
                    out[1] = float("nan")
            return out

    monkeypatch.setattr(mi, "GPT", NaNGPT)
    exp = MarkovInit()
    cfg = exp.make_config(
        "quick",
        [
            "archs=[sec2]",
            "inits=[standard]",
            "train.steps=4",
            "train.seq_len=16",
            "train.eval_every=2",
            "train.eval_batches=1",
            "train.log_every=1",
            "model.d=4",
        ],
        members=2,
    )
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "diverged" and (s["member"], s["step"]) == (1, 2)
    assert "member 1" in s["error"] and "step 2" in s["error"]
    assert s["claims"] == [] and (run.path / "report.html").is_file()
    from tdlab.costs.work import fit_arms  # what tdlab batch reads of a stopped run

    assert stored_fits(run) == {"sec2__standard"} and fit_arms(exp, cfg) == ["sec2/standard"]  # what it declares
    df = run.metrics()
    assert sorted(df[df.name == "test_loss"].member.tolist()) == [0, 1]  # step-0 evaluation kept
    assert set(df[df.name == "train_loss"].step) == {1}
    assert not any(p.name.startswith(".staging") for p in runs_dir.iterdir())
