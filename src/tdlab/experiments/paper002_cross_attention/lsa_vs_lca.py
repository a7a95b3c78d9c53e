"""``icl-lsa-vs-lca``: seed 002, Fig. 2 (Sec. 7; Thms 4.1, 6.2, 6.3; App. H).

Trains the single-layer LSA (Eq. 4.2) and the one- and two-parameter LCA_T at every ``(objective, T)``
(``IclLsaVsLca.arms``; objectives ``Ltr<L>`` and ``pop``, the population loss ``l``) and reads their
excess errors and learned ``alpha_T`` (``beta_T``) against references of the setting that ran: on ``l``, the
closed forms (``alpha*_T`` of Lemma D.1, the stationary point reached from the Thm 6.3 init); at finite
``L_tr``, replicate minimisers of ``l_{N,L_tr}`` on ``N`` fresh prompts each (:mod:`.common.reference`, arm
``reference/Ltr<L>``, one "member" per replicate) whose spread enters every interval.

Declared in the seed's ``experiments.yaml`` (``tdlab explain icl-lsa-vs-lca``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Hypothesis, Threshold
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper002_cross_attention.common.reference import finite_context_minimisers
from tdlab.experiments.paper002_cross_attention.common.synthetic import (
    APP_H_CONTEXT,
    ICLTrainConfig,
    LSATrainConfig,
    RegressionArms,
    TaskConfig,
    TestConfig,
    at,
    context_provenance,
    curve_by_step,
    fit_arms,
    lca_builder,
    prepare_test_sets,
    threads_field,
)
from tdlab.models.linear_attention import LSA
from tdlab.rounds import current_round
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import derive_seed, member_seeds
from tdlab.theory.icl import (
    alpha_star,
    alpha_star_T,
    bayes_risk,
    finite_context_variance_floor,
    infinite_context_excess_risk,
    lsa_infinite_context_floor,
    one_param_init,
    two_param_init,
    two_param_stationary,
)
from tdlab.train.cpu import cpu_threads
from tdlab.train.regression import RegressionTrainer


class LsaVsLcaClaims(Config):
    # Thm 4.1: LSA's infinite-context excess >= (1 - tol) x the derived floor (a scientific margin; the
    # members' spread, which includes the Monte-Carlo error of the population test set, is added on top)
    lsa_floor_rel_tol: float = Field(0.1, ge=0.0, lt=1.0)
    # Sec. 7 "several orders of magnitude": log10(LSA / LCA excess) at the largest L_te >= this; tested only
    # where the theory of the setting that ran allows it there (see IclLsaVsLca.measure)
    orders: float = Field(2.0, ge=0.0, le=10.0)
    # Thms 6.2.1 / 6.3.1: |alpha_T (beta_T) - reference| <= tol x |reference|; the members' spread and the
    # reference's Monte-Carlo error (replicate draws) are added by the verdict
    alpha_rel_tol: float = Field(0.05, ge=0.0, le=1.0)
    # finite-L_tr reference: each replicate draw is the minimiser of an independent copy of the loss the arms train
    # on, l_{N,L_tr} on N = train.prompts fresh prompts (IclLsaVsLca.reference_prompts), so the draws' mean is
    # unbiased for the arms' expected minimiser and their standard error is its error. A number here instead draws
    # tokens / (L_tr + 1) prompts per replicate (the earlier design): those draws estimate argmin l_{L_tr}
    # only up to a heavy-tail bias their spread does not show (+7.5 % at T = 10 for 20,763 prompts; docs/icl.md)
    reference_tokens: int | None = Field(None, ge=1000, le=1 << 30)
    reference_draws: int = Field(8, ge=2, le=256)  # independent replicate draws of the reference


class LsaVsLcaConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # App. G: 10 training runs (paper profile)
    task: TaskConfig = TaskConfig()
    depths: list[int] = [1, 2, 5, 10, 20, 50]  # Fig. 2 right (values not listed in the seed)
    fixed_depth: int = Field(10, ge=1)  # Fig. 2 left (T not stated); Figs. 5-6 use T = 10
    fixed_context: int = Field(1000, ge=1)  # Fig. 2 right: the L_te of the depth sweep (not stated)
    train_contexts: Annotated[list[int], Field(min_length=1), Distinct] = [
        APP_H_CONTEXT,
        1000,
    ]  # App. H: L_tr = 100; 1000 (ours): the finite-context effect fades
    population: bool = True  # also train on the population loss l (L_tr -> inf), the setting of Thms 6.2-6.3
    population_prompts: int = Field(65536, ge=16, le=10_000_000)  # fixed Monte-Carlo sample for l
    # population loss estimated with (y^Bayes - y_hat)^2: same gradient as l, without the query-noise variance
    population_target: Literal["response", "bayes"] = "bayes"
    models: Annotated[list[Literal["lsa", "one", "two"]], Field(min_length=1), Distinct] = ["lsa", "one", "two"]
    train: ICLTrainConfig = ICLTrainConfig()
    lsa_train: LSATrainConfig = LSATrainConfig()
    test: TestConfig = TestConfig()
    claims: LsaVsLcaClaims = LsaVsLcaClaims()
    cpu_threads: int | None = threads_field()

    @model_validator(mode="after")
    def _check(self) -> LsaVsLcaConfig:
        if not self.depths or sorted(set(self.depths)) != self.depths or self.depths[0] < 1:
            raise ValueError("depths must be increasing, distinct and >= 1")
        if self.fixed_depth not in self.depths:
            raise ValueError("fixed_depth must be one of depths")
        if self.fixed_context not in self.test.contexts:
            raise ValueError("fixed_context must be one of test.contexts")
        return self

    def objectives(self) -> list[str]:
        return [f"Ltr{L}" for L in self.train_contexts] + (["pop"] if self.population else [])

    def trainer_config(self, objective: str) -> ICLTrainConfig:
        if objective == "pop":
            return self.train.updated(
                {"objective": "population", "prompts": self.population_prompts, "target": self.population_target}
            )
        return self.train.updated({"context": int(objective[3:])})


def _floor(cfg: LsaVsLcaConfig, row=None) -> float:
    return lsa_infinite_context_floor(cfg.task.build())


def _rel(cfg: LsaVsLcaConfig, row) -> float:
    return cfg.claims.alpha_rel_tol * abs(float(row.context["reference"]))


def _theorem_provenance(objective: str):
    """Thms 6.2-6.3 are stated on ``l`` and App. H trains at L_tr = 100: both the seed's; other L_tr ours."""
    return "paper" if objective == "pop" else context_provenance(objective)


