"""Seed 002 experiments: theory helpers behind the claims, the whitening diagnostic, and a tiny
end-to-end ``execute`` of each experiment whose ``analyse`` yields claims with computed verdicts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.icl import (
    IclAblations,
    IclLandscape,
    IclLsaVsLca,
    IclUnrestricted,
    baseline_rows,
    lsa_infinite_context_floor,
    two_param_init,
    two_param_stationary,
    whitening_by_layer,
    whitening_from_stats,
)
from tdlab.experiments.runner import execute
from tdlab.models.linear_attention import LCA, LSA
from tdlab.runs import Run
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star, alpha_star_T, infinite_context_excess_risk, sample_mean_risk, z_quadrature
from tdlab.train.regression import PromptStats, population_stats, predict, sample_stats

APP_H = MultiModalPrompts()


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest.one_thread


def test_lsa_floor_is_min_over_c_of_the_odd_part_and_an_lsa_attains_it():
    z, w = z_quadrature(APP_H)
    c = np.sum(w * (z - 1)) / np.sum(w * (z - 1) * z)
    floor = np.sum(w * (z - 1) * z * (c - 1 / z) ** 2)
    assert lsa_infinite_context_floor(APP_H) == pytest.approx(floor, rel=1e-9)
    assert floor == pytest.approx(0.2060, abs=1e-3)
    # W^KQ = C.1 (K_x = I), last row of W^PV = (0, c): at infinite context the LSA predicts c zeta m.x_q
    lsa = LSA(APP_H.d, [0], dtype=torch.float64)
    with torch.no_grad():
        lsa.W_PV[0, -1, -1] = float(c)
    st = population_stats(APP_H, [torch.Generator().manual_seed(0)], 40_000)
    with torch.no_grad():
        exc = ((predict(lsa, st) - st.bayes) ** 2).mean()
    assert float(exc) == pytest.approx(floor, rel=0.1)


def test_two_parameter_stationary_point_is_stationary_and_tends_to_alpha_star():
    for T in (2, 20):
        a, b = two_param_stationary(APP_H, T, *two_param_init(APP_H, T))
        h = 1e-7
        ga = (infinite_context_excess_risk(a + h, T, APP_H, beta=b) - infinite_context_excess_risk(a - h, T, APP_H, beta=b)) / (2 * h)
        gb = (infinite_context_excess_risk(a, T, APP_H, beta=b + h) - infinite_context_excess_risk(a, T, APP_H, beta=b - h)) / (2 * h)
        assert abs(ga) < 1e-5 and abs(gb) < 1e-5
    assert a == pytest.approx(alpha_star(APP_H), rel=0.02) and b == pytest.approx(-alpha_star(APP_H), rel=0.02)
    assert two_param_init(APP_H, 3)[1] == pytest.approx(-1 / 51)


def test_whitening_from_statistics_equals_the_raw_diagnostic():
    task = MultiModalPrompts(dims=(3, 2))
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    b = task.sample(gens, 7, 30, dtype=torch.float64)
    model = LCA(task.d, 4, [1, 2], param="diagonal", alpha0=0.03, sigma_init=0.01, dtype=torch.float64)
    raw = whitening_by_layer(model, b.X, b.y, b.x_query)
    assert raw.shape == (2, 5, 7)
    assert torch.allclose(raw[:, 0], torch.ones_like(raw[:, 0]))  # F_0 = 0
    assert torch.allclose(whitening_from_stats(model, PromptStats.from_batch(b)), raw, atol=1e-10)


def test_sample_mean_baseline_matches_its_risk():
    st = sample_stats(MultiModalPrompts(dims=(3, 2)), [torch.Generator().manual_seed(3)], 20_000, 4)
    rows = {n: v for _, _, n, v in baseline_rows({4: st})}
    assert rows["sample_mean_mse"] == pytest.approx(sample_mean_risk(None, 4), rel=0.05)


# ---------------------------------------------------------------------------------------------
# Tiny end-to-end runs


def _run(exp, overrides, tmp_path, members=2):
    cfg = exp.make_config("quick", overrides, members=members)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    assert run.summary["status"] == "done", run.summary.get("error")
    analysis = exp.analyse(cfg, Run(run.path))
    assert analysis.claims, "no claims"
    for c in analysis.claims:
        assert isinstance(c.holds, bool) and len(c.measured) == members and len(c.per_member) == members
        assert c.verdict in ("holds", "fails")
    assert run.summary["claims_total"] == len(analysis.claims)
    assert (run.path / "figures").is_dir() and any((run.path / "figures").iterdir())
    return cfg, analysis, {c.id: c for c in analysis.claims}


def test_lsa_vs_lca_end_to_end(tmp_path):
    over = ["depths=[1,3]", "fixed_depth=3", "train_contexts=[40]", "train.prompts=64", "train.steps=40",
            "lsa_train.prompts=64", "lsa_train.steps=5", "population_prompts=256", "test.prompts=32",
            "test.contexts=[20,200]", "fixed_context=200", "test.population_prompts=256"]
    cfg, analysis, claims = _run(IclLsaVsLca(), over, tmp_path)
    assert set(claims) >= {"lsa/bounded-away-from-bayes", "one/T3/Ltr40/orders-below-lsa", "one/pop/error-decreases-with-depth",
                           "one/pop/T3/matches-theory", "two/Ltr40/T3/matches-theory", "two/pop/T3/approaches-alpha-star"}
    assert claims["lsa/bounded-away-from-bayes"].expected == pytest.approx(lsa_infinite_context_floor(APP_H))
    m = analysis.measurements
    assert m["alpha_star_T"][3] == pytest.approx(alpha_star_T(3, APP_H))
    # the verdict is the theory comparison of the stored parameters
    a = np.array(m["one/pop"]["alpha_T"][3])
    assert claims["one/pop/T3/matches-theory"].measured == pytest.approx(np.abs(a / alpha_star_T(3, APP_H) - 1).tolist())


def test_unrestricted_end_to_end(tmp_path):
    over = ["depth=3", "sigmas=[0.01]", "train.prompts=32", "train.steps=5", "train.eval_prompts=8",
            "whitening_prompts=16", "whitening_contexts=[50]"]
    _, analysis, claims = _run(IclUnrestricted(), over, tmp_path)
    assert {"full/sigma0.01/alpha-hat-near-alpha-star", "untied/sigma0.01/whitening-decreases-with-layer"} <= set(claims)
    assert claims["diagonal/sigma0.01/beta-hat-near-minus-alpha-star"].expected == pytest.approx(-alpha_star(APP_H))


def test_landscape_end_to_end(tmp_path):
    over = ["panels=[{depth: 3}, {depth: 2, pre_ln: true}]", "grid=9", "polish_evals=20", "population_prompts=256",
            "ln_prompts=8", "ln_context=20", "ln_grid=5", "ln_steps=3", "train.steps=30", "train.eval_prompts=8"]
    _, analysis, claims = _run(IclLandscape(), over, tmp_path)
    assert set(claims) == {"T3/gd-matches-heatmap-minimiser", "T2/preln/gd-matches-heatmap-minimiser"}
    assert analysis.measurements["alpha_star"] == pytest.approx(1 / 3)  # |m| ~ U(0, 2)
    assert "theory_stationary" in analysis.measurements["T3"]


def test_ablations_end_to_end(tmp_path):
    over = ["train.prompts=64", "train.steps=20", "lsa_train.prompts=64", "lsa_train.steps=5", "test.prompts=32",
            "test.contexts=[20,200]", "test.population_prompts=64"]
    _, analysis, claims = _run(IclAblations(), over, tmp_path)
    assert {"no-S-one/worse-than-lca-one", "no-S-one/no-better-than-sample-mean", "deep-lsa-two/worse-than-lca-two",
            "deep-lsa-two/better-than-sample-mean", "deep-lsa-two/better-than-lsa", "lca-one/best-of-all"} <= set(claims)
    # F_0 = 0 without S_t predicts exactly 0: its MSE is the mean of y_q^2 on the test prompts
    assert analysis.measurements["no-S-one/mse_vs_Lte"] == pytest.approx(analysis.measurements["deep-lsa-no-S-one/mse_vs_Lte"])
