"""What the seed-002 synthetic experiments share: the prompt law, the test sets, the training
settings, the builders of models at the Thm 6.2/6.3 initialisations (:func:`tdlab.theory.icl.one_param_init`,
:func:`tdlab.theory.icl.two_param_init`), the health gate of arms trained by gradient descent, and reading
per-member test rows back from a run.

Seed 002: Barnfield, Sen & Sur, "Multi-layer cross-attention is provably optimal for multi-modal
in-context learning" (arXiv:2602.04872). Training is :mod:`tdlab.train.regression` (gradient descent
on ``l_{N, L_tr}``, App. H; or on the population loss). "Error" is the excess ``(y_hat - y_q^Bayes)^2``
over the paper's Bayes predictor ``<w, x_q>`` (Eq. 4.1), whose mean is the test MSE minus the Bayes
risk; Figs. 5-6 plot the MSE. Test errors at short ``L_te`` are heavy-tailed, so medians and quantiles
are stored beside means.

Metric layout of every evaluated arm: the trainer's rows; ``te_mse``, ``te_excess_mean``,
``te_excess_median``, ``te_excess_q10/q25/q75/q90`` with ``L_te`` in the step column; ``pop_mse`` and
``pop_excess_mean`` (``L_te = inf``, Monte Carlo) at step 0. The arm ``baselines`` holds the sample
mean's, the Bayes predictor's and the zero predictor's errors on the same test prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ArmHealth, assess_arm
from tdlab.claims.declare import Provenance
from tdlab.config import Config
from tdlab.models.linear_attention import LCA
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import generators
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import one_param_init, response_second_moment, two_param_init
from tdlab.theory.icl_stats import PromptStats, baseline_errors, population_stats, sample_stats
from tdlab.train.regression import RegressionConfig, error_summary, load_member_states, query_errors

PAPER = "002 Multi-layer cross-attention (Barnfield, Sen & Sur)"
APP_H_CONTEXT = 100  # App. H: the seed trains every synthetic model at L_tr = 100
TEST_DATA = "test-data"  # random stream of a member's test prompts (all L_te), shared by every arm
TEST_POPULATION = "test-population"  # ... and of its infinite-context test prompts


class TaskConfig(Config):
    """The prompt distribution (Sec. 3). Defaults: App. H."""

    dims: list[int] = [16, 16]  # App. H: d1 = d2 = 16
    norm_range: tuple[float, float] = (0.0, 5.0)  # App. H: norm mapped uniformly on [0, 5]
    norm_mode: Literal["per_modality", "total"] = "per_modality"  # App. H states alpha* = 1/26 (tasks.multimodal)
    zeta: Literal["gaussian", "rademacher"] = "gaussian"  # App. H: zeta ~ N(0, 1)

    def build(self) -> MultiModalPrompts:
        return MultiModalPrompts(tuple(self.dims), self.norm_range, self.norm_mode, self.zeta)


class TestConfig(Config):
    """Test prompts, drawn once per member and shared by every arm (common random numbers)."""

    prompts: int = Field(1000, ge=10, le=1_000_000)  # Figs. 5-6 captions: 1000 test prompts
    # L_te grid of Fig. 2 (left) and Figs. 5-6; the seed does not list its values.
    contexts: list[int] = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    population_prompts: int = Field(100_000, ge=10, le=10_000_000)  # L_te = inf by Monte Carlo (Sec. 6)

    @model_validator(mode="after")
    def _check(self) -> TestConfig:
        if not self.contexts or min(self.contexts) < 1 or sorted(set(self.contexts)) != self.contexts:
            raise ValueError("contexts must be increasing, distinct and >= 1")
        return self


class ICLTrainConfig(RegressionConfig):
    """App. H: gradient descent on l_{N, L_tr}, N = 2000, L_tr = 100. Steps and step size are not stated.
    Not in the seed: GD backtracks (halves a member's step when its loss rises, grows it by 5% otherwise)
    so one setting serves every depth, and uses heavy-ball momentum 0.95 with restart on rejection, which
    reaches GD's fixed point ~4x sooner along the flat valley of the two-parameter loss (Hessian condition
    number ~200 at T = 50). ``momentum=0`` gives plain GD; the end points agree (docs/icl.md). Training
    stops when every member's gradient norm is below ``grad_tol``: full-batch GD to convergence."""

    steps: int = Field(3000, ge=0, le=10_000_000)
    lr: float = Field(1e-3, gt=0.0, le=1e6)
    momentum: float = Field(0.95, ge=0.0, lt=1.0)
    grow: float = Field(1.05, ge=1.0, le=10.0)
    grad_tol: float | None = Field(1e-5, gt=0.0)
    eval_every: int = Field(1000, ge=1)
    log_every: int = Field(25, ge=1)
    eval_prompts: int = Field(500, ge=1, le=10_000_000)


