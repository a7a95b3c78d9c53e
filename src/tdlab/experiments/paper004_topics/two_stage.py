"""``topics-two-stage``: seed 004 (Li, Li & Risteski, ICML 2023), Fig. 4, §5.1 and §8; the two-stage rule it judges
by (:mod:`.common.lags`) is shared with ``topics-real-two-stage`` (Fig. 5).

The one-hot model of Eq. 7 (``W^E = I`` frozen) with ``W^K``, ``W^Q``, ``W^V`` (and ``b^K, b^Q, b^V, b^pred``)
started near zero and trained *jointly* under the cross-entropy loss (Eq. 4) on §6.1's LDA documents.
Fig. 4 plots ``‖W^K‖_F``, ``‖W^Q‖_F``, ``‖W^V‖_F`` against the step and sees two stages: first ``W^V`` grows
while ``W^K, W^Q`` stay near zero, then ``W^K, W^Q`` grow while ``‖W^V‖`` stays flat. §8's reason: at a
near-zero init ``∇_{W^K} L`` carries the factor ``W^Q ≈ 0`` (Eq. 5) while ``∇_{W^V} L`` carries the
attention ``A``, whose columns sum to one (Eq. 7).

**A grid of settings** (the config's lists ``optimizers``, ``lrs``, ``inits``, ``batches``), one row per
setting. Each (optimiser, batch) is one arm, one ensemble over lr × init × seeds: per-member learning rates are
exact (``Trainer(member_lr=...)``) and per-member init scales come from building each member alone and
:func:`~tdlab.models.ensemble.assemble`-ing them. Init: ``init="uniform"``, ``W ~ U[0, init_scale)`` entrywise;
biases start at 0.

**The two-stage rule** (one measurement, one claim shape; ``topics-real-two-stage`` applies it per layer):
over the first ``horizon`` steps (Fig. 4's x-axis, 1000; Fig. 5's, 400) each norm's relative growth is
``g_X(t) = (‖X_t‖ − ‖X_0‖)/(max_s ‖X_s‖ − ‖X_0‖)`` and its half-growth step ``t½(X)`` the first step with
``g_X ≥ 0.5``. A member's **lag** is ``(min(t½(K), t½(Q)) − t½(V)) / horizon``: how much later the earlier of
W^K, W^Q makes half its growth than W^V does, as a share of the horizon (known to one logging interval;
censored when neither W^K nor W^Q grows within the horizon).

Rows: one per setting of the grid (per-member settings, so each setting's health and stage are its members' own);
the headline setting (``headline_optimizer``, ``headline_lr``, ``headline_init``) runs ``headline_members`` seeds
at every batch, the other settings ``members``.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-two-stage``).

``headline_only`` trains the headline setting alone at each batch of ``batches`` (its optimiser, lr, init; the
other lists are then ignored): the atlas (``atlas_axes``) sweeps optimiser × lr × init scale ×
``authors_compat`` one setting per point, each judged by the same rule.

Under AdamW the start is not lr-sized for every weight: ``∇W^K``, ``∇W^Q`` carry ``W^Q``, ``W^K`` ≈ init
(Eq. 5) and sit far below Adam's ``eps`` at first, which damps their first steps (their first-step norm
change relative to W^V's is measured and reported); they lag W^V by the few steps it takes their
gradients to outgrow ``eps``, and move by ~lr per step after that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ArmHealth, GroupResult, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Calibration, Threshold
from tdlab.config import Distinct
from tdlab.experiments.base import Analysis, Experiment, register
from tdlab.experiments.paper004_topics.common.lags import KQ_GREW, LagClaims, lag_sample
from tdlab.experiments.paper004_topics.common.training import (
    Optimizer,
    Rates,
    TopicsExperimentConfig,
    fit_topics,
    setting_health,
)
from tdlab.models.ensemble import assemble
from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
from tdlab.probes.curves import lags
from tdlab.report.standard_figures import Bar, Bars
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.theory.topics import trivial_masked_error

NORMS = ("norm_K", "norm_Q", "norm_V")  # metric names of ‖W^K‖_F, ‖W^Q‖_F, ‖W^V‖_F
# One-hot (Eq. 7), near-zero uniform init (the authors' code); d = d_a = V (seed silent). In the profiles
# too, so that a ``--set model.x=...`` merges into it instead of replacing the whole model config.
MODEL: dict[str, Any] = {"onehot": True, "init": "uniform", "init_scale": 1e-3}


# Fig. 4's stages: stage 1 (W^V grows) over steps 0-400, stage 2 (W^K, W^Q grow) over 400-1000; their midpoints
# place the half-growth steps 200 and 700, a lag of half the horizon.
FIG4_LAG = 0.5


def _fig4_against_simultaneous(cfg: Any, context: Any) -> tuple[Sample, Sample]:
    """Planted settings at the run's member count: Fig. 4's two stages (lag 0.5 of the horizon: the stages'
    midpoints) and the picture §8 contrasts them with, W^K, W^Q growing with W^V (lag 0); members spread a fifth
    of ``lag_share`` (the seed-to-seed spread of the measured lags is 0.01-0.02)."""
    return planted_pair(FIG4_LAG, 0.0, cfg.claims.lag_share / 5, cfg.members)


# A tenth of the horizon fits both figures the rule judges: Fig. 4's stages split at 400 of 1000 steps, Fig. 5's at
# 100 of 400.
LAG_THRESHOLD = Threshold(
    "ours",
    "claims.lag_share = 0.1 of the horizon: W^K, W^Q make half their growth at least a tenth of the horizon after "
    "W^V (Fig. 4 splits its stages at 400 of 1000 steps; fixed before any run)",
    Calibration(
        "planted",
        "members at Fig. 4's lag (the stages' midpoints, 0.5 of the horizon, ± lag_share/5) hold and members whose "
        "W^K, W^Q grow with W^V (lag 0 ± lag_share/5, §8's 'not usually visibly two-stage') fail, at the run's "
        "member count",
        plant=_fig4_against_simultaneous,
        test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
    ),
)


GRID = (
    "every setting of the config's optimizers × lrs × inits × batches (one row each; headline_only: the headline "
    "optimiser, lr and init at each batch). Paper profile: {SGD, Adam} × lr {0.003, 0.01, 0.03} × init U[0, s), "
    "s ∈ {1e-3, 1e-2} × batch {16, 40}; quick: Adam × lr 0.01 × both inits × both batches. The seed names no "
    "setting of Fig. 4: lr around §6.1's 0.01, near-zero inits, batch 40 from the authors' code and 16"
)


class TopicsTwoStageConfig(TopicsExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # seeds per setting (Fig. 4: "different runs in each setting")
    # the grid (module docstring): one arm per optimiser and batch
    optimizers: Annotated[list[Optimizer], Field(min_length=1), Distinct] = ["sgd", "adam"]
    lrs: Annotated[Rates, Field(min_length=1)] = [0.003, 0.01, 0.03]  # a grid around §6.1's 0.01
    inits: Annotated[Rates, Field(min_length=1)] = [1e-3, 1e-2]  # U[0, init) near-zero init scales
    # the seed is silent; 40 is the authors' code's, the verdict moves with it
    batches: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1), Distinct] = [16, 40]
    # The headline setting (fixed before any run; the readings, experiments.yaml) and its seeds, at every batch.
    headline_optimizer: Optimizer = "adam"
    headline_lr: float = Field(0.01, gt=0.0, le=100.0)
    headline_init: float = Field(1e-3, gt=0.0, le=10.0)
    headline_members: int = Field(20, ge=1, le=4096)
    # Train only the headline setting at each batch (the other lists are then ignored): one atlas point per setting,
    # so the atlas (``atlas_axes``) searches optimiser x lr x init x authors_compat for where Fig. 4's stages appear.
    headline_only: bool = False
    horizon: int = Field(1000, ge=2, le=10_000_000)  # steps the rule reads: Fig. 4's x-axis (0-1000)
    model: TopicModelConfig = TopicModelConfig(**MODEL)
    claims: LagClaims = LagClaims()

    @model_validator(mode="after")
    def _check(self) -> TopicsTwoStageConfig:
        if not self.headline_only and (
            self.headline_optimizer not in self.optimizers
            or self.headline_lr not in self.lrs
            or self.headline_init not in self.inits
        ):
            raise ValueError(
                "headline_optimizer / headline_lr / headline_init: the headline setting must be one of "
                f"optimizers={self.optimizers} x lrs={self.lrs} x inits={self.inits}"
            )
        m = self.model
        if not m.onehot or m.uniform_attn or m.embed_only or m.frozen_wv:
            raise ValueError(
                "model: Fig. 4 trains W^K, W^Q, W^V on one-hot inputs; set onehot=true and leave "
                "uniform_attn, embed_only, frozen_wv unset"
            )
        if m.init_scheme != "uniform":
            raise ValueError(
                "model.init: the two-stage experiment starts near zero: init must be 'uniform' "
                "(U[0, init_scale), the authors' code)"
            )
        if m.vocab != self.task.T * self.task.v + 1:
            raise ValueError(f"model.vocab must be T*v + 1 = {self.task.T * self.task.v + 1}")
        return self


@dataclass(frozen=True)
class Setting:
    """One hyperparameter setting of Fig. 4's grid: optimiser, learning rate, init scale, batch size."""

    optimizer: str
    lr: float
    init: float
    batch: int

    @property
    def name(self) -> str:
        return setting_name(self.optimizer, self.lr, self.init, self.batch)

    @property
    def arm(self) -> str:
        return arm_name(self.optimizer, self.batch)