# Thm 4.1 assumes |m| and zeta atomless (footnote 1): the uniform norms always are, zeta only under its Gaussian law
# (App. H); a Rademacher zeta (+-1, ours) has atoms, and the theorem says nothing there.
ATOMLESS = Hypothesis(
    "|m| and zeta atomless (Thm 4.1): zeta ~ N(0, 1) as in App. H, not the +-1 law",
    lambda cfg: cfg.task.zeta == "gaussian",
)
# Assumption 6.1: |m|^2 has a continuous law with ess inf < ess sup < inf (Thms 6.2, 6.3). Uniform norms on
# [lo, hi], lo < hi (validated): always met; stated so that the declaration carries it.
ASSUMPTION_6_1 = Hypothesis(
    "Assumption 6.1: |m|^2 continuous with m_lower < m_upper < inf (uniform norms on [lo, hi], lo < hi)",
    lambda cfg: cfg.task.norm_range[0] < cfg.task.norm_range[1],
)
# Fig. 2 left: rows exist only where the setting's theory allows claims.orders decades at the largest L_te (measure);
# a row without the measured allowance (an older record) is outside.
ORDERS_ALLOWED = Hypothesis(
    "the theory of the setting that ran (its reference parameters' L_te = inf excess plus the L_te variance floor) "
    "allows claims.orders decades below the LSA floor at the largest L_te",
    lambda cfg, row: float(row.context.get("allowed", -math.inf)) >= cfg.claims.orders,
    on="row",
)