class LSATrainConfig(ICLTrainConfig):
    """The single-layer LSA (Eq. 4.2): 2(d+1)^2 = 2178 parameters, ill-conditioned, never at rest within
    any affordable budget; a fixed number of GD steps (it has reached the LSA floor within a few hundred)."""

    steps: int = Field(1000, ge=0, le=10_000_000)
    grad_tol: float | None = Field(None, gt=0.0)


def threads_field() -> Any:
    """Torch threads on the CPU (:func:`tdlab.train.cpu.cpu_threads`): one avoids spin-waits on tiny tensors."""
    return Field(1, ge=1, le=1024)


def context_provenance(objective: str) -> Provenance:
    """``paper`` for App. H's training context (L_tr = 100), ``ours`` for any other finite L_tr."""
    return "paper" if objective == f"Ltr{APP_H_CONTEXT}" else "ours"


# ---------------------------------------------------------------------------------------------
# Models at the initialisations of Thms 6.2 and 6.3


def lca_builder(task: MultiModalPrompts, model: str, T: int, dtype=torch.float64, **kw) -> Callable[[list[int]], LCA]:
    """The ensemble builder of a tied LCA_T (``model`` one / two) from the Thm 6.2 / 6.3 initialisation."""
    if model == "one":
        a0 = one_param_init(task)
        return lambda s: LCA(task.d, T, s, param="one", alpha0=a0, dtype=dtype, **kw)
    a0, b0 = two_param_init(task, T)
    return lambda s: LCA(task.d, T, s, param="two", alpha0=a0, beta0=b0, dtype=dtype, **kw)


# ---------------------------------------------------------------------------------------------
# Test sets and their metric rows


def draw_tests(
    task: MultiModalPrompts, seeds: Sequence[int], contexts: Sequence[int], n: int, device: str
) -> dict[int, PromptStats]:
    """``n`` test prompts per member at each ``L_te`` (member ``e``'s from its ``test-data`` stream)."""
    gens = generators(seeds, TEST_DATA, device)
    return {int(L): sample_stats(task, gens, n, int(L), device=device) for L in contexts}


def prepare_test_sets(
    task: MultiModalPrompts, seeds: Sequence[int], test: TestConfig, ctx: RunContext
) -> tuple[dict[int, PromptStats], PromptStats]:
    """The run's test prompts (finite ``L_te`` and population) and, once per run, the baselines'
    metric rows (sample mean, Bayes, zero predictor) under the arm ``baselines``."""
    tests = draw_tests(task, seeds, test.contexts, test.prompts, ctx.device)
    pop = population_stats(
        task, generators(seeds, TEST_POPULATION, ctx.device), test.population_prompts, device=ctx.device
    )
    if not ctx.done("baselines"):
        ctx.writer.add_metrics("baselines", baseline_rows(tests))
        ctx.writer.save_arrays("baselines", [{"done": torch.ones(1)} for _ in seeds])
    return tests, pop


def evaluate_rows(
    model: torch.nn.Module, tests: dict[int, PromptStats], pop: PromptStats | None = None
) -> list[tuple[int, int, str, float]]:
    """Test metric rows of an ensemble: per ``L_te`` (in the step column) the MSE and the mean and
    quantiles of ``(y_hat - y^Bayes)^2``; at ``L_te = inf`` (step 0) ``pop_mse`` and ``pop_excess_mean``."""
    rows: list[tuple[int, int, str, float]] = []
    with torch.no_grad():
        for L, st in tests.items():
            mse, exc = query_errors(model, st)
            vals = {"te_mse": mse.mean(-1), **{f"te_excess_{k}": v for k, v in error_summary(exc).items()}}
            for name, v in vals.items():
                rows.extend((L, e, name, float(x)) for e, x in enumerate(v.tolist()))
        if pop is not None:
            mse, exc = query_errors(model, pop)
            rows.extend((0, e, "pop_mse", float(x)) for e, x in enumerate(mse.mean(-1).tolist()))
            rows.extend((0, e, "pop_excess_mean", float(x)) for e, x in enumerate(exc.mean(-1).tolist()))
    return rows


def baseline_rows(tests: dict[int, PromptStats]) -> list[tuple[int, int, str, float]]:
    """The metric rows of :func:`tdlab.theory.icl_stats.baseline_errors` (the sample mean, Bayes and zero
    predictors on the same test prompts) per ``L_te``."""
    rows: list[tuple[int, int, str, float]] = []
    for L, st in tests.items():
        for name, v in baseline_errors(st).items():
            rows.extend((L, e, name, float(x)) for e, x in enumerate(v.tolist()))
    return rows


