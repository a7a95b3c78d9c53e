"""``icl-unrestricted``: seed 002, Fig. 3 (Sec. 7, App. H).

Trains the less-restricted LCA_T (untied scalars, diagonal and full ``(W^S_t, W^V_t)``) from
``(alpha*, -alpha*)`` plus ``sigma_init`` Gaussian noise, and reads per layer the projections
``tr(W^S_t)/d``, ``tr(W^V_t)/d`` and the whitening error ``||X F_t^T / L - I||_F / sqrt(d)`` (Eq. 6.1),
the projections against the untied scalar model's optimum in the setting that ran (arm
``reference/untied``, :func:`.reference.untied_optimum`).

Declared in the seed's ``experiments.yaml`` (``tdlab explain icl-unrestricted``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper002_cross_attention.common.reference import untied_optimum
from tdlab.experiments.paper002_cross_attention.common.synthetic import (
    ICLTrainConfig,
    RegressionArms,
    TaskConfig,
    draw_tests,
    threads_field,
)
from tdlab.models.linear_attention import LCA
from tdlab.probes.whitening import relative_move, whitening_from_stats, whitening_noise
from tdlab.run_context import Fit, RunContext, init_arm
from tdlab.run_view import RunView
from tdlab.seeding import derive_seed, member_seeds
from tdlab.theory.icl import alpha_star, response_second_moment, whitening_error_limit_by_layer
from tdlab.theory.icl_stats import PromptStats
from tdlab.train.cpu import cpu_threads
from tdlab.train.regression import RegressionTrainer, load_member_states
from tdlab.train.trainer import FitResult

APP_H_SIGMA = 0.1  # App. H: sigma_init = 0.1

Param = Literal["untied", "diagonal", "full"]


class UnrestrictedTrainConfig(ICLTrainConfig):
    """Fig. 3 (App. H): GD on l_{N, L_tr}; the matrix models never come to rest, so a step budget.
    Not in the seed: the first step size is chosen by an Armijo line search from the initial gradient
    (``initial_step="armijo"``): App. H's full matrices at sigma_init = 0.1 start at a training loss ~1e11,
    where any fixed step of GD is rejected."""

    steps: int = Field(2000, ge=0, le=10_000_000)
    initial_step: Literal["fixed", "armijo"] = "armijo"


class UnrestrictedClaims(Config):
    # Fig. 3 left "cluster around": |layer mean of alpha_hat_t - reference| <= tol x the reference's alpha
    # (beta_hat: on the same scale); the members' spread and the reference's replicate error are added
    proj_rel_tol: float = Field(0.25, ge=0.0, le=10.0)
    # the stage every arm must pass: every member's parameters moved by at least this fraction of their
    # initial offset from (alpha* I, -alpha* I); otherwise its projections and whitening still show the init
    # (App. H centres the init on (alpha*, -alpha*), the tied optimum)
    min_move: float = Field(0.1, ge=0.0, le=10.0)
    # Fig. 3 right: a layer-to-layer rise of the whitening error counts only above this many standard errors of
    # the measured layer-to-layer noise (bootstrap over the diagnostic's prompts, stored by the run)
    whitening_noise_z: float = Field(2.0, ge=0.0, le=10.0)
    whitening_bootstrap: int = Field(200, ge=10, le=100_000)  # bootstrap resamples of the noise estimate
    # the untied optimum of l_{L_tr} (the projections' reference): prompts per replicate and replicates
    reference_prompts: int = Field(16384, ge=256, le=10_000_000)
    reference_draws: int = Field(8, ge=2, le=256)


class UnrestrictedConfig(ExperimentConfig):
    members: int = Field(10, ge=1, le=4096)  # App. H: points/curves averaged over ten independent runs
    task: TaskConfig = TaskConfig()
    depth: int = Field(10, ge=1)  # "setup same as in Figure 2"; T not stated, Figs. 5-6 use 10
    params: Annotated[list[Param], Field(min_length=1), Distinct] = ["untied", "diagonal", "full"]  # App. H
    sigmas: Annotated[list[Annotated[float, Field(ge=0.0)]], Field(min_length=1), Distinct] = [
        APP_H_SIGMA
    ]  # App. H: sigma_init = 0.1 around (alpha*, -alpha*)
    train: UnrestrictedTrainConfig = UnrestrictedTrainConfig()
    whitening_prompts: int = Field(500, ge=1, le=1_000_000)  # fresh prompts for the whitening diagnostic
    whitening_contexts: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = [
        100,
        1000,
    ]  # L of the diagnostic: L_tr (App. H) and a longer one
    claims: UnrestrictedClaims = UnrestrictedClaims()
    cpu_threads: int | None = threads_field()

    @model_validator(mode="after")
    def _check(self) -> UnrestrictedConfig:
        return self


def _build(d: int, depth: int, param: Param, alpha0: float, sigma: float, seeds: list[int]) -> LCA:
    """An arm's members: ``param`` LCA_T at ``(alpha0, -alpha0)`` plus ``sigma`` Gaussian noise (App. H), float64."""
    return LCA(d, depth, seeds, param=param, alpha0=alpha0, sigma_init=sigma, dtype=torch.float64)


