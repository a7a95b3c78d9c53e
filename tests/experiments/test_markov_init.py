"""markov-init analysis: expected values follow (p, q) through theory; verdicts and plateau-escape
steps computed from (synthetic, exactly chosen) stored metrics; a diverged run is kept and labelled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tdlab.experiments.markov_init import MarkovInit, plateau_escape_step
from tdlab.experiments.runner import execute, rebuild
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


def _claims(analysis):
    return {c.id.rsplit("/", 1)[0]: c for c in analysis.claims}


def test_p_plus_q_above_one_standard_expects_h_pi_and_proposed_expects_entropy_rate(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    curves = {"sec2/standard": _flat(hpi), "gpt2/standard": _flat(hpi)}
    cfg, path = make_markov_run(p, q, curves, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    claims = _claims(a)
    assert list(claims) == ARMS
    for arm in ("sec2/standard", "gpt2/standard"):
        assert claims[arm].id == f"{arm}/ends-at-theory-limit"
        assert claims[arm].expected == pytest.approx(hpi, abs=1e-12)
        assert claims[arm].measured == pytest.approx([hpi] * 3)
        assert claims[arm].holds
    for arm in ("sec2/local-to-global", "gpt2/local-to-global"):
        assert claims[arm].id == f"{arm}/ends-at-entropy-rate"
        assert claims[arm].expected == pytest.approx(rate, abs=1e-12)
        assert claims[arm].holds
    assert a.measurements["entropy_rate"] == pytest.approx(rate, abs=1e-12)
    assert a.measurements["marginal_entropy"] == pytest.approx(hpi, abs=1e-12)
    # A standard-init member at the entropy rate instead disagrees with Thm. 2 (gap 0.047 > tol 0.01).
    cfg, path = make_markov_run(p, q, {"sec2/standard": _flat(rate)}, STEPS)
    assert not _claims(MarkovInit().analyse(cfg, Run(path)))["sec2/standard"].holds


def test_p_plus_q_below_one_standard_expects_the_entropy_rate(make_markov_run):
    p, q = 0.2, 0.3
    rate, hpi = _truth(p, q)
    cfg, path = make_markov_run(p, q, {"sec2/standard": _flat(hpi), "gpt2/standard": _flat(rate)}, STEPS)
    claims = _claims(MarkovInit().analyse(cfg, Run(path)))
    for arm in ARMS:
        assert claims[arm].expected == pytest.approx(rate, abs=1e-12)
    assert not claims["sec2/standard"].holds  # stuck at H(pi): not what Thm. 8 predicts for p+q<1
    assert claims["gpt2/standard"].holds


def test_p_plus_q_equal_one_is_iid_and_both_limits_coincide(make_markov_run):
    rate, hpi = _truth(0.3, 0.7)
    assert rate == pytest.approx(hpi, abs=1e-12)
    cfg, path = make_markov_run(0.3, 0.7, {}, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    assert all(c.holds and c.expected == pytest.approx(rate, abs=1e-12) for c in a.claims)
    assert any("cannot tell the two minima apart" in n for n in a.notes)


def test_tolerance_min_fraction_and_nan(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    # Members at H(pi) + 0.009 (in), + 0.011 (out), and NaN (never in).
    finals = [hpi + 0.009, hpi + 0.011, float("nan")]
    curves = {"sec2/standard": [[0.69, 0.68, 0.67, f] for f in finals],
              "gpt2/standard": [[0.69, 0.68, 0.67, f] for f in (hpi - 0.005, hpi + 0.002, hpi + 0.05)]}
    cfg, path = make_markov_run(p, q, curves, STEPS)
    c = _claims(MarkovInit().analyse(cfg, Run(path)))
    assert c["sec2/standard"].per_member == [True, False, False] and not c["sec2/standard"].holds
    assert c["gpt2/standard"].per_member == [True, True, False] and not c["gpt2/standard"].holds
    cfg, path = make_markov_run(p, q, curves, STEPS, overrides=["claims.min_fraction=0.6"])
    c = _claims(MarkovInit().analyse(cfg, Run(path)))
    assert c["gpt2/standard"].holds and not c["sec2/standard"].holds
    cfg, path = make_markov_run(p, q, curves, STEPS, overrides=["claims.tol_nats=0.02"])
    c = _claims(MarkovInit().analyse(cfg, Run(path)))
    assert c["sec2/standard"].per_member == [True, True, False]


def test_all_members_nan_at_the_end_fail_instead_of_using_an_earlier_step(make_markov_run):
    # If every member's last evaluation is NaN, the claim must be judged on NaN (fails), never on the
    # previous evaluation's (here perfect) losses.
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    nan = float("nan")
    curves = {"sec2/standard": [[0.69, hpi, hpi, nan]] * 3, "sec2/local-to-global": [[0.69, rate, rate, nan]] * 3}
    cfg, path = make_markov_run(p, q, curves, STEPS)
    a = MarkovInit().analyse(cfg, Run(path))
    c = _claims(a)
    assert not c["sec2/standard"].holds and not c["sec2/local-to-global"].holds
    assert all(math.isnan(v) for v in a.measurements["sec2/standard"]["final_test_loss"])
    assert c["gpt2/local-to-global"].holds


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
    assert m["sec2/local-to-global"]["plateau_escape_step"] == [100, 100, 100]


def test_plateau_escape_step_function():
    steps = np.array([0, 10, 20, 30])
    assert plateau_escape_step(steps, np.array([0.1, 0.9, 0.9, 0.9]), 0.5) is None  # step 0 does not count
    assert plateau_escape_step(steps, np.array([0.9, 0.9, 0.4, 0.9]), 0.5) == 20
    assert plateau_escape_step(steps, np.array([0.9, 0.5, 0.5, 0.49]), 0.5) == 30  # strictly below
    assert plateau_escape_step(steps, np.array([0.9, np.nan, 0.9, 0.9]), 0.5) is None


def test_rebuild_writes_summary_with_theory_values(make_markov_run):
    p, q = 0.5, 0.8
    rate, hpi = _truth(p, q)
    cfg, path = make_markov_run(p, q, {"sec2/standard": _flat(hpi), "gpt2/standard": _flat(rate)}, STEPS)
    run = rebuild(path)
    s = run.summary
    assert s["status"] == "done" and s["claims_total"] == 4 and s["claims_failed"] == 1
    by_id = {c["id"]: c for c in s["claims"]}
    assert by_id["gpt2/standard/ends-at-theory-limit"]["holds"] is False
    assert by_id["gpt2/standard/ends-at-theory-limit"]["expected"] == pytest.approx(hpi)
    assert by_id["sec2/local-to-global/ends-at-entropy-rate"]["expected"] == pytest.approx(rate)
    assert s["figures"] == ["figures/fig4_test_loss.png"] and (path / "figures" / "fig4_test_loss.png").stat().st_size > 5000


# --- a diverging run is kept, labelled, with what it measured ------------------------------------


def test_diverged_run_keeps_metrics_and_names_member_and_step(monkeypatch, runs_dir):
    import tdlab.experiments.markov_init as mi

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
    cfg = exp.make_config("quick", ["archs=[sec2]", "inits=[standard]", "train.steps=4", "train.seq_len=16",
                                    "train.eval_every=2", "train.eval_batches=1", "train.log_every=1", "model.d=4"], members=2)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "diverged" and (s["member"], s["step"]) == (1, 2)
    assert "member 1" in s["error"] and "step 2" in s["error"]
    assert s["claims"] == [] and (run.path / "report.html").is_file()
    df = run.metrics()
    assert sorted(df[df.name == "test_loss"].member.tolist()) == [0, 1]  # step-0 evaluation kept
    assert set(df[df.name == "train_loss"].step) == {1}
    assert not any(p.name.startswith(".staging") for p in runs_dir.iterdir())