def setting_name(optimizer: str, lr: float, init: float, batch: int) -> str:
    """``"adam/lr0.01/init0.001/b40"``."""
    return f"{optimizer}/lr{lr:g}/init{init:g}/b{batch}"


def arm_name(optimizer: str, batch: int) -> str:
    """``"adam/b40"``: one ensemble, every lr x init setting of one optimiser at one batch size."""
    return f"{optimizer}/b{batch}"


def arm_keys(cfg: TopicsTwoStageConfig) -> dict[str, tuple[Optimizer, int]]:
    """``{arm name: (optimiser, batch)}`` in training order: optimiser-major, then batch."""
    opts = [cfg.headline_optimizer] if cfg.headline_only else list(cfg.optimizers)
    return {arm_name(o, b): (o, b) for o in opts for b in cfg.batches}


def settings(cfg: TopicsTwoStageConfig, arm: str) -> list[Setting]:
    """The settings of one arm (:func:`arm_name`), lr-major then init (the order of their members in the
    ensemble); under ``headline_only`` the headline setting alone."""
    opt, batch = arm_keys(cfg)[arm]
    if cfg.headline_only:
        return [Setting(opt, cfg.headline_lr, cfg.headline_init, batch)]
    return [Setting(opt, lr, init, batch) for lr in cfg.lrs for init in cfg.inits]