MOVED = Stage(
    "moved-from-init",
    "every member's trained weights moved at least claims.min_move of their initial "
    "offset from (α*, −α*): App. H centres the init on the tied optimum, so an arm that stayed there shows "
    "the init, not what training found",
)


def _provenance(sigma: float):
    return "paper" if math.isclose(sigma, APP_H_SIGMA) else "ours"


def _projections_cluster_around_alpha_star_tolerance(cfg: Any, row: Any) -> float:
    return cfg.claims.proj_rel_tol * abs(float(row.context["scale"]))


def _whitening_decreases_with_layer_tolerance(cfg: Any, row: Any) -> float:
    return cfg.claims.whitening_noise_z * float(row.context["noise"])


@register
class IclUnrestricted(RegressionArms, Experiment[UnrestrictedConfig]):
    Config = UnrestrictedConfig

    @staticmethod
    def arm(param: str, sigma: float) -> str:
        return f"{param}/sigma{sigma:g}"

    REFERENCE = "reference/untied"

    def run(self, cfg: UnrestrictedConfig, ctx: RunContext) -> None:
        task = cfg.task.build()
        seeds = member_seeds(cfg.seed, cfg.members)
        a_star = alpha_star(task)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            self._draw_reference(cfg, ctx)
            cache: dict = {}  # the members' prompts, drawn once and shared by every arm (and lane)
            batches = draw_tests(task, seeds, cfg.whitening_contexts, cfg.whitening_prompts, ctx.device)
            arms = [
                (self.arm(param, sigma), partial(_build, task.d, cfg.depth, param, a_star, sigma))
                for sigma in cfg.sigmas
                for param in cfg.params
            ]
            trained = ctx.fit_all(
                [
                    Fit(
                        arm,
                        RegressionTrainer(cfg.train, ctx.device, ctx.progress, label=arm, cache=cache),
                        build,
                        seeds,
                        task,
                    )
                    for arm, build in arms
                ]
            )  # at once, on one-thread lanes
            for (arm, build), result in zip(arms, trained, strict=True):
                if not any(name == "alpha_hat" for _, _, name, _ in ctx.writer.arm_rows(arm)):
                    # measured here, not as each fit ends: a stop between the fits and this point leaves
                    # stored fits whose diagnostics the resume measures
                    ctx.writer.add_metrics(
                        arm, self._diagnostics(cfg, arm, build(seeds).to(ctx.device), result, batches)
                    )
            if not ctx.done("tied-reference"):
                # The tied one-parameter model at alpha* on the same prompts: the reference curve of Thm 6.2.
                ref = LCA(task.d, cfg.depth, seeds, param="one", alpha0=a_star, dtype=torch.float64).to(ctx.device)
                rows = []
                for L, b in batches.items():
                    w = whitening_from_stats(ref, b)
                    rows += [
                        (t, e, f"whitening_median_L{L}", float(w.median(-1).values[e, t]))
                        for e in range(len(seeds))
                        for t in range(cfg.depth + 1)
                    ]
                    lim = whitening_error_limit_by_layer(b.m, a_star, cfg.depth)
                    rows += [
                        (t, e, f"whitening_limit_median_L{L}", float(lim.median(-1).values[e, t]))
                        for e in range(len(seeds))
                        for t in range(cfg.depth + 1)
                    ]
                ctx.writer.add_metrics("tied-reference", rows)
                ctx.writer.save_arrays("tied-reference", [{"alpha": torch.tensor([a_star])} for _ in seeds])

    @staticmethod
    def _diagnostics(
        cfg: UnrestrictedConfig, arm: str, model: LCA, result: FitResult, batches: dict[int, PromptStats]
    ) -> list[tuple[int, int, str, float]]:
        """The trained arm's rows: the scalar projections ``alpha_hat``, ``beta_hat`` (step = layer) and the
        whitening error's mean and median (step = layer 0..T) and layer-to-layer noise per context length."""
        model = load_member_states(model, result.states)
        E = model.n_members
        proj_s, proj_v = (v.detach() for v in model.scalar_projections())
        rows = [
            (t, e, name, float(v[e, t]))
            for name, v in (("alpha_hat", proj_s), ("beta_hat", proj_v))
            for e in range(E)
            for t in range(cfg.depth)
        ]
        for L, b in batches.items():
            w = whitening_from_stats(model, b)
            for stat, v in (("mean", w.mean(-1)), ("median", w.median(-1).values)):
                rows += [
                    (t, e, f"whitening_{stat}_L{L}", float(v[e, t])) for e in range(E) for t in range(cfg.depth + 1)
                ]
            noise = whitening_noise(w, cfg.claims.whitening_bootstrap, derive_seed(cfg.seed, f"bootstrap/{arm}/{L}"))
            rows += [(0, e, f"whitening_noise_L{L}", float(noise[e])) for e in range(E)]
        return rows

    def _draw_reference(self, cfg: UnrestrictedConfig, ctx: RunContext) -> None:
        """Replicate draws of the untied optimum of l_(L_tr), stored as arm ``reference/untied``: step = layer,
        member = replicate, names ``alpha`` and ``beta``; ``grad_norm`` and ``iterations`` at step 0.

        The draws run at once on one-thread lanes (:meth:`RunContext.pieces`), each stored as it finishes in
        replicate order, and a requested stop (``--until``, SIGTERM) starts no further draw: at the paper's
        16,384 prompts a draw takes minutes, and a resumed run keeps the draws a stopped attempt stored."""
        if ctx.done(self.REFERENCE):
            return
        task = cfg.task.build()
        stored = {m for _, m, name, _ in ctx.writer.arm_rows(self.REFERENCE) if name == "iterations"}
        todo = [r for r in range(cfg.claims.reference_draws) if r not in stored]
        draws = [
            partial(
                untied_optimum,
                task,
                cfg.depth,
                cfg.train.context,
                n_prompts=cfg.claims.reference_prompts,
                seed=derive_seed(cfg.seed, "untied-reference", r),
                device=ctx.device,
            )
            for r in todo
        ]
        for i, opt in ctx.pieces(self.REFERENCE, draws):  # at once, on one-thread lanes
            r = todo[i]
            rows = [(t, r, name, float(v)) for name in ("alpha", "beta") for t, v in enumerate(opt[name])]
            rows += [(0, r, "grad_norm", float(opt["grad_norm"])), (0, r, "iterations", float(opt["iterations"]))]
            ctx.writer.add_metrics(self.REFERENCE, rows)  # one write per draw: a stop keeps the draws before it
        ctx.writer.save_arrays(self.REFERENCE, [{"done": torch.ones(1)} for _ in range(cfg.claims.reference_draws)])

    def measure(self, cfg: UnrestrictedConfig, run: RunView) -> Measurements:
        task = cfg.task.build()
        a_star = alpha_star(task)
        c = cfg.claims
        L0 = cfg.whitening_contexts[0]
        _, ref_a = run.curves(self.REFERENCE, "alpha")
        _, ref_b = run.curves(self.REFERENCE, "beta")
        ref_alpha, ref_beta = Sample(ref_a.mean(1)), Sample(ref_b.mean(1))
        out = Measurements(
            {
                "alpha_star": a_star,
                "untied_optimum": {
                    "alpha_layer_mean": ref_alpha.values,
                    "beta_layer_mean": ref_beta.values,
                    "alpha_by_layer": ref_a.mean(0).tolist(),
                    "beta_by_layer": ref_b.mean(0).tolist(),
                    "alpha_over_alpha_star": ref_alpha.mean / a_star,
                    "grad_norm": run.final(self.REFERENCE, "grad_norm").tolist(),
                    "prompts_per_draw": c.reference_prompts,
                    "L_tr": cfg.train.context,
                },
            }
        )
        for sigma in cfg.sigmas:
            for param in cfg.params:
                self._measure_arm(cfg, run, out, param, sigma, ref_alpha, ref_beta)
        _, ref = run.curves("tied-reference", f"whitening_median_L{L0}")
        out.values["tied_alpha_star_whitening_median_by_layer"] = ref.mean(0).tolist()
        out.values["zero_predictor_mse"] = response_second_moment(task)
        return out

    def _measure_arm(
        self, cfg, run: RunView, out: Measurements, param: str, sigma: float, ref_alpha: Sample, ref_beta: Sample
    ) -> None:
        task = cfg.task.build()
        a_star = alpha_star(task)
        L0 = cfg.whitening_contexts[0]
        arm = self.arm(param, sigma)
        _, ah = run.curves(arm, "alpha_hat")
        _, bh = run.curves(arm, "beta_hat")
        steps, test = run.curves(arm, "test_loss")
        _, wmed = run.curves(arm, f"whitening_median_L{L0}")
        rise = ((wmed[:, 2:] - wmed[:, 1:-1]) / wmed[:, 1:-1]).max(1) if wmed.shape[1] > 2 else np.zeros(wmed.shape[0])
        noise = float(np.median(run.final(arm, f"whitening_noise_L{L0}")))
        final = {k: v.double().numpy() for k, v in run.arrays(arm).items()}
        init = {k: v.double().numpy() for k, v in run.arrays(init_arm(arm)).items()}
        centre = {
            "alpha": self.centre(param, cfg.depth, task.d, a_star),
            "beta": self.centre(param, cfg.depth, task.d, -a_star),
        }
        move = relative_move(final, init, centre)
        out.stage(arm, MOVED, move, cfg.claims.min_move, "gt", evidence="|θ_final − θ_init| / |θ_init − (α*, −α*)|")
        m = {
            "alpha_hat_layer_mean": ah.mean(1).tolist(),
            "beta_hat_layer_mean": bh.mean(1).tolist(),
            "alpha_hat_mean_by_layer": ah.mean(0).tolist(),
            "beta_hat_mean_by_layer": bh.mean(0).tolist(),
            "final_test_loss": test[:, -1].tolist(),
            "initial_test_loss": test[:, 0].tolist(),
            "steps_run": int(steps[-1]),
            "relative_move_from_init": move.tolist(),
            "largest_relative_whitening_rise": rise.tolist(),
            "whitening_layer_noise": noise,
        }
        for L in cfg.whitening_contexts:
            m[f"whitening_median_by_layer_L{L}"] = run.curves(arm, f"whitening_median_L{L}")[1].mean(0).tolist()
        out.values[arm] = m
        what = {"untied": "untied scalar", "diagonal": "diagonal", "full": "full-matrix"}[param]
        prov = _provenance(sigma)
        ctx = {"param": param, "sigma": sigma, "scale": ref_alpha.mean}
        for name, hat, ref, W, tied in (
            ("alpha", ah, ref_alpha, "W^S", f"α* = {a_star:.4f}"),
            ("beta", bh, ref_beta, "W^V", f"−α* = {-a_star:.4f}"),
        ):
            out.row(
                "projections-cluster-around-alpha-star",
                f"{arm}/{name}",
                Sample(hat.mean(1)),
                ref,
                arms=[arm],
                provenance=prov,
                context=ctx,
                label=f"{what} LCA_{cfg.depth} (σ_init = {sigma:g}): layer mean of tr({W}_t)/d ≈ the untied optimum's "
                f"{ref.mean:.4f} ({tied})",
            )
        out.row(
            "whitening-decreases-with-layer",
            arm,
            Sample(rise),
            arms=[arm],
            provenance=prov,
            context={"param": param, "sigma": sigma, "noise": noise},
            label=f"{what} (σ_init = {sigma:g}): largest relative rise (w_(t+1) − w_t)/w_t, t ≥ 1, within "
            f"{cfg.claims.whitening_noise_z:g} × the layer-to-layer noise {noise:.3g}",
        )
        if wmed.shape[1] > 2:
            out.row(
                "whitening-last-below-first",
                arm,
                Sample(wmed[:, -1]),
                Sample(wmed[:, 1]),
                arms=[arm],
                provenance=prov,
                context={"param": param, "sigma": sigma},
                label=f"{what} (σ_init = {sigma:g}): w_{cfg.depth} < w_1 (paired over members)",
            )

    @staticmethod
    def centre(param: str, T: int, d: int, v: float) -> np.ndarray:
        """The App. H init centre (alpha* or -alpha*) of a parameter, with a leading member axis of 1."""
        shape = {"untied": (T,), "diagonal": (T, d), "full": (T, d, d)}[param]
        c = v * np.broadcast_to(np.eye(d), shape) if param == "full" else np.full(shape, v)
        return c[None]

    def notes(self, cfg: UnrestrictedConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        v = measured.values
        L0 = cfg.whitening_contexts[0]
        ref, u = v["tied_alpha_star_whitening_median_by_layer"], v["untied_optimum"]
        notes = [
            f"Reference: the untied scalar model's optimum of l_(L_tr = {u['L_tr']}) over {len(u['alpha_layer_mean'])} replicate "
            f"draws of {u['prompts_per_draw']} prompts: layer-mean α_t {np.mean(u['alpha_layer_mean']):.4f} ± "
            f"{np.std(u['alpha_layer_mean'], ddof=1):.4f} ({u['alpha_over_alpha_star']:.2f} α*), β_t "
            f"{np.mean(u['beta_layer_mean']):.4f} ± {np.std(u['beta_layer_mean'], ddof=1):.4f} (−α* = {-v['alpha_star']:.4f}): "
            f"at T = {cfg.depth}, finite L_tr, the optimum is not (α*, −α*), the T, L_tr -> inf limit Fig. 3 draws.",
            f"The tied model at α* contracts the bulk eigen-directions by (1 − α*) per layer, so its whitening error "
            f"falls slowly: {ref[1]:.3f} at t = 1 to {ref[-1]:.3f} at t = {cfg.depth} (L = {L0}).",
        ]
        for arm, m in v.items():
            if (
                isinstance(m, dict)
                and "final_test_loss" in m
                and np.mean(m["final_test_loss"]) > v["zero_predictor_mse"]
            ):
                notes.append(
                    f"{arm}: test MSE {np.mean(m['initial_test_loss']):.3g} at init → {np.mean(m['final_test_loss']):.3g} "
                    f"after {m['steps_run']} GD steps, above the zero predictor's E[y²] = 1: not trained in this budget."
                )
        return [*super().notes(cfg, measured, groups), *notes]

    def plot(self, cfg: UnrestrictedConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        a_star = analysis.measurements["alpha_star"]
        u = analysis.measurements["untied_optimum"]
        L0 = cfg.whitening_contexts[0]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        markers = {"untied": "o", "diagonal": "s", "full": "^"}
        for k, sigma in enumerate(cfg.sigmas):
            for param in cfg.params:
                arm = self.arm(param, sigma)
                _, ah = run.curves(arm, "alpha_hat")
                _, bh = run.curves(arm, "beta_hat")
                axes[0].scatter(
                    ah.mean(0),
                    bh.mean(0),
                    marker=markers[param],
                    s=18,
                    alpha=0.8,
                    color=f"C{k}",
                    label=f"{param}, σ={sigma:g}",
                )
                steps, w = run.curves(arm, f"whitening_median_L{L0}")
                axes[1].plot(
                    steps, w.mean(0), marker=markers[param], ms=3, color=f"C{k}", label=f"{param}, σ={sigma:g}"
                )
        axes[0].scatter([a_star], [-a_star], marker="*", s=200, color="k", label="(α*, −α*)")
        axes[0].scatter(
            u["alpha_by_layer"], u["beta_by_layer"], marker="x", s=30, color="g", label="untied optimum of ℓ_L"
        )
        axes[0].set(
            xlabel="α̂_t = tr(W^S_t)/d",
            ylabel="β̂_t = tr(W^V_t)/d",
            title="Fig. 3 left: layer-wise projections (mean over runs)",
        )
        axes[0].legend(fontsize=7)
        steps, ref = run.curves("tied-reference", f"whitening_median_L{L0}")
        axes[1].plot(steps, ref.mean(0), "k--", label="tied α* (one-parameter)")
        axes[1].set(
            yscale="log",
            xlabel="layer t",
            ylabel="median ‖X F_tᵀ/L − I‖_F/√d",
            title=f"Fig. 3 right: whitening, L = {L0}",
        )
        axes[1].legend(fontsize=7)
        return [save_figure(fig, figdir / "fig3_unrestricted.png")]
