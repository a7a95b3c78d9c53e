"""icl-lsa-vs-lca (Fig. 2): references are the theory of the setting that ran (closed forms on l, replicate
draws of the l_(N,L_tr) minimiser at the arms' N whose spread enters the interval); the "orders below LSA"
rows exist only where the setting allows that many orders; provenance follows the seed's settings; every
group holds, fails (or, against an uncalibrated threshold of ours, stays not resolved) and stays undecided
on chosen measurements."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.experiments.paper002_cross_attention.lsa_vs_lca import IclLsaVsLca
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star_T, lsa_infinite_context_floor, two_param_init, two_param_stationary

APP_H = MultiModalPrompts()
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest.one_thread
SPREAD = np.array([-1.0, 0.0, 1.0])
OBJ = ("Ltr100", "pop")


@pytest.fixture(scope="module")
def tiny(s2):
    over = [
        "depths=[1,50]",
        "fixed_depth=50",
        "train_contexts=[100]",
        "train.prompts=64",
        "train.steps=40",
        "lsa_train.prompts=64",
        "lsa_train.steps=5",
        "population_prompts=256",
        "test.prompts=16",
        "test.contexts=[20,5000]",
        "fixed_context=5000",
        "test.population_prompts=256",
        "claims.reference_draws=3",
    ]
    return s2.run_tiny(IclLsaVsLca(), over)


def test_references_are_the_setting_that_ran_with_their_replicate_error(tiny, s2):
    cfg, run = tiny
    a = IclLsaVsLca().analyse(cfg, run)
    g = s2.groups(a)
    assert [x.id for x in a.paper] == [
        "lsa-bounded-away-from-bayes",
        "lca-orders-below-lsa",
        "error-decreases-with-depth",
        "one-param-converges-to-minimiser",
        "two-param-converges-to-stationary-point",
    ]
    one = s2.rows(g["one-param-converges-to-minimiser"])
    # on l: the closed form, no Monte-Carlo error
    assert (
        one["pop/T50"].reference.values == (pytest.approx(alpha_star_T(50, APP_H)),)
        and one["pop/T50"].reference.deterministic
    )
    # at L_tr = 100: the run's own replicate draws (3) of the arms' N prompts each, stored under reference/Ltr100, far
    # from alpha*_T at T = 50
    df = run.metrics().query("arm == 'reference/Ltr100'")
    assert set(df.query("name == 'prompts'")["value"]) == {cfg.train.prompts}
    draws = df.query("name == 'alpha_one' and step == 50")["value"].to_numpy()
    ref = one["Ltr100/T50"].reference
    assert ref.n == 3 and sorted(ref.values) == pytest.approx(sorted(draws)) and np.std(draws) > 0
    assert ref.mean < 0.6 * alpha_star_T(50, APP_H)
    assert one["Ltr100/T50"].expected == pytest.approx(ref.mean)
    two = s2.rows(g["two-param-converges-to-stationary-point"])
    assert set(two) == {"Ltr100/T50/alpha", "Ltr100/T50/beta", "pop/T50/alpha", "pop/T50/beta"}  # T = 1 folded
    ta, tb = two_param_stationary(APP_H, 50, *two_param_init(APP_H, 50))
    assert two["pop/T50/alpha"].expected == pytest.approx(ta) and two["pop/T50/beta"].expected == pytest.approx(tb)
    # provenance: the theorems' rows are the seed's on l and at App. H's L_tr; Fig. 2's rows only at L_tr = 100
    assert {k: r.provenance for k, r in one.items()} == {
        "Ltr100/T1": "paper",
        "Ltr100/T50": "paper",
        "pop/T1": "paper",
        "pop/T50": "paper",
    }
    assert {k: r.provenance for k, r in s2.rows(g["error-decreases-with-depth"]).items()} == {
        "one/Ltr100/T1-T50": "paper",
        "one/pop/T1-T50": "ours",
        "two/Ltr100/T1-T50": "paper",
        "two/pop/T1-T50": "ours",
    }


def test_orders_are_tested_only_where_the_setting_allows_them(tiny, s2):
    cfg, run = tiny
    a = IclLsaVsLca().analyse(cfg, run)
    caps = a.measurements["orders_allowed_by_the_setting_at_Lte5000"]
    # at L_tr = 100 GD reaches the l_(L_tr) minimiser (~0.3 alpha*_50), which allows fewer than 2 decades: no row there
    assert caps["one/T50/Ltr100"] < cfg.claims.orders <= caps["one/T50/pop"]
    g = s2.groups(a)["lca-orders-below-lsa"]
    assert set(s2.rows(g)) == {"one/T50/pop", "two/T50/pop"} and all(r.provenance == "ours" for r in g.rows)
    assert g.verdict == "not evaluable" and g.cause == "no paper rows"


def _patch(s2, run, cfg, *, floor_factor, lca_excess, param_scale, ref_spread=1e-3):
    """Chosen measurements: the LSA's excess at L = inf (``floor_factor`` x the floor), every LCA's excess at
    L_te = 5000 (``lca_excess`` at T = 50, 0.2 at T = 1), references at alpha*_T (so that L_tr = 100 allows
    2 decades) and learned parameters ``param_scale`` x their reference, with flat alpha/beta curves."""
    floor = lsa_infinite_context_floor(APP_H)
    m = {
        ("lsa/Ltr100", "pop_excess_mean", 0): floor * (floor_factor + 0.01 * SPREAD),
        ("lsa/Ltr100", "te_excess_mean", 5000): 0.3 + 0.001 * SPREAD,
        ("lsa/Ltr100", "test_loss", None): 0.5,
    }  # trained: test MSE below the zero predictor's (the tiny run's is not)
    arrays = {}
    refs = {T: alpha_star_T(T, APP_H) for T in (1, 50)}
    two = two_param_stationary(APP_H, 50, *two_param_init(APP_H, 50))
    for T, r in refs.items():
        m[("reference/Ltr100", "alpha_one", T)] = r * (1 + ref_spread * SPREAD)
    m[("reference/Ltr100", "alpha_two", 50)] = two[0] * (1 + ref_spread * SPREAD)
    m[("reference/Ltr100", "beta_two", 50)] = two[1] * (1 + ref_spread * SPREAD)
    for model in ("one", "two"):
        for o in OBJ:
            m[(f"{model}/T1/{o}", "te_excess_mean", 5000)] = 0.2 + 0.001 * SPREAD
            m[(f"{model}/T50/{o}", "te_excess_mean", 5000)] = lca_excess + lca_excess / 100 * SPREAD
            for T in (1, 50):
                arm = f"{model}/T{T}/{o}"
                a, b = (refs[T], -refs[T]) if model == "one" or T == 1 else two
                al, be = param_scale * a * (1 + 1e-4 * SPREAD), param_scale * b * (1 + 1e-4 * SPREAD)
                arrays[arm] = {"alpha": al} if model == "one" else {"alpha": al, "beta": be}
                m[(arm, "alpha", None)] = al
                m[(arm, "beta", None)] = -al if model == "one" else be
    return s2.Patched(run, m, arrays)


def test_each_group_holds_and_fails_on_chosen_measurements(tiny, s2):
    cfg, run = tiny
    exp = IclLsaVsLca()
    good = s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, floor_factor=1.2, lca_excess=1e-3, param_scale=1.0)))
    bad = s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, floor_factor=0.25, lca_excess=0.25, param_scale=1.5)))
    assert set(s2.rows(good["lca-orders-below-lsa"])) == {
        "one/T50/Ltr100",
        "one/T50/pop",
        "two/T50/Ltr100",
        "two/T50/pop",
    }
    for gid in (
        "lsa-bounded-away-from-bayes",
        "lca-orders-below-lsa",
        "error-decreases-with-depth",
        "one-param-converges-to-minimiser",
        "two-param-converges-to-stationary-point",
    ):
        assert good[gid].verdict == "holds", (gid, [r.describe() for r in good[gid].rows])
        # the parameter claims' 5 % is ours and uncalibrated (a measured reference has no plant): their fails cannot
        # refute the paper and stay not resolved; the other thresholds are the paper's or calibrated
        want = ("not resolved", "uncalibrated threshold") if "converges" in gid else ("fails", "decided")
        assert (bad[gid].verdict, bad[gid].cause) == want, (gid, [r.describe() for r in bad[gid].rows])


def test_the_references_replicate_spread_widens_the_interval(tiny, s2):
    cfg, run = tiny
    exp = IclLsaVsLca()
    narrow = s2.rows(
        s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, floor_factor=1.2, lca_excess=1e-3, param_scale=1.06)))[
            "one-param-converges-to-minimiser"
        ]
    )["Ltr100/T50"]
    wide = s2.rows(
        s2.groups(
            exp.analyse(cfg, _patch(s2, run, cfg, floor_factor=1.2, lca_excess=1e-3, param_scale=1.06, ref_spread=0.05))
        )["one-param-converges-to-minimiser"]
    )["Ltr100/T50"]
    # 6 % off the reference, tolerance 5 %: a sharp reference decides fails (not resolved only because the 5 % is an
    # uncalibrated threshold of ours), a reference known to ±5 % cannot decide at all
    assert (narrow.verdict, narrow.cause) == ("not resolved", "uncalibrated threshold")
    assert (wide.verdict, wide.cause) == ("not resolved", "spread")
    assert wide.interval.half_width > 5 * narrow.interval.half_width


def test_a_parameter_still_moving_or_one_member_far_off_is_not_a_verdict(tiny, s2):
    cfg, run = tiny
    exp = IclLsaVsLca()
    base = _patch(s2, run, cfg, floor_factor=1.2, lca_excess=1e-3, param_scale=1.0)
    moving = dict(base._m)
    moving[("one/T50/pop", "alpha", 40)] = 2 * alpha_star_T(50, APP_H)  # the last logged alpha still far away
    row = s2.rows(s2.groups(exp.analyse(cfg, s2.Patched(run, moving, base._a)))["one-param-converges-to-minimiser"])[
        "pop/T50"
    ]
    assert row.verdict == "not resolved" and "still moving" in row.reason
    wide = dict(base._m)
    wide[("lsa/Ltr100", "pop_excess_mean", 0)] = np.array([0.05, 0.5, 0.5])
    row = s2.rows(s2.groups(exp.analyse(cfg, s2.Patched(run, wide, base._a)))["lsa-bounded-away-from-bayes"])["lsa"]
    assert row.verdict == "not resolved"