def is_headline(cfg: TopicsTwoStageConfig, s: Setting) -> bool:
    """Whether ``s`` is the headline optimiser, lr and init (at any batch)."""
    return (s.optimizer, s.lr, s.init) == (cfg.headline_optimizer, cfg.headline_lr, cfg.headline_init)


def member_settings(cfg: TopicsTwoStageConfig, arm: str) -> list[Setting]:
    """The setting of every member of ``arm``, in member order: each setting's members are contiguous,
    ``cfg.members`` of them (``cfg.headline_members`` for the headline setting)."""
    out = []
    for s in settings(cfg, arm):
        out.extend([s] * (cfg.headline_members if is_headline(cfg, s) else cfg.members))
    return out


# ----------------------------------------------------------------------------------------------
# The two-stage rule on norm curves


def _norm_probe(model) -> dict[str, torch.Tensor]:
    n = model.norms()
    return {"norm_K": n["W_K"], "norm_Q": n["W_Q"], "norm_V": n["W_V"]}


@register
class TopicsTwoStage(Experiment[TopicsTwoStageConfig]):
    Config = TopicsTwoStageConfig

    @staticmethod
    def arms(cfg: TopicsTwoStageConfig) -> list[str]:
        return list(arm_keys(cfg))

    def run(self, cfg: TopicsTwoStageConfig, ctx: RunContext) -> None:
        model = cfg.model.updated(
            {"p_m": cfg.task.p_m, "p_c": cfg.task.p_c, "p_r": cfg.task.p_r, "authors_compat": cfg.authors_compat}
        )
        for arm, (opt, batch) in arm_keys(cfg).items():
            per_member = member_settings(cfg, arm)
            seeds = member_seeds(cfg.seed, len(per_member))
            setting_of = dict(zip(seeds, per_member, strict=True))

            def build(chunk: list[int], setting_of=setting_of) -> TopicAttention:
                # each member alone with its own init scale, then one ensemble (members never mix)
                alone = [TopicAttention(model.updated({"init_scale": setting_of[s].init}), [s]) for s in chunk]
                return assemble(TopicAttention(model, chunk), alone)

            # the arm's batch, also of its documents (authors_compat's fixed set)
            arm_cfg = cfg.updated({"train": cfg.train.updated({"lr": per_member[0].lr, "batch": batch}).model_dump()})
            fit_topics(
                ctx,
                arm_cfg,
                arm,
                model,
                "ce",
                opt,
                seeds,
                build=build,
                probes=[_norm_probe],
                probe_every=1,
                member_lr={s: setting_of[s].lr for s in seeds},
            )

    def trivial_error(self, cfg: TopicsTwoStageConfig, arm: str) -> float:
        return trivial_masked_error(cfg.task, "ce")

    @staticmethod
    def members_of(cfg: TopicsTwoStageConfig, arm: str) -> dict[str, list[int]]:
        """``{setting name: its member indices in arm}``."""
        out: dict[str, list[int]] = {}
        for e, s in enumerate(member_settings(cfg, arm)):
            out.setdefault(s.name, []).append(e)
        return out

    @staticmethod
    def curves(cfg: TopicsTwoStageConfig, run: RunView, arm: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(steps (S,), {norm name: (E, S)})`` of ``arm`` up to ``cfg.horizon``."""
        out = {}
        for name in NORMS:
            steps, vals = run.curves(arm, name)
            keep = steps <= cfg.horizon
            out[name] = vals[:, keep]
        return steps[keep], out

    def health(self, cfg: TopicsTwoStageConfig, run: Run | RunView) -> dict[str, ArmHealth]:
        """Every arm's health and every setting's (the rows' arms)."""
        run = run if isinstance(run, RunView) else RunView(run)
        out = super().health(cfg, run)
        for arm in self.arms(cfg):
            out.update(setting_health(run, arm, self.members_of(cfg, arm), self.trivial_error(cfg, arm)))
        return out

    def measure(self, cfg: TopicsTwoStageConfig, run: RunView) -> Measurements:
        """Per setting of the grid: the members' lags (the claim's row), K/Q growth (the stage), half-growth steps
        and the first-step ratio."""
        c = cfg.claims
        out = Measurements({"horizon": cfg.horizon})
        table = {}
        for arm in self.arms(cfg):
            steps, n = self.curves(cfg, run, arm)
            lg = lags(steps, n["norm_K"], n["norm_Q"], n["norm_V"], c.half)
            for s in settings(cfg, arm):
                name, idx = s.name, self.members_of(cfg, arm)[s.name]
                out.stage(
                    name,
                    KQ_GREW,
                    lg.growth[idx],
                    c.kq_growth_min,
                    "gt",
                    evidence="min(‖W^K‖, ‖W^Q‖) at the horizon / at the start",
                )
                out.row(
                    "value-grows-first",
                    name,
                    lag_sample(lg, steps, idx),
                    arms=[name],
                    context={"setting": name, "optimizer": s.optimizer, "lr": s.lr, "init": s.init, "batch": s.batch},
                    label=f"{name}: mean lag of W^K, W^Q behind W^V ≥ {c.lag_share:g} of the horizon "
                    f"({len(idx)} members)",
                )
                table[name] = {
                    "members": len(idx),
                    "lag": lg.lag[idx].tolist(),
                    "lag_at_least": int(np.sum(lg.lag[idx] >= c.lag_share)),
                    "kq_never_grew": int(np.sum(lg.censored[idx])),
                    "t_half_K": lg.t_k[idx].tolist(),
                    "t_half_Q": lg.t_q[idx].tolist(),
                    "t_half_V": lg.t_v[idx].tolist(),
                    "kq_growth": lg.growth[idx].tolist(),
                    "first_step_kq_over_v": float(np.median(lg.first_step[idx])),
                }
        out.values["settings"] = table
        return out

    def notes(self, cfg: TopicsTwoStageConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        c = cfg.claims
        table = measured.values["settings"]
        notes = []
        for name, t in table.items():
            never = f" ({t['kq_never_grew']} of them because W^K, W^Q never grew)" if t["kq_never_grew"] else ""
            notes.append(
                f"{name}: {t['lag_at_least']}/{t['members']} members with W^K, W^Q half-grown ≥ "
                f"{c.lag_share:g} of the horizon after W^V{never}; mean lag {np.mean(t['lag']):.3g}; median t½ K/Q/V = "
                f"{_med(t['t_half_K'])}/{_med(t['t_half_Q'])}/{_med(t['t_half_V'])}; K/Q growth ≥ "
                f"{min(t['kq_growth']):.3g}x; first-step norm change of W^K, W^Q / W^V's: {t['first_step_kq_over_v']:.2g}"
            )
        adam = [t["first_step_kq_over_v"] for n, t in table.items() if n.startswith("adam/")]
        if adam:
            notes.append(
                "Init: U[0, init_scale) entrywise (the authors' code), a nonzero-mean start. Under AdamW the "
                "first steps are not lr-sized for every weight: ∇W^K, ∇W^Q carry W^Q, W^K ≈ init (Eq. 5) and sit "
                "below Adam's eps, which damps them (first-step norm change of W^K, W^Q relative to W^V's: "
                f"{min(adam):.2g}-{max(adam):.2g} in the Adam settings); once their gradients outgrow eps every "
                "coordinate moves by ~lr per step, so under Adam §8's argument fixes only the first few steps."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    figures = (
        Bars(
            "two_stage_lag_per_setting.png",
            lambda cfg, m: [
                Bar(k.replace("/", "\n"), t["lag"], _setting_colors(cfg).get(k)) for k, t in m["settings"].items()
            ],
            reference=lambda cfg, m: {f"lag share {cfg.claims.lag_share:g}": cfg.claims.lag_share},
            ylabel="(t½(first of W^K, W^Q) − t½(W^V)) / horizon",
        ),
    )

    def plot(self, cfg: TopicsTwoStageConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared lag per setting, then Fig. 4's norms: each member's curve coloured by its setting."""
        from tdlab.report.figures import plt, save_figure

        colors = _setting_colors(cfg)
        fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
        labels = {"norm_K": "‖W^K‖_F", "norm_Q": "‖W^Q‖_F", "norm_V": "‖W^V‖_F"}
        for arm in self.arms(cfg):
            steps, n = self.curves(cfg, run, arm)
            seen = set()
            for e, s in enumerate(member_settings(cfg, arm)):
                head = is_headline(cfg, s)
                for ax, name in zip(axes, NORMS, strict=True):
                    ax.plot(
                        steps,
                        n[name][e],
                        color=colors[s.name],
                        lw=1.4 if head else 0.7,
                        alpha=0.9 if head else 0.6,
                        ls="-" if s.optimizer == "adam" else "--",
                        label=s.name if s.name not in seen and name == "norm_K" else None,
                    )
                seen.add(s.name)
        for ax, name in zip(axes, NORMS, strict=True):
            ax.set_ylabel(labels[name])
        axes[-1].set_xlabel("step")
        axes[0].legend(fontsize=6, ncol=3)
        table = analysis.measurements.get("settings", {})
        shown = sum(t["lag_at_least"] == t["members"] for t in table.values())
        fig.suptitle(
            f"Fig. 4 — norms along training, one curve per member (paper: stage 1 ≈ steps 0-400, stage 2 "
            f"400-1000)\n{shown} of {len(table)} settings with every member lagging ≥ {cfg.claims.lag_share:g}",
            fontsize=9,
        )
        return [*super().plot(cfg, run, analysis, figdir), save_figure(fig, figdir / "fig4_norms.png")]


def _setting_colors(cfg: TopicsTwoStageConfig) -> dict[str, str]:
    """Each setting's colour in both figures: tab20 in the grid's order."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    grid = [s for arm in arm_keys(cfg) for s in settings(cfg, arm)]
    return {s.name: to_hex(colormaps["tab20"](i % 20)) for i, s in enumerate(grid)}


def _med(x: list[float]) -> str:
    a = np.asarray(x, dtype=float)
    return "∞" if not np.isfinite(a).any() else f"{np.median(a[np.isfinite(a)]):g}"
