"""The in-context regression trainer of seed 002: statistics paths equal the models' forward passes,
the population limit is exact, members train independently, and GD lands on alpha*_T."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tdlab.models.linear_attention import LCA, LSA
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star_T, infinite_context_excess_risk
from tdlab.theory.icl_stats import PromptStats, population_stats, sample_stats
from tdlab.train.checkpoint import CheckpointError, load_checkpoint
from tdlab.train.regression import RegressionConfig, RegressionTrainer, fast_path, load_member_states, predict
from tdlab.train.stopping import RunStopped, request_stop, stopping
from tdlab.train.trainer import DivergenceError

SMALL = MultiModalPrompts(dims=(3, 2))


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest.one_thread
APP_H = MultiModalPrompts()


def _batch(task=SMALL, E=2, N=6, L=9):
    gens = [torch.Generator().manual_seed(100 + e) for e in range(E)]
    return task.sample(gens, N, L, dtype=torch.float64)


CASES = [
    ("spectral", dict(param="one", alpha0=0.05)),
    ("spectral", dict(param="two", alpha0=0.05, beta0=-0.03)),
    ("spectral", dict(param="two", alpha0=0.05, beta0=0.0)),  # beta = 0: the Taylor branch
    ("spectral", dict(param="untied", alpha0=0.05)),
    ("spectral", dict(param="one", alpha0=0.05, injection=False, f0="x")),
    ("spectral", dict(param="two", alpha0=0.05, beta0=-0.2, attention="self")),
    ("spectral", dict(param="untied", alpha0=0.05, attention="self", f0="x")),
    ("recursion", dict(param="diagonal", alpha0=0.05)),
    ("recursion", dict(param="full", alpha0=0.05, f0="x")),
    ("recursion", dict(param="full", alpha0=0.05, injection=False, f0="x")),
]


@pytest.mark.parametrize("path,kw", CASES)
@pytest.mark.parametrize("T", [1, 4])
def test_statistics_paths_equal_the_model_forward(path, kw, T):
    b = _batch()
    model = LCA(SMALL.d, T, [1, 2], dtype=torch.float64, **kw)
    assert fast_path(model) == path
    st = PromptStats.from_batch(b)
    ref = model(b.X, b.y, b.x_query)
    out = predict(model, st)
    assert torch.allclose(out, ref, rtol=1e-9, atol=1e-12)
    # gradients agree too
    params = list(model.parameters())
    g_ref = torch.autograd.grad(ref.sum(), params, allow_unused=True)
    g_out = torch.autograd.grad(predict(model, st).sum(), params, allow_unused=True)
    for p, a, b in zip(
        params, g_out, g_ref, strict=True
    ):  # None: the parameter does not reach the output (e.g. W^V_0 from F_0 = 0)
        a, b = (torch.zeros_like(p) if g is None else g for g in (a, b))
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-12)


def test_lsa_statistics_path_and_models_without_one():
    b = _batch()
    lsa = LSA(SMALL.d, [1, 2], sigma_init=0.3, dtype=torch.float64)
    assert torch.allclose(predict(lsa, PromptStats.from_batch(b)), lsa(b.X, b.y, b.x_query), rtol=1e-9, atol=1e-12)
    assert fast_path(LCA(SMALL.d, 2, [1], pre_ln=True)) is None
    assert fast_path(LCA(SMALL.d, 2, [1], readout="learned")) is None
    with pytest.raises(ValueError, match="raw prompts"):
        predict(LCA(SMALL.d, 2, [1], pre_ln=True, dtype=torch.float64), PromptStats.from_batch(b))


def test_sample_stats_equals_statistics_of_the_tasks_own_draws():
    seeds = [7, 8]
    st = sample_stats(SMALL, generators(seeds, "x"), 5, 11)
    b = SMALL.sample(generators(seeds, "x"), 5, 11, dtype=torch.float32).to(dtype=torch.float64)
    ref = PromptStats.from_batch(b)
    for k in ("c", "yy", "ybar", "x_query", "y_query", "bayes"):
        assert torch.allclose(getattr(st, k), getattr(ref, k))
    assert torch.allclose(st.gram, ref.gram)


@pytest.mark.parametrize("T", [1, 3, 10])
def test_population_prediction_is_the_infinite_context_limit(T):
    # Lemma C.2 on the spike: y_hat -> (1 - g(Z)) <w, x_q>, g(Z) = 1 - (alpha/beta)((1 + beta Z)^T - 1).
    st = population_stats(APP_H, [torch.Generator().manual_seed(3)], 200)
    a, bta = 0.03, -0.025
    model = LCA(APP_H.d, T, [0], param="two", alpha0=a, beta0=bta, dtype=torch.float64)
    a, bta = model.alpha.item(), model.beta.item()  # the values as stored (built in float32)
    z = 1 + (st.m**2).sum(-1)
    g = 1 - (a / bta) * ((1 + bta * z) ** T - 1)
    assert torch.allclose(predict(model, st), (1 - g) * st.bayes, rtol=1e-9, atol=1e-12)
    # the full-matrix recursion on the explicit Lambda = I + m m^T gives the same
    full = LCA(APP_H.d, T, [0], param="full", alpha0=a, beta0=bta, sigma_init=0.0, dtype=torch.float64)
    assert torch.allclose(predict(full, st), predict(model, st), rtol=1e-8, atol=1e-12)
    # and a very long context approaches it
    long = sample_stats(SMALL, [torch.Generator().manual_seed(4)], 50, 20000)
    pop = PromptStats(
        c=long.zeta[..., None] * long.m,
        yy=long.zeta**2,
        ybar=0 * long.zeta,
        x_query=long.x_query,
        y_query=long.y_query,
        m=long.m,
        zeta=long.zeta,
        L=math.inf,
    )
    small = LCA(SMALL.d, T, [0], param="one", alpha0=0.02, dtype=torch.float64)
    with torch.no_grad():
        p_long, p_pop = predict(small, long), predict(small, pop)
    assert float((p_long - p_pop).norm() / p_pop.norm()) < 0.03


def _cfg(**kw):
    base = dict(prompts=40, context=20, steps=30, eval_prompts=20, eval_every=10, log_every=5, lr=1e-2, grad_tol=None)
    base.update(kw)
    return RegressionConfig(**base)


@pytest.mark.parametrize(
    "kw", [dict(param="two", alpha0=0.05, beta0=-0.05), dict(param="diagonal", alpha0=0.05, sigma_init=0.01)]
)
@pytest.mark.parametrize("opt", ["gd", "adam"])
def test_member_i_equals_single_model_with_seed_i(kw, opt):
    seeds = member_seeds(5, 3)
    cfg = _cfg(optimizer=opt, lr=1e-2 if opt == "gd" else 1e-3)

    def build(s):
        return LCA(SMALL.d, 3, s, **kw)

    full = RegressionTrainer(cfg, progress=False).fit(build, seeds, SMALL)
    for i in (0, 2):
        one = RegressionTrainer(cfg, progress=False).fit(build, [seeds[i]], SMALL)
        rows_i = [(s, n, v) for s, m, n, v in full.rows if m == i]
        rows_1 = [(s, n, v) for s, m, n, v in one.rows]
        assert [r[:2] for r in rows_i] == [r[:2] for r in rows_1]
        assert [r[2] for r in rows_i] == pytest.approx([r[2] for r in rows_1], rel=1e-10, abs=1e-14)
        for k in full.states[i]:
            assert torch.allclose(full.states[i][k], one.states[0][k], rtol=1e-10, atol=1e-14)


def test_backtracking_gd_never_raises_the_loss_and_stops_when_converged():
    cfg = _cfg(steps=400, lr=10.0, grad_tol=1e-7, log_every=1)  # absurd first step: must be rejected, not diverge
    r = RegressionTrainer(cfg, progress=False).fit(
        lambda s: LCA(SMALL.d, 4, s, param="one", alpha0=0.0), member_seeds(1, 2), SMALL
    )
    for m in (0, 1):
        losses = r.series("train_loss", m)[1]
        assert all(b <= a for a, b in itertools.pairwise(losses))
        assert r.series("grad_norm", m)[1][-1] <= 1e-7
    assert max(s for s, *_ in r.rows) < 400  # stopped early
    load_member_states(LCA(SMALL.d, 4, [0, 1], param="one"), r.states)


def test_plain_gd_divergence_is_reported_with_member_and_step():
    cfg = _cfg(steps=50, lr=1e6, backtrack=False)
    with pytest.raises(DivergenceError) as err:
        RegressionTrainer(cfg, progress=False).fit(lambda s: LCA(SMALL.d, 6, s, param="one", alpha0=0.05), [1], SMALL)
    assert err.value.member == 0 and err.value.step >= 1 and err.value.result.states


def test_population_resampling_needs_a_noise_tolerant_optimizer():
    with pytest.raises(ValueError, match="backtracking"):
        RegressionConfig(objective="population", resample=True)
    RegressionConfig(objective="population", resample=True, optimizer="adam")


@pytest.mark.parametrize("T", [2, 10])
def test_gd_on_the_population_loss_converges_to_alpha_star_T(T):
    # Thm 6.2.1: gradient flow on l(alpha) converges to the minimiser alpha*_T of Lemma D.1. Each member
    # minimises its own fixed Monte-Carlo sample of l (prompts and queries), so its alpha scatters around
    # alpha*_T by the sample's noise (about 1% at T = 10 with 2^13 prompts): check convergence per member,
    # then the ensemble mean against alpha*_T within 3 standard errors of the members' own spread.
    E = 8
    cfg = RegressionConfig(
        objective="population",
        prompts=1 << 13,
        target="bayes",
        steps=300,
        eval_prompts=64,
        eval_every=1000,
        log_every=100,
        grad_tol=1e-9,
    )
    r = RegressionTrainer(cfg, progress=False).fit(
        lambda s: LCA(APP_H.d, T, s, param="one", alpha0=0.02), member_seeds(0, E), APP_H
    )
    for m in range(E):
        assert r.series("grad_norm", m)[1][-1] < 1e-7  # every member sits at its sample's minimiser
    a = torch.stack([s["alpha"] for s in r.states]).numpy()
    sem = a.std(ddof=1) / E**0.5
    assert abs(a.mean() - alpha_star_T(T, APP_H)) < 3 * sem
    assert a.std(ddof=1) < 0.03 * alpha_star_T(T, APP_H)  # and the scatter itself is small
    # and its final MC loss is the closed-form excess at that alpha
    assert r.series("train_loss", 0)[1][-1] == pytest.approx(
        infinite_context_excess_risk(float(a[0]), T, APP_H), rel=0.1
    )


def test_gd_on_a_long_finite_context_lands_near_alpha_star_T():
    # l_{N, L_tr} with L_tr = 1000 >> d: the learned alpha is within a few percent of the L = inf minimiser.
    cfg = RegressionConfig(prompts=400, context=1000, steps=200, eval_prompts=20, eval_every=1000, log_every=50)
    r = RegressionTrainer(cfg, progress=False).fit(
        lambda s: LCA(APP_H.d, 2, s, param="one", alpha0=0.02), member_seeds(0, 1), APP_H
    )
    assert float(r.states[0]["alpha"]) == pytest.approx(alpha_star_T(2, APP_H), rel=0.06)


def test_accepted_steps_and_initial_states_are_recorded():
    """The health gate reads ``accepted_steps`` (rejected backtracking steps excluded) and the test loss at
    step 0 and at the end; ``init_states`` are the parameters before the first step."""
    cfg = RegressionConfig(
        prompts=16, context=10, steps=12, lr=1e3, log_every=1, eval_every=100, grad_tol=None, eval_prompts=8
    )
    build = lambda s: LCA(SMALL.d, 3, s, param="one", alpha0=0.05, dtype=torch.float64)  # noqa: E731
    r = RegressionTrainer(cfg, progress=False).fit(build, [1, 2], SMALL)
    assert [float(s["alpha"]) for s in r.init_states] == pytest.approx([0.05, 0.05], rel=1e-7)
    steps, acc = r.series("accepted_steps", 0)
    _, lr = r.series("lr", 0)
    assert acc[0] == 0 and acc[-1] < steps[-1]  # lr = 1e3 is far too large: some steps were rejected
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(acc))
    rejected = [i for i in range(1, len(lr)) if lr[i] < lr[i - 1]]
    assert rejected and all(acc[i] == acc[i - 1] for i in rejected)  # a halved step is a rejected step
    t_steps, _ = r.series("test_loss", 0)
    assert t_steps[0] == 0 and t_steps[-1] == steps[-1]
    # without backtracking every step counts
    r2 = RegressionTrainer(cfg.updated({"backtrack": False, "lr": 1e-6}), progress=False).fit(build, [1, 2], SMALL)
    s2, a2 = r2.series("accepted_steps", 1)
    assert a2 == [float(s) for s in s2]


def test_armijo_first_step_trains_where_a_fixed_step_stalls():
    """A start whose curvature is far above 1/lr (full matrices, large sigma_init): with a fixed first step
    every step is rejected until the stall criterion stops GD at the init; the Armijo first step moves."""
    task = MultiModalPrompts(dims=(4, 4))
    build = lambda s: LCA(task.d, 6, s, param="full", alpha0=0.05, sigma_init=1.0, dtype=torch.float64)  # noqa: E731
    cfg = RegressionConfig(
        prompts=32, context=20, steps=40, lr=1.0, stall=1e-6, grad_tol=None, eval_prompts=8, log_every=1
    )
    fixed = RegressionTrainer(cfg, progress=False).fit(build, [3], task)
    _, acc = fixed.series("accepted_steps", 0)
    _, loss = fixed.series("train_loss", 0)
    assert acc[-1] == 0 and loss[-1] == loss[0]
    armijo = RegressionTrainer(cfg.updated({"initial_step": "armijo"}), progress=False).fit(build, [3], task)
    _, acc = armijo.series("accepted_steps", 0)
    _, loss = armijo.series("train_loss", 0)
    assert acc[-1] >= 1 and loss[-1] < loss[0]
    moved = sum(
        float((a - b).abs().sum())
        for a, b in zip(armijo.states[0].values(), armijo.init_states[0].values(), strict=True)
    )
    assert moved > 0


# ---------------------------------------------------------------------------------------------
# Checkpoints: a fit stopped on request and resumed ends with the numbers of one never stopped


RESUMABLE = {
    # GD with backtracking (a first step far too large: rejected steps), momentum and a per-member step size
    "gd-backtrack": dict(lr=10.0, momentum=0.5, log_every=3),
    "gd-armijo": dict(lr=100.0, initial_step="armijo", log_every=1),
    "adam": dict(optimizer="adam", lr=1e-2, schedule="cosine", log_every=2),
    # fresh population prompts every step: the generators are part of the checkpoint
    "adam-resample": dict(objective="population", resample=True, optimizer="adam", lr=1e-2, prompts=16),
}


def _ckpt_build(s):
    return LCA(SMALL.d, 3, s, param="two", alpha0=0.05, beta0=-0.05, dtype=torch.float64)


def _stopped_fit(cfg, path, after, config_hash=None):
    """A fit that asks for a stop once it logged a row at step ``after`` or later; returns the step it stopped at."""
    trainer = RegressionTrainer(cfg, progress=False, checkpoint=path)
    trainer.config_hash = config_hash
    trainer.live = lambda rows: request_stop() if any(r[0] >= after for r in rows) else None
    with stopping(signals=False), pytest.raises(RunStopped) as info:
        trainer.fit(_ckpt_build, SEEDS_2, SMALL)
    return info.value.step


SEEDS_2 = member_seeds(7, 2)


def _same_fit(a, b):
    assert a.rows == b.rows and a.rows
    for sa, sb in zip([*a.states, *a.init_states], [*b.states, *b.init_states], strict=True):
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_a_fit_stopped_and_resumed_equals_one_never_stopped(tmp_path, name):
    cfg = _cfg(steps=20, eval_every=5, **RESUMABLE[name])
    whole = RegressionTrainer(cfg, progress=False).fit(_ckpt_build, SEEDS_2, SMALL)
    path = tmp_path / "fit.json"
    step = _stopped_fit(cfg, path, after=7, config_hash="h")
    assert 7 <= step < 20 and path.is_file()
    resumed = RegressionTrainer(cfg, progress=False, checkpoint=path)
    resumed.config_hash = "h"
    streamed = []
    resumed.live = streamed.extend
    with stopping(signals=False):
        again = resumed.fit(_ckpt_build, SEEDS_2, SMALL)
    assert streamed and min(r[0] for r in streamed) > step  # it went on from the checkpoint, not from the start
    _same_fit(again, whole)
    # the finished fit saved its end point: one more call returns it without training
    assert RegressionTrainer(cfg, progress=False, checkpoint=path).fit(_ckpt_build, SEEDS_2, SMALL).rows == whole.rows
    if name == "gd-backtrack":
        assert any(lr1 < lr0 for (_, lr0), (_, lr1) in itertools.pairwise(zip(*whole.series("lr", 0), strict=True)))


def test_a_wall_time_checkpoint_keeps_progress_and_a_fit_without_a_stop_is_unchanged(tmp_path):
    cfg = _cfg(steps=12, **RESUMABLE["gd-backtrack"])
    whole = RegressionTrainer(cfg, progress=False).fit(_ckpt_build, SEEDS_2, SMALL)
    path = tmp_path / "fit.json"
    with stopping(every_s=1e-9, signals=False):
        _same_fit(RegressionTrainer(cfg, progress=False, checkpoint=path).fit(_ckpt_build, SEEDS_2, SMALL), whole)
    meta, _ = load_checkpoint(path)
    assert meta["finished"] and meta["step"] == 12


def test_a_checkpoint_of_another_config_or_start_is_refused(tmp_path):
    cfg = _cfg(steps=20, **RESUMABLE["adam"])
    path = tmp_path / "fit.json"
    _stopped_fit(cfg, path, after=5, config_hash="one")
    other = RegressionTrainer(cfg, progress=False, checkpoint=path)
    other.config_hash = "two"  # config.yaml edited since
    with pytest.raises(CheckpointError, match="different run config"):
        other.fit(_ckpt_build, SEEDS_2, SMALL)
    for changed, seeds, build in [
        (cfg.updated({"lr": 2e-2}), SEEDS_2, _ckpt_build),
        (cfg, member_seeds(8, 2), _ckpt_build),
    ]:
        with pytest.raises(CheckpointError, match="different config or seeds"):
            RegressionTrainer(changed, progress=False, checkpoint=path).fit(build, seeds, SMALL)
    moved = lambda s: LCA(SMALL.d, 3, s, param="two", alpha0=0.06, beta0=-0.05, dtype=torch.float64)  # noqa: E731
    with pytest.raises(CheckpointError, match="initial parameters"):
        RegressionTrainer(cfg, progress=False, checkpoint=path).fit(moved, SEEDS_2, SMALL)


def test_a_stop_without_a_checkpoint_file_runs_to_the_end():
    cfg = _cfg(steps=10, **RESUMABLE["gd-backtrack"])
    whole = RegressionTrainer(cfg, progress=False).fit(_ckpt_build, SEEDS_2, SMALL)
    with stopping(until_s=0, signals=False):
        request_stop()
        _same_fit(RegressionTrainer(cfg, progress=False).fit(_ckpt_build, SEEDS_2, SMALL), whole)