def fit_arms(
    ctx: RunContext,
    fits: Sequence[Fit],
    tests: dict[int, PromptStats] | None,
    pop: PromptStats | None,
    dtype=torch.float64,
) -> list[torch.nn.Module]:
    """Train (or reload finished) arms, at once on one-thread lanes (:meth:`RunContext.fit_all`), then evaluate
    each on the shared test sets and store its rows (an arm a stopped attempt stored unevaluated is evaluated
    by the resume)."""
    models = []
    for fit, result in zip(fits, ctx.fit_all(fits), strict=True):
        model = load_member_states(fit.build(list(fit.seeds)).to(device=ctx.device, dtype=dtype), result.states)
        evaluated = any(n == "te_mse" or n == "pop_mse" for _, _, n, _ in ctx.writer.arm_rows(fit.arm))
        if not evaluated and (tests or pop is not None):
            ctx.writer.add_metrics(fit.arm, evaluate_rows(model, tests or {}, pop))
        models.append(model)
    return models


# ---------------------------------------------------------------------------------------------
# Reading a run back


def at(run: RunView, arm: str, name: str, step: int) -> np.ndarray:
    """``(E,)``: per-member values of ``name`` at ``step`` (an ``L_te`` for the test rows)."""
    steps, vals = run.curves(arm, name)
    idx = np.nonzero(steps == step)[0]
    if idx.size == 0:
        raise KeyError(f"{arm}: no {name} at step {step}")
    return vals[:, idx[0]]


def curve_by_step(run: RunView, arm: str, name: str) -> dict[int, list[float]]:
    """``{step: per-member values}`` of ``name`` (JSON-ready, for the measurements)."""
    steps, vals = run.curves(arm, name)
    return {int(s): vals[:, k].tolist() for k, s in enumerate(steps)}


# ---------------------------------------------------------------------------------------------
# The training-health gate


def regression_health(trivial: Callable[[str], float | None], run: RunView) -> dict[str, ArmHealth]:
    """The training-health gate of every arm trained by :class:`RegressionTrainer`: at least one accepted
    GD step, the final *training* loss (the objective, ``train_loss``) below the initial one, the final
    test MSE below the zero predictor's E[y^2] (``trivial(arm)``), every stored value finite.

    The training loss is the objective GD minimises; the held-out ``test_loss`` of a model started near the
    optimum (one parameter, alpha0 inside the window of Sec. 6) can rise by its finite-N noise while the
    objective falls, which says nothing about training. A member started at the minimiser of its loss (the
    Thm 6.3 init puts alpha0 = alpha*(beta0); Fig. 4's GD starts on the valley floor; App. G's no-S_t
    ablations from F_0 = 0 have no gradient) can only keep its loss: it has "moved" (the gate of claims
    about failing to learn) when its final loss is within 1e-9 (relative) of the initial one."""
    df = run.metrics()
    out: dict[str, ArmHealth] = {}
    for arm, sub in df.groupby("arm", sort=False):
        tr = sub[sub["name"] == "train_loss"].sort_values(["member", "step"])
        te = sub[sub["name"] == "test_loss"].sort_values(["member", "step"])
        if tr.empty or te.empty:
            continue
        first, last = tr.groupby("member")["value"].first(), tr.groupby("member")["value"].last()
        acc = sub[sub["name"] == "accepted_steps"]
        accepted = (
            acc.sort_values("step").groupby("member")["value"].last().reindex(first.index).fillna(0).tolist()
            if not acc.empty
            else None
        )
        finite = bool(np.all(np.isfinite(sub["value"].to_numpy(dtype=float))))
        h = assess_arm(
            str(arm),
            first.tolist(),
            last.tolist(),
            accepted_steps=accepted,
            test_error=te.groupby("member")["value"].last().tolist(),
            trivial_error=trivial(str(arm)),
            all_finite=finite,
        )
        flat = np.all(last.to_numpy() <= first.to_numpy() * (1 + 1e-9))
        learned = [r for r in h.reasons if r.startswith("test error")]
        moving = [r for r in h.reasons if r not in learned]
        if (
            not h.moved
            and finite
            and flat
            and all(r.startswith(("final loss not below", "no accepted step")) for r in moving)
        ):
            h = ArmHealth(
                str(arm), True, not learned, learned, {**h.facts, "note": "started at the minimiser of its loss"}
            )
        out[str(arm)] = h
    return out


class WithTask(Protocol):
    """A seed-002 config as :class:`RegressionArms` reads it: one with a prompt task."""

    @property
    def task(self) -> TaskConfig: ...


class RegressionArms:
    """The health gate of the seed-002 experiments whose arms are trained by :class:`RegressionTrainer`:
    the trivial predictor is the zero predictor (test MSE E[y^2]) and "moved" is judged on the training
    objective (:func:`regression_health`)."""

    def trivial_error(self, cfg: WithTask, arm: str) -> float:
        return response_second_moment(cfg.task.build())  # the zero predictor's test MSE, E[y^2]

    def health(self, cfg: WithTask, run: Run | RunView) -> dict[str, ArmHealth]:
        view = run if isinstance(run, RunView) else RunView(run)
        return regression_health(lambda arm: self.trivial_error(cfg, arm), view)
