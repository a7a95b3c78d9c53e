"""``anchors-mlp``: seed 001 §4.2, Figs. 2B, 3 and 10 — the Emb-MLP (Def. 1) on the anchor task.

The Emb-MLP ``G(X) = σ(Σ_{s in X} w^{emb,s} W^(1)) W^(2)`` reads ``X = [z, a_1, a_2]`` (§4.2: ``p ≡ 1``,
``L = q + 1``) and is trained from γ ∈ {0.3, 0.5, 0.8} as one ensemble
(:mod:`~tdlab.experiments.paper001_reasoning_bias.common.training`; ``EmbMLP`` takes one γ per member). Measured:

* Fig. 2B — accuracy on D_mem, D_rsn,train, D_rsn,test per epoch, read as Fig. 2A's (T50, AUC).
  Sum-pooling is order-blind, so memory accuracy is capped by
  :func:`tdlab.theory.anchors.order_blind_memory_ceiling` (a sanity check).
* Fig. 3A — cosine matrices of the memory and reasoning anchors' embeddings at γ = 0.8, at the
  snapshot epochs (the seed: 50 and 900 of 1000; the trainer's ``snapshot_steps``, stored as
  ``gamma=<γ>@step<N>``).
* Fig. 3B–C — ``P^s − 1/d_vob`` of every reasoning anchor (Eq. 8/22 on the task's training
  population, :func:`tdlab.theory.anchors.token_label_law`) and their cosines; Eq. 7: every memory
  anchor has the same law. The measured reasoning cosines are compared with the ``P^s`` cosines by their
  *value* error.
* Fig. 10 — the cosine matrices at γ = 0.3 and 0.5 (end of training).

The learning-curve claims are the seed's comparison over the run's schedule.

Declared in the seed's ``experiments.yaml`` (``tdlab explain anchors-mlp``).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper001_reasoning_bias.common.cosines import anchor_cosine_rows
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    PAPER_LR_EMB_MLP,
    AnchorsHealth,
    ArmCurves,
    EpochsConfig,
    GammaArms,
    Gammas,
    Seed001TrainConfig,
    bias_gap,
    bias_gap_row,
    cosine_heatmap,
    fit_anchor_sweep,
    parameter_reading,
    reading_note,
    reasoning_first_rows,
    record_rsn_past_marginal,
    split_curves,
)
from tdlab.models.emb_mlp import EmbMLP, EmbMLPConfig
from tdlab.probes.embedding import (
    anchor_cosine_readings,
    cosine_matrix,
    pair_indices,
    spearman_rows,
)
from tdlab.report.standard_figures import Matrices, Matrix
from tdlab.run_context import RunContext, init_arm, snapshot_arm
from tdlab.run_view import RunView
from tdlab.seeding import generators
from tdlab.tasks.anchors import KIND_MEM, Anchors, AnchorsConfig, chance_accuracy, label_marginal_losses
from tdlab.theory.anchors import (
    memory_law_spread,
    order_blind_memory_ceiling,
    order_blind_sample_ceiling,
    reasoning_theory_cosines,
)
from tdlab.train.data import DATASET

FIG3A_EPOCHS = (50, 900)  # the seed's Fig. 3A snapshots (of 1000 epochs)


class EmbTaskConfig(AnchorsConfig):
    """The Emb-MLP task (§4.2: ``p ≡ 1``, ``L = q + 1``; A.3: 1,000,000 sequences, 5,000 per tuple)."""

    L: int = Field(3, ge=2, le=512)  # L = q + 1
    n_train: int = Field(990_000, ge=1, le=100_000_000)  # 5,000 per training tuple (A.3: 1,000,000 in all)
    n_test: int = Field(10_000, ge=1, le=100_000_000)  # 5,000 per tuple of M


class EmbTrainConfig(Seed001TrainConfig):
    lr: float = Field(5e-6, gt=0.0, le=100.0)  # A.3: Emb-MLP "initial" lr 5e-6


class MlpClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run."""

    t50_acc: float = Field(0.5, gt=0.0, lt=1.0)
    mem_cos_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 3A: memory anchors' mean off-diagonal cos >= 0.8
    rsn_rho_max: float = Field(-0.8, ge=-1.0, le=1.0)  # (t) 3A: reasoning ρ <= -0.8
    theory_cos_err_max: float = Field(0.1, ge=0.0, le=2.0)  # (t) 3A vs 3C: mean |cos − cos_P| <= 0.1
    large_abs_cos_max: float = Field(0.2, ge=0.0, le=1.0)  # (t) Fig. 10: γ = 0.3 mean |off-diag cos| <= 0.2
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)
    large_gamma: float = Field(0.3, ge=0.0, le=10.0)


class AnchorsMlpConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=1024)  # seeds per γ
    task: EmbTaskConfig = EmbTaskConfig()
    model: EmbMLPConfig = EmbMLPConfig()  # A.3: d_vob 200, d_m 200, d_f 512; σ = tanh (Assumption 1)
    gammas: Gammas = [0.3, 0.5, 0.8]  # A.3
    train: EmbTrainConfig = EmbTrainConfig()  # A.3: AdamW, batch 100, lr 5e-6, clip 1
    schedule: EpochsConfig = EpochsConfig()  # A.3: 1000 epochs
    # Fig. 3A's snapshots, epochs < schedule.epochs (the seed: 50 and 900); the end is always kept too.
    snapshot_epochs: list[int] = [50, 900]
    claims: MlpClaims = MlpClaims()
    cpu_threads: int | None = Field(1, ge=1, le=1024)  # small per-step work: one thread (tdlab.train.cpu)

    @model_validator(mode="after")
    def _check(self) -> AnchorsMlpConfig:
        if self.task.mix != "both":
            raise ValueError(f"task.mix must be 'both' (D_mem and D_rsn are both measured), got {self.task.mix!r}")
        bad = [e for e in self.snapshot_epochs if not 1 <= e < self.schedule.epochs]
        if bad:
            raise ValueError(f"snapshot_epochs {bad} must lie in 1..schedule.epochs-1={self.schedule.epochs - 1}")
        if self.task.n_train < self.train.batch:
            raise ValueError(
                f"task.n_train={self.task.n_train} must hold at least one batch of train.batch={self.train.batch}"
            )
        return self

    def model_for_task(self) -> EmbMLPConfig:
        return self.model.updated({"vocab": self.task.d_vob})

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.task.n_train // self.train.batch)


# ------------------------------------------------------------------------------------------------
# Measures


