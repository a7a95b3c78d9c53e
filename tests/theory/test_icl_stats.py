import pytest
import torch

from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import bayes_risk
from tdlab.theory.icl_stats import PromptStats, baseline_errors, population_stats

APP_H = MultiModalPrompts()  # d1 = d2 = 16, per-modality norms ~ U[0, 5], zeta ~ N(0, 1)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_baseline_errors_match_a_loop_over_the_raw_prompts():
    b = APP_H.sample([gen(0), gen(1)], 30, 20, dtype=torch.float64)
    out = baseline_errors(PromptStats.from_batch(b))
    assert set(out) == {"sample_mean_mse", "sample_mean_excess", "bayes_mse", "zero_mse"}
    for e in range(2):
        sm = zero = 0.0
        for n in range(30):
            ybar = sum(float(v) for v in b.y[e, n]) / 20
            sm += (float(b.y_query[e, n]) - ybar) ** 2 / 30
            zero += float(b.y_query[e, n]) ** 2 / 30
        assert float(out["sample_mean_mse"][e]) == pytest.approx(sm, rel=1e-9)
        assert float(out["zero_mse"][e]) == pytest.approx(zero, rel=1e-9)


def test_baseline_errors_at_infinite_context_and_the_bayes_risk():
    st = population_stats(APP_H, [gen(0)], 40_000)
    out = baseline_errors(st)
    # at L = inf the sample mean is 0: it is the zero predictor, and its excess is the Bayes prediction's square
    assert torch.equal(out["sample_mean_mse"], out["zero_mse"])
    assert float(out["sample_mean_excess"][0]) == pytest.approx(float((st.bayes**2).mean()), rel=1e-12)
    # the Bayes predictor's MSE is the Bayes risk (closed form by quadrature), up to Monte-Carlo error
    assert float(out["bayes_mse"][0]) == pytest.approx(bayes_risk(APP_H), rel=0.05)
