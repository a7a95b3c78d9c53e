"""``icl-ablations``: seed 002, Figs. 5 and 6 (App. G).

Trains every ablation of ``ABLATIONS`` (LCA without ``S_t``, Eq. G.1; the deep LSA, Eq. G.2) beside the
single-layer LSA (Eq. 4.2) and reads test MSE against ``L_te`` on the same test prompts for every model, with
the in-context sample mean's. Variants started from ``F_0 = X`` (``*-F0X``, ours) train beside the seed's
``F_0 = 0`` ablations.

Declared in the seed's ``experiments.yaml`` (``tdlab explain icl-ablations``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.declare import Threshold
from tdlab.config import Config
from tdlab.experiments.base import Experiment, ExperimentConfig, register
from tdlab.experiments.paper002_cross_attention.common.synthetic import (
    ICLTrainConfig,
    LSATrainConfig,
    RegressionArms,
    TaskConfig,
    TestConfig,
    at,
    fit_arms,
    lca_builder,
    prepare_test_sets,
    threads_field,
)
from tdlab.models.linear_attention import LSA
from tdlab.report.standard_figures import Curves, Panel, Series
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import member_seeds
from tdlab.theory.icl import bayes_risk, response_second_moment, sample_mean_risk
from tdlab.train.cpu import cpu_threads
from tdlab.train.regression import RegressionTrainer

ABLATIONS: dict[str, dict] = {
    # name: LCA options (App. G), all at depth T with the paper's F_0 = 0
    "lca-one": {"param": "one"},
    "lca-two": {"param": "two"},
    "no-S-one": {"param": "one", "injection": False},  # Eq. G.1 (predicts 0 exactly from F_0 = 0)
    "deep-lsa-no-S-one": {"param": "one", "attention": "self", "injection": False},  # Eq. G.2 without S_t
    "deep-lsa-two": {"param": "two", "attention": "self"},  # Eq. G.2 with S_t re-introduced
    # ours: F_0 = X, so that the no-S_t models are not identically zero
    "no-S-one-F0X": {"param": "one", "injection": False, "f0": "x"},
    "deep-lsa-no-S-one-F0X": {"param": "one", "attention": "self", "injection": False, "f0": "x"},
}
ZERO_PREDICTORS = ("no-S-one", "deep-lsa-no-S-one")  # the seed's one-parameter ablations (F_0 = 0): F_t = 0
F0X = ("no-S-one-F0X", "deep-lsa-no-S-one-F0X")  # ours
LCAS = ("lca-one", "lca-two")


class AblationClaims(Config):
    # "fails to improve upon the sample mean" is tested at every L_te >= this (at shorter L_te y_bar's own
    # 1/L_te estimation cost dominates the comparison)
    min_context: int = Field(100, ge=1)
    # an MSE equal to another's up to floating-point summation order (the zero predictors' MSE is the mean
    # y_q^2 of the same prompts, summed by another code path)
    numerical_tol: float = Field(1e-9, ge=0.0, le=1e-3)


class AblationConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # Figs. 5-6: 10 training runs (paper profile)
    task: TaskConfig = TaskConfig()
    depth: int = Field(10, ge=1)  # Figs. 5-6: T = 10
    models: list[str] = [
        "lca-one",
        "lca-two",
        "no-S-one",
        "deep-lsa-no-S-one",
        "deep-lsa-two",
        "lsa",
        "no-S-one-F0X",
        "deep-lsa-no-S-one-F0X",
    ]
    train: ICLTrainConfig = ICLTrainConfig()  # Figs. 5-6: GD on l_{N,L_tr}, L_tr = 100, N = 2000
    lsa_train: LSATrainConfig = LSATrainConfig()
    test: TestConfig = TestConfig()
    claims: AblationClaims = AblationClaims()
    cpu_threads: int | None = threads_field()

    @model_validator(mode="after")
    def _check(self) -> AblationConfig:
        bad = [m for m in self.models if m != "lsa" and m not in ABLATIONS]
        if bad or len(set(self.models)) != len(self.models):
            raise ValueError(f"models must be distinct names from {[*sorted(ABLATIONS), 'lsa']}; got {bad}")
        return self


def _provenance(model: str):
    return "ours" if model in F0X else "paper"


DIRECTION = Threshold(
    "paper", "the direction the figure shows (no margin), paired over members on the same test prompts"
)


def _mse_vs_context(file: str, title: str, names: list[str]) -> Curves:
    """One log–log panel: test MSE (mean ± std over members) against L_te of the models ``names`` the run has,
    with the sample mean's and the Bayes predictor's on the same prompts."""

    def panels(cfg: AblationConfig, meas: Mapping[str, Any]) -> list[Panel]:
        Ls = cfg.test.contexts
        models = [
            Series(
                Ls,
                meas[f"{m}/mse_vs_Lte"],
                m + (" (ours)" if m in F0X else ""),
                style="o:" if m in F0X else "o-",
                yerr=meas[f"{m}/mse_std_vs_Lte"],
            )
            for m in names
            if m in cfg.models
        ]
        return [
            Panel(
                f"{title}: T = {cfg.depth}",
                series=[
                    *models,
                    Series(Ls, meas["sample_mean_mse"], "sample mean ȳ", style="k--"),
                    Series(Ls, meas["bayes_mse"], "Bayes ⟨w, x_q⟩", style="k:"),
                ],
                xscale="log",
                yscale="log",
                xlabel="L_te",
                ylabel="test MSE (mean ± std over runs)",
            )
        ]

    return Curves(file, panels, size=(6.5, 4.6), legend=7)


@register
class IclAblations(RegressionArms, Experiment[AblationConfig]):
    Config = AblationConfig

    figures = (
        _mse_vs_context("fig5_ablations_no_S.png", "Fig. 5", ["lca-one", "lca-two", *ZERO_PREDICTORS, *F0X]),
        _mse_vs_context("fig6_ablations_deep_lsa.png", "Fig. 6", ["lca-one", "lca-two", "deep-lsa-two", "lsa"]),
    )

    def run(self, cfg: AblationConfig, ctx: RunContext) -> None:
        task = cfg.task.build()
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            tests, pop = prepare_test_sets(task, seeds, cfg.test, ctx)
            cache: dict = {}  # the members' prompts, drawn once and shared by every arm (and lane)
            fits = []
            for name in cfg.models:
                tcfg: ICLTrainConfig
                build: Callable[[list[int]], torch.nn.Module]
                if name == "lsa":
                    tcfg, build = cfg.lsa_train, (lambda s: LSA(task.d, s, dtype=torch.float64))
                else:
                    kw = dict(ABLATIONS[name])
                    model = "one" if kw.pop("param") == "one" else "two"
                    tcfg, build = cfg.train, lca_builder(task, model, cfg.depth, **kw)
                trainer = RegressionTrainer(tcfg, ctx.device, ctx.progress, label=name, cache=cache)
                fits.append(Fit(name, trainer, build, seeds, task))
            fit_arms(ctx, fits, tests, pop)  # at once, on one-thread lanes

    def measure(self, cfg: AblationConfig, run: RunView) -> Measurements:
        """App. G's statements as comparisons between arms on the same test prompts (paired over members, which
        share seeds and test prompts), at the largest L_te unless said otherwise."""
        task = cfg.task.build()
        c = cfg.claims
        Ls = cfg.test.contexts
        L_max = Ls[-1]
        k_max = Ls.index(L_max)
        big = [L for L in Ls if c.min_context <= L] or [L_max]
        mse = {m: np.stack([at(run, m, "te_mse", L) for L in Ls], 1) for m in cfg.models}
        mean = np.stack([at(run, "baselines", "sample_mean_mse", L) for L in Ls], 1)
        bayes = np.stack([at(run, "baselines", "bayes_mse", L) for L in Ls], 1)
        zero = np.stack([at(run, "baselines", "zero_mse", L) for L in Ls], 1)
        out = Measurements(
            {
                "L_te": Ls,
                "bayes_risk": bayes_risk(task),
                "sample_mean_risk_theory": {L: sample_mean_risk(task, L) for L in Ls},
                "zero_predictor_risk_theory": response_second_moment(task),
                "sample_mean_mse": mean.mean(0).tolist(),
                "bayes_mse": bayes.mean(0).tolist(),
                "zero_mse": zero.mean(0).tolist(),
                **{f"{m}/mse_vs_Lte": mse[m].mean(0).tolist() for m in cfg.models},
                **{f"{m}/mse_std_vs_Lte": mse[m].std(0).tolist() for m in cfg.models},
                "converged": {
                    m: bool(np.all(run.final(m, "grad_norm") <= (cfg.train.grad_tol or 0.0)))
                    for m in cfg.models
                    if m != "lsa"
                },
            }
        )

        v = out.values  # the MSEs at the largest L_te again, as one table: models and baselines × (L_te, mean, std)
        v["at_largest_L_te"] = {
            **{
                m: {"L_te": L_max, "mse": v[f"{m}/mse_vs_Lte"][-1], "mse_std": v[f"{m}/mse_std_vs_Lte"][-1]}
                for m in cfg.models
            },
            "sample_mean": {"L_te": L_max, "mse": v["sample_mean_mse"][-1], "mse_std": None},
            "bayes": {"L_te": L_max, "mse": v["bayes_mse"][-1], "mse_std": None},
        }

        def has(*names: str) -> bool:
            return all(n in cfg.models for n in names)

        def at_max(m: str) -> Sample:
            return Sample(mse[m][:, k_max])

        for name in (n for n in ZERO_PREDICTORS + F0X if has(n)):
            prov = _provenance(name)
            if has("lca-one"):
                # a zero predictor cannot train (its gradient is 0): the row depends on the LCA's training only
                out.row(
                    "removing-S-compromises-lca",
                    name,
                    at_max(name),
                    at_max("lca-one"),
                    arms=["lca-one"] if name in ZERO_PREDICTORS else [name, "lca-one"],
                    provenance=prov,
                    label=f"MSE of {name}{' (F_0 = X, ours)' if prov == 'ours' else ''} > MSE of lca-one at L_te = {L_max}",
                )
            for L in big if name in F0X else ():
                k = Ls.index(L)
                out.row(
                    "one-param-ablations-no-better-than-sample-mean",
                    f"{name}/L{L}",
                    Sample(mse[name][:, k] - zero[:, k]),
                    arms=[name],
                    provenance=prov,
                    context={"L_te": L},
                    label=f"{name}{' (F_0 = X, ours)' if prov == 'ours' else ''}: MSE − the sample mean's L_te -> inf "
                    f"limit's (mean y_q²) on the same prompts ≥ 0 at L_te = {L} (ȳ's own MSE there: "
                    f"{mean[:, k].mean():.4f})",
                )
            if name in ZERO_PREDICTORS:
                out.row(
                    "no-S-ablations-predict-zero",
                    name,
                    Sample(np.abs(mse[name] - zero).max(1), deterministic=True),
                    label=f"{name}: largest |MSE − mean y_q²| over L_te",
                )
        # deep-lsa-two between its neighbours: (rows key, the arms it needs, smaller MSE, larger MSE, label)
        for key, arms, lo, hi, what in (
            ("worse-than-lca-two", ["deep-lsa-two", "lca-two"], "lca-two", "deep-lsa-two", "lca-two < deep-lsa-two"),
            ("better-than-sample-mean", ["deep-lsa-two"], "deep-lsa-two", None, "deep-lsa-two < ȳ"),
            ("better-than-lsa", ["deep-lsa-two", "lsa"], "deep-lsa-two", "lsa", "deep-lsa-two < single-layer LSA"),
        ):
            if has(*arms):
                larger = Sample(mean[:, k_max]) if hi is None else at_max(hi)
                out.row(
                    "deep-lsa-two-between", key, at_max(lo), larger, arms=arms, label=f"MSE {what} at L_te = {L_max}"
                )
        others = [m for m in cfg.models if m not in LCAS and m not in F0X]
        trainable = [m for m in others if m not in ZERO_PREDICTORS]
        for name in (n for n in LCAS if has(n)):
            best = np.min(np.stack([mse[m][:, k_max] for m in others] + [mean[:, k_max]], 1), 1)
            out.row(
                "lca-best-of-all",
                name,
                at_max(name),
                Sample(best),
                arms=[name, *trainable],
                label=f"MSE {name} < the best of {[*others, 'ȳ']} (per member) at L_te = {L_max}",
            )
        return out

    def notes(self, cfg: AblationConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        v = measured.values
        Ls = cfg.test.contexts
        notes = []
        zero_pred = [n for n in ZERO_PREDICTORS if n in cfg.models]
        if zero_pred:
            notes.append(
                f"The seed's one-parameter ablations ({', '.join(zero_pred)}) start from F_0 = 0 and, without S_t, keep F_t = 0: "
                f"they predict exactly 0, the sample mean's L_te -> inf limit, so 'no better than the sample mean' holds for "
                f"them by construction (their MSE, E[y²] = {v['zero_predictor_risk_theory']:g}, is below ȳ's 1 + 1/L_te only "
                f"by ȳ's own estimation cost). The F_0 = X variants are ours: trainable, shown, never deciding."
            )
        gd = [m for m in cfg.models if m != "lsa"]
        if gd:
            stopped = [m for m in gd if not v["converged"].get(m)]
            notes.append(
                f"GD converged: {', '.join(m for m in gd if m not in stopped) or 'none'}; stopped at its step budget: "
                f"{', '.join(stopped) or 'none'}. Their MSEs at L_te = {Ls[-1]}: the at_largest_L_te table."
            )
        return [*super().notes(cfg, measured, groups), *notes]