def _floor_or_bayes(cfg: LsaVsLcaConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted LSA excesses at L_te = inf, at the run's members: at the floor (the best single-layer LSA, what
    Thm 4.1 leaves possible) and at 0 (the Bayes predictor: in-context learning, what Thm 4.1 excludes), each
    spread a fifth of the tolerance."""
    floor = _floor(cfg)
    return planted_pair(floor, 0.0, cfg.claims.lsa_floor_rel_tol * floor / 5, cfg.members)


FINITE_SETTING = (
    "Thms 6.2-6.3 run gradient flow on l = lim_{N, L_tr -> inf} l_{N, L_tr}; judged against the theory of the finite "
    "setting that ran: on the population arms (L_tr = inf exactly, a fixed Monte-Carlo sample of population_prompts) "
    "against the closed form (alpha*_T of Lemma D.1; the stationary point of l reached from the Thm 6.3 init), and "
    "at App. H's L_tr = 100, N = train.prompts against the expected minimiser of l_{N, L_tr} reached by descent from "
    "the arms' init (replicate draws of N fresh prompts each: their standard error is in the interval). Never "
    "against alpha*_T at finite L_tr, nor against argmin l_{L_tr} (N -> inf), which prompts too rare for any training "
    "set decide (docs/icl.md)"
)

# The convergence claims' tolerance: ours, uncalibrated (a claim judged against a measured reference has no
# planted case the framework can judge), so it decides holds but a fail stays not resolved.
REL_TOL = Threshold(
    "ours",
    "claims.alpha_rel_tol = 5 % of the reference; the members' spread and the reference's replicate error are "
    "added by the verdict. Not calibrated: a claim judged against a measured reference has no planted case "
    "the framework can judge, so a fail stays not resolved",
)


def _lsa_bounded_away_from_bayes_tolerance(cfg: Any, row: Any) -> float:
    return cfg.claims.lsa_floor_rel_tol * _floor(cfg)


def _lsa_bounded_away_from_bayes_scope(cfg: Any, row: Any) -> bool:
    return True


@register
class IclLsaVsLca(RegressionArms, Experiment[LsaVsLcaConfig]):
    Config = LsaVsLcaConfig

    @staticmethod
    def arms(cfg: LsaVsLcaConfig) -> list[tuple[str, str, int]]:
        """``(model, objective, T)`` of every trained arm; LSA only at the first (App. H's) L_tr."""
        out = []
        if "lsa" in cfg.models:
            out.append(("lsa", cfg.objectives()[0], 1))
        out += [(m, o, T) for m in ("one", "two") if m in cfg.models for o in cfg.objectives() for T in cfg.depths]
        return out

    @staticmethod
    def arm_name(model: str, objective: str, T: int) -> str:
        return f"lsa/{objective}" if model == "lsa" else f"{model}/T{T}/{objective}"

    @staticmethod
    def reference_arm(objective: str) -> str:
        return f"reference/{objective}"

    def run(self, cfg: LsaVsLcaConfig, ctx: RunContext) -> None:
        task = cfg.task.build()
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            self._draw_references(cfg, task, ctx)
            tests, pop = prepare_test_sets(task, seeds, cfg.test, ctx)
            cache: dict = {}  # the members' prompts, drawn once and shared by every arm (and lane)
            fits = []
            for model, objective, T in self.arms(cfg):
                arm = self.arm_name(model, objective, T)
                tcfg: ICLTrainConfig
                build: Callable[[list[int]], torch.nn.Module]
                if model == "lsa":
                    tcfg = cfg.lsa_train.updated({"context": int(objective[3:])})
                    build = lambda s: LSA(task.d, s, dtype=torch.float64)  # noqa: E731
                else:
                    tcfg = cfg.trainer_config(objective)
                    build = lca_builder(task, model, T)
                trainer = RegressionTrainer(tcfg, ctx.device, ctx.progress, label=arm, cache=cache)
                fits.append(Fit(arm, trainer, build, seeds, task))
            fit_arms(ctx, fits, tests, pop)  # at once, on one-thread lanes

    def _draw_references(self, cfg: LsaVsLcaConfig, task, ctx: RunContext) -> None:
        """Replicate draws of the finite-L_tr minimisers, stored as arm ``reference/Ltr<L>``: step = T,
        member = replicate, names ``alpha_one``, ``alpha_two``, ``beta_two``."""
        starts = {T: two_param_init(task, T) for T in cfg.depths if T > 1}  # the arms' inits (Thm 6.3)
        spent: dict[int, float] = {}  # wall seconds of each newly computed draw index, over the objectives
        kept = current_round()  # the draws earlier --decide rounds of this run computed (tdlab.rounds)
        for o in cfg.objectives():
            arm = self.reference_arm(o)
            if o == "pop" or ctx.done(arm):
                continue
            L = int(o[3:])
            n = self.reference_prompts(cfg, L)
            rows = []
            for r in range(cfg.claims.reference_draws):
                # draw r depends on this key alone: a --decide round with more draws computes only the new ones
                key = ("reference", cfg.task.model_dump_json(), tuple(cfg.depths), L, n, cfg.seed, r)
                if key not in kept.memo:
                    t0 = time.perf_counter()
                    kept.memo[key] = finite_context_minimisers(
                        task,
                        cfg.depths,
                        L,
                        n_prompts=n,
                        seed=derive_seed(cfg.seed, "reference", L, r),
                        one_param_start=one_param_init(task),
                        two_param_starts=starts,
                    )
                    spent[r] = spent.get(r, 0.0) + time.perf_counter() - t0
                ref = kept.memo[key]
                rows += [(T, r, "alpha_one", a) for T, a in ref["one"].items()]
                rows += [
                    (T, r, name, v)
                    for T, ab in ref["two"].items()
                    for name, v in zip(("alpha_two", "beta_two"), ab, strict=True)
                ]
                rows += [(0, r, "prompts", float(n))]
            ctx.writer.add_metrics(arm, rows)
            ctx.writer.save_arrays(arm, [{"done": torch.ones(1)} for _ in range(cfg.claims.reference_draws)])
        if spent:
            kept.unit_seconds["reference draw"] = sum(spent.values()) / len(spent)

    @staticmethod
    def reference_prompts(cfg: LsaVsLcaConfig, L: int) -> int:
        """Prompts per replicate draw of the finite-L_tr reference: the arms' N (``train.prompts``), so that a draw
        is the minimiser of an independent copy of the loss the arms were trained on, ``l_{N, L_tr}``; or
        ``claims.reference_tokens / (L + 1)`` (at least 256) where that is set.

        Why not a larger N: the per-prompt loss is heavy-tailed (a prompt whose sample spike eigenvalue exceeds
        ``2 / alpha`` makes ``(1 - alpha lambda)^T`` explode), so ``argmin l_{n, L}`` falls slowly as ``n`` grows and
        its replicate spread does not show how far it is from any limit (App. H, L = 100, T = 10: 0.0333 at
        n = 2,000, 0.0314 at 20,763, 0.0292 at n -> inf; docs/icl.md). Draws at the arms' N are unbiased for what
        the arms reach, whatever the tail."""
        t = cfg.claims.reference_tokens
        return cfg.train.prompts if t is None else max(256, t // (L + 1))

    @staticmethod
    def population_stationary(cfg: LsaVsLcaConfig, task) -> dict[int, tuple[float, float]]:
        """The closed-form stationary point of the two-parameter loss reached from the Thm 6.3 init, T > 1."""
        return {T: two_param_stationary(task, T, *two_param_init(task, T)) for T in cfg.depths if T > 1}

    def references(self, cfg: LsaVsLcaConfig, run: RunView) -> dict[str, dict[str, dict[int, Sample]]]:
        """Per objective, ``{"one": {T: Sample}, "alpha": {T: Sample}, "beta": {T: Sample}}``: the reference
        each learned parameter is compared with (deterministic closed forms on ``l``; the stored replicate
        draws at finite L_tr). Two-parameter T = 1 is the one-parameter model (beta gets no gradient)."""
        task = cfg.task.build()
        starts = self.population_stationary(cfg, task)
        out: dict[str, dict[str, dict[int, Sample]]] = {}
        for o in cfg.objectives():
            if o == "pop":
                out[o] = {
                    "one": {T: Sample((alpha_star_T(T, task),), deterministic=True) for T in cfg.depths},
                    "alpha": {T: Sample((a,), deterministic=True) for T, (a, _) in starts.items()},
                    "beta": {T: Sample((b,), deterministic=True) for T, (_, b) in starts.items()},
                }
                continue
            arm = self.reference_arm(o)
            out[o] = {
                "one": {T: Sample(at(run, arm, "alpha_one", T)) for T in cfg.depths},
                "alpha": {T: Sample(at(run, arm, "alpha_two", T)) for T in cfg.depths if T > 1},
                "beta": {T: Sample(at(run, arm, "beta_two", T)) for T in cfg.depths if T > 1},
            }
        return out

    def measure(self, cfg: LsaVsLcaConfig, run: RunView) -> Measurements:
        task = cfg.task.build()
        L_max, L_fix = cfg.test.contexts[-1], cfg.fixed_context
        a_star_T = {T: alpha_star_T(T, task) for T in cfg.depths}
        floor = lsa_infinite_context_floor(task)
        var_max, var_fix = finite_context_variance_floor(task, L_max), finite_context_variance_floor(task, L_fix)
        refs = self.references(cfg, run)

        def setting(model: str, o: str, T: int) -> tuple[float, float]:
            """The reference parameters (alpha, beta) of the setting that ran (member/replicate means)."""
            if model == "one" or T == 1:
                a = refs[o]["one"][T].mean
                return a, -a
            return refs[o]["alpha"][T].mean, refs[o]["beta"][T].mean

        models = [m for m in ("one", "two") if m in cfg.models]
        ell = {}
        for m in models:
            for o in cfg.objectives():
                for T in cfg.depths:
                    a, b = setting(m, o, T)
                    ell[(m, o, T)] = float(infinite_context_excess_risk(a, T, task, beta=b))
        caps = {k: float(np.log10(floor / (v + var_max))) for k, v in ell.items()}
        out = Measurements(
            {
                "bayes_risk": bayes_risk(task),
                "alpha_star": alpha_star(task),
                "alpha_star_T": a_star_T,
                "lsa_infinite_context_floor": floor,
                "theory_excess_at_alpha_star_T": {
                    T: float(infinite_context_excess_risk(a_star_T[T], T, task)) for T in cfg.depths
                },
                "theory_excess_of_the_setting": {f"{m}/T{T}/{o}": v for (m, o, T), v in ell.items()},
                f"variance_floor_Lte{L_max}": var_max,
                f"variance_floor_Lte{L_fix}": var_fix,
                f"orders_allowed_by_the_setting_at_Lte{L_max}": {f"{m}/T{T}/{o}": v for (m, o, T), v in caps.items()},
                "reference": {
                    o: {
                        k: {
                            T: {
                                "mean": s.mean,
                                "sd": float(np.std(s.values, ddof=1)) if s.n > 1 else 0.0,
                                "draws": list(s.values),
                            }
                            for T, s in d.items()
                        }
                        for k, d in r.items()
                    }
                    for o, r in refs.items()
                },
            }
        )
        lsa_exc, lsa_arm = None, None
        if "lsa" in cfg.models:
            lsa_arm = self.arm_name("lsa", cfg.objectives()[0], 1)
            lsa_exc = at(run, lsa_arm, "te_excess_mean", L_max)
            lsa_inf = at(run, lsa_arm, "pop_excess_mean", 0)
            out.values[lsa_arm] = {
                "excess_mean_vs_Lte": curve_by_step(run, lsa_arm, "te_excess_mean"),
                "excess_median_vs_Lte": curve_by_step(run, lsa_arm, "te_excess_median"),
                "pop_excess_mean": lsa_inf.tolist(),
            }
            out.row(
                "lsa-bounded-away-from-bayes",
                "lsa",
                Sample(lsa_inf),
                arms=[lsa_arm],
                provenance=context_provenance(cfg.objectives()[0]),
                label=f"LSA's excess at L_te = inf (Monte Carlo, {cfg.test.population_prompts} prompts per member) ≥ "
                f"the best LSA's {floor:.4f} (derived floor)",
            )
        for model in models:
            for o in cfg.objectives():
                self._measure_objective(cfg, run, out, model, o, refs[o], ell, caps, lsa_arm, lsa_exc)
        out.values["skipped_depth_pairs"] = {
            f"{m}/{o}": [[T0, T1] for T0, T1 in itertools.pairwise(cfg.depths) if ell[(m, o, T0)] < var_fix]
            for m in models
            for o in cfg.objectives()
        }
        return out

    def _measure_objective(self, cfg, run, out, model, o, ref, ell, caps, lsa_arm, lsa_exc) -> None:
        """The rows of one model trained on one objective: orders, depth pairs and parameters."""
        c = cfg.claims
        task = cfg.task.build()
        L_max, L_fix = cfg.test.contexts[-1], cfg.fixed_context
        var_fix = finite_context_variance_floor(task, L_fix)
        name = "one-parameter" if model == "one" else "two-parameter"
        tag = "population loss" if o == "pop" else f"l_(N,L_tr), L_tr = {o[3:]}"
        arms = {T: self.arm_name(model, o, T) for T in cfg.depths}
        params = {T: {k: v.double().numpy() for k, v in run.arrays(a).items()} for T, a in arms.items()}
        alphas = {T: params[T]["alpha"] for T in cfg.depths}
        betas = {T: (-params[T]["alpha"] if model == "one" else params[T]["beta"]) for T in cfg.depths}
        exc_fix = {T: at(run, arms[T], "te_excess_mean", L_fix) for T in cfg.depths}
        a_star_T = {T: alpha_star_T(T, task) for T in cfg.depths}
        grads = {T: run.final(arms[T], "grad_norm") for T in cfg.depths}
        tol = cfg.trainer_config(o).grad_tol
        converged = {T: bool(tol is not None and np.all(grads[T] <= tol)) for T in cfg.depths}
        out.values[f"{model}/{o}"] = {
            "alpha_T": {T: alphas[T].tolist() for T in cfg.depths},
            "beta_T": {T: betas[T].tolist() for T in cfg.depths},
            "alpha_T_over_alpha_star_T": {T: (alphas[T] / a_star_T[T]).tolist() for T in cfg.depths},
            "reference_over_alpha_star_T": {
                T: (ref["one"][T].mean if model == "one" or T == 1 else ref["alpha"][T].mean) / a_star_T[T]
                for T in cfg.depths
            },
            "theory_excess_at_learned": {
                T: [
                    float(infinite_context_excess_risk(a, T, task, beta=b))
                    for a, b in zip(alphas[T], betas[T], strict=True)
                ]
                for T in cfg.depths
            },
            f"excess_mean_at_Lte{L_fix}": {T: exc_fix[T].tolist() for T in cfg.depths},
            f"excess_median_at_Lte{L_fix}": {
                T: at(run, arms[T], "te_excess_median", L_fix).tolist() for T in cfg.depths
            },
            "steps_run": {T: int(run.curves(arms[T], "grad_norm")[0].max()) for T in cfg.depths},
            "final_grad_norm": {T: grads[T].tolist() for T in cfg.depths},
            "converged": converged,
            "pop_excess_mean": {T: at(run, arms[T], "pop_excess_mean", 0).tolist() for T in cfg.depths},
            "excess_median_vs_Lte_at_fixed_depth": curve_by_step(run, arms[cfg.fixed_depth], "te_excess_median"),
            "excess_mean_vs_Lte_at_fixed_depth": curve_by_step(run, arms[cfg.fixed_depth], "te_excess_mean"),
        }
        prov = context_provenance(o) if o != "pop" else "ours"  # Fig. 2 is trained at App. H's L_tr
        if lsa_exc is not None:
            for T in cfg.depths:
                if caps[(model, o, T)] < c.orders:
                    continue
                lca = at(run, arms[T], "te_excess_mean", L_max)
                out.row(
                    "lca-orders-below-lsa",
                    f"{model}/T{T}/{o}",
                    Sample(np.log10(lsa_exc / lca)),
                    arms=[lsa_arm, arms[T]],
                    provenance=prov,
                    context={"T": T, "objective": o, "allowed": caps[(model, o, T)]},
                    label=f"{name} LCA_{T} ({tag}): log10(LSA / LCA mean excess) on the same {cfg.test.prompts} prompts "
                    f"at L_te = {L_max} ≥ {c.orders:g} (the setting allows {caps[(model, o, T)]:.2f})",
                )
        for T0, T1 in itertools.pairwise(cfg.depths):
            if ell[(model, o, T0)] < var_fix:
                continue
            out.row(
                "error-decreases-with-depth",
                f"{model}/{o}/T{T0}-T{T1}",
                Sample(exc_fix[T1]),
                Sample(exc_fix[T0]),
                arms=[arms[T0], arms[T1]],
                provenance=prov,
                context={"T0": T0, "T1": T1, "objective": o},
                label=f"{name} ({tag}): mean excess at T = {T1} < at T = {T0} (theory of the setting "
                f"{ell[(model, o, T1)]:.2e} vs {ell[(model, o, T0)]:.2e}, variance floor {var_fix:.2e})",
            )
        what = (
            "alpha*_T (Lemma D.1)" if o == "pop" else f"the expected minimiser of l_(N,L_tr={o[3:]}) (replicate draws)"
        )
        for T in cfg.depths:
            drift = None if converged[T] else run.drift(arms[T], "alpha")
            if model == "one":
                r = ref["one"][T]
                out.row(
                    "one-param-converges-to-minimiser",
                    f"{o}/T{T}",
                    Sample(alphas[T], drift=drift),
                    r,
                    arms=[arms[T]],
                    provenance=_theorem_provenance(o),
                    context={"T": T, "objective": o, "reference": r.mean},
                    label=f"alpha_{T} ({tag}) ≈ {what} = {r.mean:.5f} (alpha*_T = {a_star_T[T]:.5f}, L = inf)",
                )
            elif T > 1:
                drift_b = None if converged[T] else run.drift(arms[T], "beta")
                for pname, vals, r, d in (
                    ("alpha", alphas[T], ref["alpha"][T], drift),
                    ("beta", betas[T], ref["beta"][T], drift_b),
                ):
                    out.row(
                        "two-param-converges-to-stationary-point",
                        f"{o}/T{T}/{pname}",
                        Sample(vals, drift=d),
                        r,
                        arms=[arms[T]],
                        provenance=_theorem_provenance(o),
                        context={"T": T, "objective": o, "reference": r.mean},
                        label=f"{pname}_{T} ({tag}) ≈ the stationary point of {'l' if o == 'pop' else 'l_(N,L_tr=' + o[3:] + ')'} "
                        f"reached from the Thm 6.3 init: {r.mean:.5f}",
                    )

    def notes(self, cfg: LsaVsLcaConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        v = measured.values
        c = cfg.claims
        L_max, L_fix = cfg.test.contexts[-1], cfg.fixed_context
        notes = [
            f"lca-orders-below-lsa: at L_te = {L_max} the theory of each setting (its reference parameters, plus the "
            f"variance floor {v[f'variance_floor_Lte{L_max}']:.2e}) allows the log10(floor / LCA excess) of the "
            f"measurements' orders_allowed_by_the_setting_at_Lte{L_max}. Rows are tested where it allows ≥ {c.orders:g} "
            f"decades; at App. H's L_tr = {APP_H_CONTEXT} the finite-L_tr minimiser (not alpha*_T) is what GD reaches, "
            "so its allowance is what the seed's setting can show.",
            "The alpha_T -> alpha* limit (Thm 6.2.2) is not a separate row: "
            f"alpha*_{cfg.depths[-1]} / alpha* = {v['alpha_star_T'][cfg.depths[-1]] / v['alpha_star']:.3f}.",
        ]
        skipped = {k: p for k, p in v["skipped_depth_pairs"].items() if p}
        if skipped:
            notes.append(
                f"error-decreases-with-depth: depth pairs not tested (the shallower depth's theory excess is below "
                f"the finite-L_te variance floor {v[f'variance_floor_Lte{L_fix}']:.2e} at L_te = {L_fix}): {skipped}"
            )
        for o, r in v["reference"].items():
            if o == "pop":
                continue
            one = r["one"]
            notes.append(
                f"{o}: minimiser of l_(N,L_tr) over {len(next(iter(one.values()))['draws'])} replicate draws "
                "(mean ± sd; / alpha*_T): "
                + ", ".join(
                    f"T = {T}: {x['mean']:.5f} ± {x['sd']:.5f} ({x['mean'] / v['alpha_star_T'][T]:.3f})"
                    for T, x in one.items()
                )
            )
        for key, m in v.items():
            if isinstance(m, dict) and "alpha_T" in m:
                model = key.split("/")[0]
                parts = [
                    f"T={T}: {np.mean(a):.4f}"
                    + (f"/{np.mean(m['beta_T'][T]):.4f}" if model == "two" else "")
                    + f" ({'converged' if m['converged'][T] else 'budget'})"
                    for T, a in m["alpha_T"].items()
                ]
                notes.append(f"{key}: learned α_T{'/β_T' if model == 'two' else ''} (member mean): " + "; ".join(parts))
        notes.append(
            f"Excess errors are means over test prompts; at short L_te they are heavy-tailed (see the medians and "
            f"quantiles in the figure and measurements). LSA's infinite-context floor {v['lsa_infinite_context_floor']:.4f} "
            f"is min_alpha of the LCA_1 loss (tdlab.theory.icl.lsa_infinite_context_floor)."
        )
        return [*super().notes(cfg, measured, groups), *notes]

    def plot(self, cfg: LsaVsLcaConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        task = cfg.task.build()
        meas = analysis.measurements
        styles = {o: ls for o, ls in zip(cfg.objectives(), ["-", "--", ":", "-."], strict=False)}
        colors = {"lsa": "k", "one": "C0", "two": "C3"}

        def over_depth(ax, vals: np.ndarray, o: str, model: str, label: str) -> None:
            """Member mean ± std of ``vals`` (members, depths) against the depths."""
            kw = {"ls": styles[o], "color": colors[model], "marker": "o", "ms": 3, "capsize": 2}
            ax.errorbar(cfg.depths, vals.mean(0), yerr=vals.std(0), label=label, **kw)

        fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
        ax = axes[0]
        for model, o, T in self.arms(cfg):
            if model != "lsa" and cfg.fixed_depth != T:
                continue
            arm = self.arm_name(model, o, T)
            steps, med = run.curves(arm, "te_excess_median")
            _, q25 = run.curves(arm, "te_excess_q25")
            _, q75 = run.curves(arm, "te_excess_q75")
            _, mean = run.curves(arm, "te_excess_mean")
            (line,) = ax.plot(
                steps,
                med.mean(0),
                ls=styles[o],
                color=colors[model],
                marker="o",
                ms=3,
                label=f"{'LSA' if model == 'lsa' else model + '-param LCA'} ({o}) median",
            )
            ax.fill_between(steps, q25.mean(0), q75.mean(0), color=line.get_color(), alpha=0.12, lw=0)
            ax.plot(steps, mean.mean(0), ls=styles[o], color=colors[model], lw=0.8, alpha=0.6)
        ax.axhline(meas["lsa_infinite_context_floor"], color="k", lw=0.8, ls="--", label="LSA floor (L=∞)")
        ax.set_ylim(top=10.0)  # means at short L_te are heavy-tailed (up to ~1e40 at T = 50); they leave the frame
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="L_te",
            ylabel="(ŷ − y_Bayes)² (median, band q25–q75; thin: mean)",
            title=f"Fig. 2 left: T = {cfg.fixed_depth}",
        )
        ax.legend(fontsize=6)
        ax = axes[1]
        for model in (m for m in ("one", "two") if m in cfg.models):
            for o in cfg.objectives():
                vals = np.stack(
                    [at(run, self.arm_name(model, o, T), "te_excess_mean", cfg.fixed_context) for T in cfg.depths], 1
                )
                over_depth(ax, vals, o, model, f"{model}-param ({o})")
        ax.plot(
            cfg.depths,
            [meas["theory_excess_at_alpha_star_T"][T] for T in cfg.depths],
            "g-.",
            label="theory: ℓ_T(α*_T), L=∞",
        )
        if "lsa" in cfg.models:
            lsa = at(run, self.arm_name("lsa", cfg.objectives()[0], 1), "te_excess_mean", cfg.fixed_context)
            ax.axhline(lsa.mean(), color="k", lw=1, label="LSA")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="depth T",
            ylabel="mean (ŷ − y_Bayes)²",
            title=f"Fig. 2 right: L_te = {cfg.fixed_context}",
        )
        ax.legend(fontsize=6)
        ax = axes[2]
        Ts = np.array(cfg.depths)
        ax.plot(Ts, [alpha_star_T(int(T), task) for T in Ts], "g-", lw=2, label="α*_T (closed form, L=∞)")
        ax.axhline(alpha_star(task), color="g", ls=":", label="α* = 2/(2+m̲+m̄)")
        for o, r in meas["reference"].items():
            if o != "pop":
                ax.errorbar(
                    Ts,
                    [r["one"][int(T)]["mean"] for T in Ts],
                    yerr=[r["one"][int(T)]["sd"] for T in Ts],
                    color="g",
                    ls=styles[o],
                    lw=0.8,
                    marker="s",
                    ms=3,
                    capsize=2,
                    label=f"minimiser of ℓ_L ({o})",
                )
        for model in (m for m in ("one", "two") if m in cfg.models):
            for o in cfg.objectives():
                a = np.stack([run.arrays(self.arm_name(model, o, int(T)))["alpha"].double().numpy() for T in Ts], 1)
                over_depth(ax, a, o, model, f"α_T {model}-param ({o})")
                if model == "two":
                    b = np.stack([run.arrays(self.arm_name(model, o, int(T)))["beta"].double().numpy() for T in Ts], 1)
                    ax.plot(Ts, -b.mean(0), ls=styles[o], color="C1", marker="x", ms=4, label=f"−β_T ({o})")
        ax.set(
            xscale="log", xlabel="depth T", ylabel="learned parameter", title="Thms 6.2-6.3: α_T, β_T vs the minimisers"
        )
        ax.legend(fontsize=6)
        return [save_figure(fig, figdir / "fig2_lsa_vs_lca.png")]