def anchor_embeddings(W_emb: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Rows ``lo..hi`` (token ids) of an embedding table ``(E, vocab, d)``: ``(E, hi - lo + 1, d)``."""
    return W_emb[:, lo : hi + 1]


def _ceiling_se(c: float, n: int) -> float:
    return math.sqrt(max(c * (1 - c), 1e-12) / n)


def _label_law_expected(cfg: AnchorsMlpConfig, row: Any) -> float:
    return 0.0 if row.context.get("check") == "memory-laws-equal" else cfg.claims.rsn_rho_max


def _label_law_tol(cfg: AnchorsMlpConfig, row: Any) -> float:
    return 1e-12 if row.context.get("check") == "memory-laws-equal" else 0.0


def _anchor_cosines(cfg: AnchorsMlpConfig, columns: list[tuple[str, torch.Tensor]]) -> list[Matrix]:
    """Figs. 3A and 10: the members' mean cosine matrix of the memory anchors' (top row) and the reasoning
    anchors' (bottom row) embeddings, a column per ``(label, embedding table (E, vocab, d))``, ticks the
    anchors' token ids."""
    t = cfg.task
    out = []
    for lo, hi, kind in ((t.mem_min, t.mem_max, "memory"), (t.rsn_min, t.rsn_max, "reasoning")):
        ids = [str(s) for s in range(lo, hi + 1)]
        for label, W in columns:
            cos = cosine_matrix(anchor_embeddings(W, lo, hi)).mean(0)  # (n, n), n = hi - lo + 1
            out.append(Matrix(cos, f"{kind}, {label}", rows=ids, cols=ids))
    return out


def _fig3a_panels(cfg: AnchorsMlpConfig, run: RunView, _: Any) -> list[Matrix]:
    """Fig. 3A: at γ = ``claims.small_gamma``, a column per snapshot epoch and the end (none without that γ)."""
    small = cfg.claims.small_gamma
    if small not in cfg.gammas:
        return []
    snaps = AnchorsMlp.snapshots(cfg, run, small)
    return _anchor_cosines(cfg, [(f"epoch {e}", W) for e, W in snaps.items() if e > 0])


def _fig10_panels(cfg: AnchorsMlpConfig, run: RunView, _: Any) -> list[Matrix]:
    """Fig. 10: a column per other γ, at the end of training."""
    others = [g for g in cfg.gammas if g != cfg.claims.small_gamma]
    return _anchor_cosines(cfg, [(f"γ = {g:g}", run.arrays(GammaArms.arm(g))["W_emb"]) for g in others])


@register
class AnchorsMlp(AnchorsHealth, Experiment[AnchorsMlpConfig]):
    Config = AnchorsMlpConfig

    def run(self, cfg: AnchorsMlpConfig, ctx: RunContext) -> None:
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        mcfg = cfg.model_for_task()
        gamma_of = arms.gamma_of

        def build(seeds: list[int]) -> EmbMLP:
            return EmbMLP(mcfg, seeds, [gamma_of[s] for s in seeds])

        fit_anchor_sweep(ctx, cfg, task, arms, build, cfg.task.q + 1, view=Anchors.emb_mlp_view)

    # ---- measurement ----------------------------------------------------------------------------
    @staticmethod
    def snapshots(cfg: AnchorsMlpConfig, run: RunView, gamma: float) -> dict[int, torch.Tensor]:
        """``{epoch: W_emb (E, vocab, d_m)}`` of one γ: ``0`` (init), each snapshot epoch and the last epoch."""
        arm = GammaArms.arm(gamma)
        out = {0: run.arrays(init_arm(arm))["W_emb"]}
        for e in cfg.snapshot_epochs:
            out[e] = run.arrays(snapshot_arm(arm, e * cfg.steps_per_epoch))["W_emb"]
        out[cfg.schedule.epochs] = run.arrays(arm)["W_emb"]
        return out

    def memory_ceilings(self, cfg: AnchorsMlpConfig) -> tuple[list[float], list[float]]:
        """Per seed index, the order-blind memory ceilings of that member's data: on the population
        (:func:`order_blind_memory_ceiling`, tuples and keys equally likely) and on its training set's memory
        sequences (:func:`order_blind_sample_ceiling`: D_mem is measured on training sequences, so this one bounds
        the expected D_mem accuracy of any order-blind model)."""
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        population, training = [], []
        for g in generators(arms.index_seeds, DATASET):  # data seeds = the first arm's seeds
            population.append(order_blind_memory_ceiling(task, task.memory_table(g)))
            d = task.dataset(g, cfg.task.n_train, "train")  # as anchor_splits draws it
            mem = d["kind"] == KIND_MEM
            training.append(order_blind_sample_ceiling(d["key"][mem], d["anchors"][mem], d["label"][mem]))
        return population, training

    def measure(self, cfg: AnchorsMlpConfig, run: RunView) -> Measurements:
        c = cfg.claims
        task = self.task(cfg)
        _laws, theory_cos = reasoning_theory_cosines(task)
        marginal = label_marginal_losses(task)
        population, ceilings = self.memory_ceilings(cfg)
        out = Measurements(
            {
                "label_marginal_loss": marginal,
                "order_blind_memory_ceiling": population,
                "order_blind_memory_ceiling_train_set": ceilings,
                "theory_rsn_cosines": theory_cos.tolist(),
            }
        )
        curves = {g: ArmCurves.read(run, GammaArms.arm(g), cfg.steps_per_epoch) for g in cfg.gammas}
        mem, rsn = (cfg.task.mem_min, cfg.task.mem_max), (cfg.task.rsn_min, cfg.task.rsn_max)
        emb = {  # per member: the anchors' cosines, ρ with distance, against the P^s cosines
            g: {e: anchor_cosine_readings(W, mem, rsn, theory_cos) for e, W in self.snapshots(cfg, run, g).items()}
            for g in cfg.gammas
        }
        for g in cfg.gammas:
            arm = GammaArms.arm(g)
            record_rsn_past_marginal(out, arm, curves[g], marginal)
            out.values[arm] = {
                "curves": {**curves[g].summary(c.t50_acc), "auc_gap": bias_gap(curves[g])},
                "embedding": {f"epoch {e}": v for e, v in emb[g].items()},
            }
        small, large = c.small_gamma, c.large_gamma
        end = cfg.schedule.epochs
        if small in curves:
            arm = GammaArms.arm(small)
            reasoning_first_rows(out, "emb-mlp-small-init-learns-reasoning-first", arm, curves[small], c.t50_acc, small)
            for e in cfg.snapshot_epochs:
                self._fig3a_rows(out, cfg, arm, e, emb[small][e])
        if small in curves and large in curves:
            bias_gap_row(out, "emb-mlp-bias-larger-at-small-init", small, large, curves)
        at_end = parameter_reading(end, end, cfg.train.lr, PAPER_LR_EMB_MLP)
        if large in emb:
            for kind, key in (("memory", "mem_abs_cos"), ("reasoning", "rsn_abs_cos")):
                out.row(
                    "fig10-large-init-orthogonal",
                    kind,
                    emb[large][end][key],
                    arms=[GammaArms.arm(large)],
                    provenance=at_end.provenance,
                    context={"gamma": large, "kind": kind, "epoch": end},
                    label=f"γ = {large:g}, end: mean |off-diagonal cos| of {kind} anchors ≤ {c.large_abs_cos_max:g} (t); "
                    f"{at_end.label}",
                )
        ordered = sorted(emb)
        for lo, hi in itertools.pairwise(ordered):
            out.row(
                "fig10-memory-alignment-grows-with-gamma",
                f"{hi:g}-above-{lo:g}",
                emb[hi][end]["mem_cos"],
                emb[lo][end]["mem_cos"],
                arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
                provenance=at_end.provenance,
                context={"gamma": hi, "reference_gamma": lo, "epoch": end},
                label=f"end: memory anchors' mean cos at γ = {hi:g} minus at γ = {lo:g} > 0; {at_end.label}",
            )
        self._sanity(cfg, out, task, theory_cos, curves, ceilings)
        return out

    @staticmethod
    def _fig3a_rows(out: Measurements, cfg: AnchorsMlpConfig, arm: str, epoch: int, m: dict[str, list[float]]) -> None:
        c = cfg.claims
        r = parameter_reading(epoch, cfg.schedule.epochs, cfg.train.lr, PAPER_LR_EMB_MLP, FIG3A_EPOCHS)
        anchor_cosine_rows(out, "fig3a", arm, epoch, m, r, c.small_gamma, c.mem_cos_min, c.rsn_rho_max)
        out.row(
            "fig3c-embedding-follows-label-law",
            f"epoch{epoch}",
            m["theory_abs_err"],
            arms=[arm],
            provenance=r.provenance,
            context={"gamma": c.small_gamma, "epoch": epoch},
            label=f"γ = {c.small_gamma:g}, epoch {epoch}: mean |cos − cos_P| over reasoning pairs ≤ "
            f"{c.theory_cos_err_max:g} (t); {r.label}",
        )

    def _sanity(
        self,
        cfg: AnchorsMlpConfig,
        out: Measurements,
        task: Anchors,
        theory_cos: torch.Tensor,
        curves: dict[float, ArmCurves],
        ceilings: list[float],
    ) -> None:
        spread = memory_law_spread(task)
        out.row(
            "fig3b-label-laws",
            "memory-laws-equal",
            Sample((spread,), deterministic=True),
            context={"check": "memory-laws-equal"},
            label="Eq. 7: max |P^s − P^s'| over memory anchors = 0",
        )
        i, j = pair_indices(theory_cos.shape[0])
        rho = float(spearman_rows(theory_cos[i, j], (i - j).abs().double()))
        out.row(
            "fig3b-label-laws",
            "theory-rsn-rho",
            Sample((rho,), deterministic=True),
            context={"check": "theory-rsn-rho"},
            label=f"Spearman ρ(cos(P^s_i − 1/d_vob, P^s_j − 1/d_vob), |s_i − s_j|) ≤ {cfg.claims.rsn_rho_max:g} "
            "(each row falls with distance; pairs of equal |Δ| differ by the edges and M)",
        )
        se = [_ceiling_se(cl, cfg.schedule.n_eval) for cl in ceilings]
        for g, cv in curves.items():
            gaps = [a - cl for a, cl in zip(cv.final_acc("mem"), ceilings, strict=True)]
            worst = int(np.argmax(gaps))
            # every member must respect its own ceiling: the largest gap decides, known to its evaluation error
            out.row(
                "emb-mlp-order-blind-ceiling",
                f"gamma={g:g}",
                Sample([gaps[worst]], deterministic=True, mc_se=se[worst]),
                arms=[GammaArms.arm(g)],
                context={"gamma": g, "member": worst},
                label=f"γ = {g:g}: max over members of final acc_mem − ceiling ≤ 0 (± the evaluation-set error)",
            )

    def notes(self, cfg: AnchorsMlpConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        m = measured.values
        ceilings, population = m["order_blind_memory_ceiling_train_set"], m["order_blind_memory_ceiling"]
        notes = []
        for g in cfg.gammas:
            s = m[GammaArms.arm(g)]["curves"]
            notes.append(
                f"γ = {g:g}: T50 mem/rsn-train/rsn-test = {s['T50_mem']} / {s['T50_rsn_train']} / {s['T50_test']} epochs "
                f"(None: never within the run); final acc mem {np.mean(s['final_acc_mem']):.3f} (order-blind ceiling "
                f"{np.mean(ceilings):.3f} on the training set, {np.mean(population):.3f} on the population), "
                f"rsn-train {np.mean(s['final_acc_rsn_train']):.3f}, rsn-test {np.mean(s['final_acc_test']):.3f} (seed means)."
            )
        small = m.get(GammaArms.arm(cfg.claims.small_gamma))
        if small is not None:
            for e in cfg.snapshot_epochs:
                v = small["embedding"][f"epoch {e}"]
                notes.append(
                    f"γ = {cfg.claims.small_gamma:g}, epoch {e}: reasoning cosines vs the P^s cosines — Spearman "
                    f"{np.mean(v['theory_spearman']):.3f}, mean |Δcos| {np.mean(v['theory_abs_err']):.3f} (an ordering "
                    "can agree while the values do not; the value error decides)."
                )
        line = reading_note(cfg.train.lr, cfg.schedule.epochs, PAPER_LR_EMB_MLP)
        if line:
            notes.append(line)
        return [*super().notes(cfg, measured, groups), *notes]

    # ---- figures --------------------------------------------------------------------------------
    figures = (
        split_curves(
            "fig2b_emb_mlp_accuracy.png",
            lambda cfg: f"Fig. 2B — Emb-MLP, {cfg.members} seeds per γ (mean, band min–max)",
            lambda cfg: chance_accuracy(cfg.task),
        ),
        Matrices(
            "fig3a_anchor_cosines.png",
            _fig3a_panels,
            title=lambda cfg: (
                f"Fig. 3A — cosine of anchor embeddings, γ = {cfg.claims.small_gamma:g} (mean over {cfg.members} seeds)"
            ),
            columns=lambda cfg: len({*cfg.snapshot_epochs, cfg.schedule.epochs}),  # the snapshots and the end
            # cos on [-1, 1] in every panel: a claim's "cos ≥ 0.8" (claims.mem_cos_min) is one colour throughout
            cmap="RdBu_r",
            vmin=-1.0,
            vmax=1.0,
            ticks=5,
        ),
        Matrices(
            "fig10_anchor_cosines.png",
            _fig10_panels,
            title=lambda cfg: f"Fig. 10 — cosine of anchor embeddings at the end (epoch {cfg.schedule.epochs})",
            columns=lambda cfg: sum(g != cfg.claims.small_gamma for g in cfg.gammas),
            cmap="RdBu_r",
            vmin=-1.0,
            vmax=1.0,
            ticks=5,
        ),
    )

    def plot(self, cfg: AnchorsMlpConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared Fig. 2B curves and Figs. 3A and 10's embedding cosines, then Fig. 3B–C's label laws (its
        own)."""
        from tdlab.report.figures import plt, save_figure

        paths = super().plot(cfg, run, analysis, figdir)
        laws, theory_cos = reasoning_theory_cosines(self.task(cfg))
        t = cfg.task
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for k, s in enumerate(range(t.rsn_min, t.rsn_max + 1)):
            axes[0].plot(np.arange(t.d_vob), (laws[k] - 1.0 / t.d_vob).numpy(), lw=1, label=f"s = {s}")
        axes[0].set_xlabel("label i")
        axes[0].set_ylabel("P^s(i) − 1/d_vob")
        axes[0].legend(fontsize=6, ncol=2)
        axes[0].set_title("Fig. 3B — label laws of reasoning anchors")
        cosine_heatmap(axes[1], theory_cos, t.rsn_min, "Fig. 3C — cos(P^si − 1/d_vob, P^sj − 1/d_vob)")
        paths.append(save_figure(fig, figdir / "fig3bc_label_laws.png"))
        return paths
