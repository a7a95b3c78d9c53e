"""``anchors-mlp``: seed 001 §4.2, Figs. 2B, 3 and 10 — the Emb-MLP (Def. 1) on the anchor task.

The Emb-MLP ``G(X) = σ(Σ_{s in X} w^{emb,s} W^(1)) W^(2)`` reads ``X = [z, a_1, a_2]`` (§4.2: ``p ≡ 1``,
``L = q + 1``) and is trained from γ ∈ {0.3, 0.5, 0.8} as one ensemble
(:mod:`tdlab.experiments.anchors_training`; ``EmbMLP`` takes one γ per member). Measured:

* Fig. 2B — accuracy on D_mem, D_rsn,train, D_rsn,test per epoch; the seed: the reasoning bias of
  Fig. 2A shows at γ = 0.8 against γ = 0.3. Sum-pooling is order-blind, so memory accuracy is capped by
  :func:`tdlab.theory.anchors.order_blind_memory_ceiling` (reported, and a sanity row).
* Fig. 3A — cosine matrices of the memory and reasoning anchors' embeddings at γ = 0.8, at the
  snapshot epochs (the seed: 50 and 900; the trainer's ``snapshot_steps``, stored as
  ``gamma=<γ>@step<N>``) and at the end.
* Fig. 3B–C — ``P^s − 1/d_vob`` of every reasoning anchor (Eq. 8/22 on the task's training
  population, :func:`tdlab.theory.anchors.token_label_law`) and their cosines; Eq. 7: every memory
  anchor has the same law.
* Fig. 10 — the cosine matrices at γ = 0.3 and 0.5 (end of training).

Claims (issue 15; (t) = ours, fixed before any run, in :class:`MlpClaims`):

* Fig. 2A's orderings at γ = 0.8: ``T50_rsn,train < T50_mem``, ``T50_rsn,test < T50_mem``,
  ``AUC_rsn,test > AUC_mem``; and ``AUC_rsn,test − AUC_mem`` larger at γ = 0.8 than at 0.3;
* 3A (γ = 0.8, each snapshot): mean off-diagonal cosine of the memory anchors ``>= 0.8`` (t) and above
  the reasoning anchors'; reasoning ``ρ <= −0.8`` (t) (ρ = Spearman of cos with ``|i − j|``);
* 3C: Spearman of the measured reasoning cosines with the ``P^s`` cosines ``>= 0.8`` (t);
* Fig. 10: at γ = 0.3, mean ``|off-diagonal cos|`` ``<= 0.2`` (t) for both anchor types; the memory
  anchors' mean cosine increases with γ.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy.stats import rankdata

from tdlab.claims import ClaimGroup
from tdlab.config import Config
from tdlab.experiments.anchors_training import (check_gammas,
    AnchorsHealth, EpochsConfig, GammaArms, Seed001TrainConfig, auc, epoch_curves, epoch_train_config, fit_gamma_arms,
    fixed_data, plot_split_curves, t50,
)
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, init_arm, register, snapshot_arm
from tdlab.models.emb_mlp import EmbMLP, EmbMLPConfig
from tdlab.probes.embedding import cosine_matrix, distance_spearman, offdiag_mean
from tdlab.report.figures import plt, save_figure
from tdlab.runs import Run
from tdlab.seeding import generators
from tdlab.tasks.anchors import KIND_MEM, Anchors, AnchorsConfig
from tdlab.theory.anchors import label_law_cosines, order_blind_memory_ceiling, token_label_law
from tdlab.train.cpu import cpu_threads
from tdlab.train.data import DATASET
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import Trainer

__all__ = ["EmbTaskConfig", "EmbTrainConfig", "MlpClaims", "AnchorsMlpConfig", "AnchorsMlp", "anchor_embeddings",
           "reasoning_theory_cosines", "pair_spearman"]


class EmbTaskConfig(AnchorsConfig):
    """The Emb-MLP task (§4.2: ``p ≡ 1``, ``L = q + 1``; A.3: 1,000,000 sequences, 5,000 per tuple)."""

    L: int = Field(3, ge=2, le=512)  # L = q + 1
    n_train: int = Field(990_000, ge=1, le=100_000_000)  # 5,000 per training tuple (A.3: 1,000,000 in all)
    n_test: int = Field(10_000, ge=1, le=100_000_000)  # 5,000 per tuple of M


class EmbTrainConfig(Seed001TrainConfig):
    lr: float = Field(5e-6, gt=0.0, le=100.0)  # A.3: Emb-MLP "initial" lr 5e-6


class MlpClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run (issue 15)."""

    t50_acc: float = Field(0.5, gt=0.0, lt=1.0)
    mem_cos_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 3A: memory anchors' mean off-diagonal cos >= 0.8
    rsn_rho_max: float = Field(-0.8, ge=-1.0, le=1.0)  # (t) 3A: reasoning ρ <= -0.8
    theory_spearman_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 3A vs 3C: Spearman >= 0.8
    large_abs_cos_max: float = Field(0.2, ge=0.0, le=1.0)  # (t) Fig. 10: γ = 0.3 mean |off-diag cos| <= 0.2
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)
    large_gamma: float = Field(0.3, ge=0.0, le=10.0)


class AnchorsMlpConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=1024)  # seeds per γ
    task: EmbTaskConfig = EmbTaskConfig()
    model: EmbMLPConfig = EmbMLPConfig()  # A.3: d_vob 200, d_m 200, d_f 512; σ = tanh (Assumption 1)
    gammas: list[float] = [0.3, 0.5, 0.8]  # A.3
    train: EmbTrainConfig = EmbTrainConfig()  # A.3: AdamW, batch 100, lr 5e-6, clip 1
    schedule: EpochsConfig = EpochsConfig()  # A.3: 1000 epochs
    # Fig. 3A's snapshots, epochs < schedule.epochs (the seed: 50 and 900); the end is always one too.
    snapshot_epochs: list[int] = [50, 900]
    claims: MlpClaims = MlpClaims()
    cpu_threads: int | None = Field(1, ge=1, le=1024)  # small per-step work: one thread (tdlab.train.cpu)

    @model_validator(mode="after")
    def _check(self) -> AnchorsMlpConfig:
        check_gammas(self.gammas)
        if self.task.mix != "both":
            raise ValueError(f"task.mix must be 'both' (D_mem and D_rsn are both measured), got {self.task.mix!r}")
        bad = [e for e in self.snapshot_epochs if not 1 <= e < self.schedule.epochs]
        if bad:
            raise ValueError(f"snapshot_epochs {bad} must lie in 1..schedule.epochs-1={self.schedule.epochs - 1}")
        if self.task.n_train < self.train.batch:
            raise ValueError(f"task.n_train={self.task.n_train} must hold at least one batch of train.batch={self.train.batch}")
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


def reasoning_theory_cosines(task: Anchors) -> tuple[torch.Tensor, torch.Tensor]:
    """Fig. 3B–C: the laws ``P^s`` of the reasoning anchors on the task's training population and the
    cosines of ``P^s − 1/d_vob``. Returns ``(laws (n, d_vob), cosines (n, n))`` float64."""
    c = task.cfg
    laws = torch.stack([token_label_law(task, s) for s in range(c.rsn_min, c.rsn_max + 1)])
    return laws, label_law_cosines(laws, c.d_vob)


def pair_spearman(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman correlation of the off-diagonal upper-triangle entries of ``a (..., n, n)`` with those of
    ``b (n, n)``: ``(...)`` float64."""
    n = b.shape[-1]
    i, j = torch.triu_indices(n, n, 1)
    x = torch.from_numpy(rankdata(a[..., i, j].double().numpy(), axis=-1))
    y = torch.from_numpy(rankdata(b[i, j].double().numpy())).expand_as(x)
    x, y = x - x.mean(-1, keepdim=True), y - y.mean(-1, keepdim=True)
    return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))


def _ceiling_se(c: float, n: int) -> float:
    return math.sqrt(max(c * (1 - c), 1e-12) / n)


@register
class AnchorsMlp(AnchorsHealth, Experiment):
    name = "anchors-mlp"
    paper = "001 Reasoning bias under small initialisation"
    figure = "Figs. 2B, 3, 10 (§4.2, B.2, A.3)"
    description = (
        "Emb-MLP (Def. 1) on [z, a1, a2] from γ-init 0.3, 0.5, 0.8 (one ensemble): accuracy on D_mem, D_rsn,train, "
        "D_rsn,test per epoch (Fig. 2B); anchor-embedding cosines at snapshots (Fig. 3A, 10) beside the label-law "
        "cosines of Eq. 8/22 (Fig. 3B-C). Claims: reasoning learnt first at γ=0.8; memory anchors aligned, reasoning "
        "anchors ordered like P^s at γ=0.8; near-orthogonal anchors at γ=0.3."
    )
    Config = AnchorsMlpConfig
    arm_fields = {"model.gamma": "gammas=[...]", "model.vocab": "task.d_vob", "train.steps": "schedule.epochs",
                  "train.eval_every": "schedule.eval_epochs", "train.log_every": "schedule.eval_epochs",
                  "train.seq_len": "task.L"}
    profiles = {
        # One scale-down for 2 CPU cores, set once before any run, the same as anchors-bias's where it applies.
        # Kept: q = 2, L = q + 1 = 3 (p = 1), anchors and M, d_vob = 200, γ values, tanh, AdamW, batch 100,
        # clip 1. Changed, and why:
        # * keys Z = 21..40 (N_Z = 20): 5× fewer (key, tuple) pairs for the memory map;
        # * n_train = 20,000 = 5 sequences per (key, tuple) pair (the seed: 1,000,000 / 20,000 = 50), 1,000 of M;
        # * widths d_m 64, d_f 128 (as anchors-bias's quick transformer): CPU time;
        # * lr 1e-3 (the seed: 5e-6 over 10,000,000 steps), 40 epochs = 8,000 steps; snapshots at epochs 2
        #   and 36 (the seed's 50 and 900 of 1000 epochs, scaled to 40).
        "quick": {
            "members": 3,
            "task": {"key_min": 21, "key_max": 40, "n_train": 20_000, "n_test": 1_000},
            "model": {"d_m": 64, "d_f": 128},
            "train": {"lr": 1e-3},
            "schedule": {"epochs": 40, "eval_epochs": 1, "n_eval": 1_000},
            "snapshot_epochs": [2, 36],
        },
        # A.3 exactly: 1,000,000 sequences, d_m 200, d_f 512, lr 5e-6, 1000 epochs; Fig. 3A at epochs 50 and 900.
        "paper": {"members": 3, "schedule": {"epochs": 1000, "eval_epochs": 1, "n_eval": 10_000},
                  "snapshot_epochs": [50, 900]},
    }

    def run(self, cfg: AnchorsMlpConfig, ctx: RunContext) -> None:
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        mcfg = cfg.model_for_task()
        gamma_of = arms.gamma_of

        def build(seeds: list[int]) -> EmbMLP:
            return EmbMLP(mcfg, seeds, [gamma_of[s] for s in seeds])

        tcfg = epoch_train_config(cfg.train, cfg.schedule, cfg.task.n_train, cfg.task.q + 1)
        data = fixed_data(task, arms, cfg.task.n_train, cfg.schedule, cfg.task.n_test, cfg.train.batch,
                          view=Anchors.emb_mlp_view)
        trainer = Trainer(tcfg, ctx.device, ctx.progress, label="γ-sweep", objective=LastPosition(),
                          snapshot_steps=[e * cfg.steps_per_epoch for e in cfg.snapshot_epochs])
        with cpu_threads(cfg.cpu_threads, ctx.device):
            fit_gamma_arms(ctx, trainer, build, arms, data)

    # ---- analysis -------------------------------------------------------------------------------
    def snapshots(self, cfg: AnchorsMlpConfig, run: Run, gamma: float) -> dict[str, torch.Tensor]:
        """``{label: W_emb (E, vocab, d_m)}`` of one γ: ``init``, ``epoch <e>`` for each early snapshot, ``end``."""
        arm = GammaArms.arm(gamma)
        out = {"init": run.arrays(init_arm(arm))["W_emb"]}
        for e in cfg.snapshot_epochs:
            out[f"epoch {e}"] = run.arrays(snapshot_arm(arm, e * cfg.steps_per_epoch))["W_emb"]
        out[f"end (epoch {cfg.schedule.epochs})"] = run.arrays(arm)["W_emb"]
        return out

    def curve_measures(self, cfg: AnchorsMlpConfig, run: Run) -> dict[float, dict[str, list[float]]]:
        df = run.metrics()
        spe = cfg.steps_per_epoch
        horizon = cfg.schedule.epochs + cfg.schedule.eval_epochs
        out = {}
        for g in cfg.gammas:
            arm = GammaArms.arm(g)
            m: dict[str, list[float]] = {}
            for split in ("mem", "rsn_train", "test"):
                epochs, acc = epoch_curves(df, arm, f"{split}_acc", spe)
                m[f"T50_{split}"] = t50(epochs, acc, horizon, cfg.claims.t50_acc)
                m[f"AUC_{split}"] = auc(epochs, acc)
                m[f"final_acc_{split}"] = acc[:, -1].tolist()
            m["auc_gap"] = [a - b for a, b in zip(m["AUC_test"], m["AUC_mem"])]
            out[g] = m
        return out

    def embedding_measures(self, cfg: AnchorsMlpConfig, run: Run, theory_cos: torch.Tensor) -> dict[float, dict[str, dict[str, list[float]]]]:
        """``{γ: {snapshot: {mem_cos, rsn_cos, mem_abs_cos, rsn_abs_cos, rsn_rho, theory_spearman}}}`` per member."""
        t = cfg.task
        out = {}
        for g in cfg.gammas:
            per = {}
            for label, W in self.snapshots(cfg, run, g).items():
                mem = cosine_matrix(anchor_embeddings(W, t.mem_min, t.mem_max))
                rsn_w = anchor_embeddings(W, t.rsn_min, t.rsn_max)
                rsn = cosine_matrix(rsn_w)
                per[label] = {
                    "mem_cos": offdiag_mean(mem).tolist(), "rsn_cos": offdiag_mean(rsn).tolist(),
                    "mem_abs_cos": offdiag_mean(mem, absolute=True).tolist(),
                    "rsn_abs_cos": offdiag_mean(rsn, absolute=True).tolist(),
                    "rsn_rho": distance_spearman(rsn_w, torch.arange(t.rsn_min, t.rsn_max + 1)).tolist(),
                    "theory_spearman": pair_spearman(rsn, theory_cos).tolist(),
                }
            out[g] = per
        return out

    def memory_ceilings(self, cfg: AnchorsMlpConfig) -> tuple[list[float], list[float]]:
        """Per seed index, the order-blind memory ceilings of that member's data: on the population
        (:func:`order_blind_memory_ceiling`, tuples and keys equally likely) and on its training set.

        D_mem is measured on training sequences, where the two orderings of an anchor pair occur a
        random number of times each (keys are drawn per sequence): predicting a class's most frequent
        training label beats the population ceiling there. Any one predictor's expected accuracy on a
        random subset of the training set is its training-set accuracy, so the training-set ceiling
        bounds the expected D_mem accuracy of any order-blind model.
        """
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        population, training = [], []
        for g in generators(list(arms.seeds[: arms.n]), DATASET):  # data seeds = the first arm's seeds
            population.append(order_blind_memory_ceiling(task, task.memory_table(g)))
            d = task.dataset(g, cfg.task.n_train, "train")  # as anchor_splits draws it
            mem = d["kind"] == KIND_MEM
            key = torch.cat([d["key"][mem][:, None], torch.sort(d["anchors"][mem], dim=1).values,
                             d["label"][mem][:, None]], 1)  # (order-blind class, label) of every memory sequence
            groups, counts = torch.unique(key, dim=0, return_counts=True)  # (class, label) -> count
            _, cls = torch.unique(groups[:, :-1], dim=0, return_inverse=True)
            best = torch.zeros(int(cls.max()) + 1, dtype=torch.long).scatter_reduce(0, cls, counts, "amax")
            training.append(float(best.sum()) / int(mem.sum()))
        return population, training

    def analyse(self, cfg: AnchorsMlpConfig, run: Run) -> Analysis:
        c = cfg.claims
        task = self.task(cfg)
        laws, theory_cos = reasoning_theory_cosines(task)
        curves = self.curve_measures(cfg, run)
        emb = self.embedding_measures(cfg, run, theory_cos)
        population_ceilings, ceilings = self.memory_ceilings(cfg)
        out = Analysis(measurements={f"gamma={g:g}": {"curves": curves[g], "embedding": emb[g]} for g in cfg.gammas})
        out.measurements["order_blind_memory_ceiling"] = population_ceilings
        out.measurements["order_blind_memory_ceiling_train_set"] = ceilings
        out.measurements["theory_rsn_cosines"] = theory_cos.tolist()
        small, large = c.small_gamma, c.large_gamma
        s_arm, l_arm = GammaArms.arm(small), GammaArms.arm(large)
        snaps = [k for k in emb.get(small, {}) if k != "init"]

        if small in curves:
            s = curves[small]
            grp = out.group("emb-mlp-small-init-learns-reasoning-first",
                            f"Emb-MLP, γ = {small:g}: both reasoning sets are learnt before the memory set (Fig. 2B, "
                            "Fig. 2A's orderings)")
            grp.compare("t50-rsn-train-before-mem", s["T50_rsn_train"], s["T50_mem"], "lt", paired=True, arms=[s_arm],
                        unit=" epochs", statement=f"γ = {small:g}: T50_rsn,train − T50_mem < 0")
            grp.compare("t50-rsn-test-before-mem", s["T50_test"], s["T50_mem"], "lt", paired=True, arms=[s_arm],
                        unit=" epochs", statement=f"γ = {small:g}: T50_rsn,test − T50_mem < 0")
            grp.compare("auc-rsn-test-above-mem", s["AUC_test"], s["AUC_mem"], "gt", paired=True, arms=[s_arm],
                        statement=f"γ = {small:g}: AUC_rsn,test − AUC_mem > 0")
        if small in curves and large in curves:
            grp = out.group("emb-mlp-bias-larger-at-small-init",
                            f"Emb-MLP: the reasoning bias is stronger at γ = {small:g} than at γ = {large:g} (Fig. 2B)")
            grp.compare(f"{small:g}-above-{large:g}", curves[small]["auc_gap"], curves[large]["auc_gap"], "gt",
                        paired=True, arms=[s_arm, l_arm],
                        statement=f"(AUC_rsn,test − AUC_mem) at γ = {small:g} minus at γ = {large:g} > 0")
        if small in emb:
            aligned = out.group("fig3a-memory-anchors-aligned",
                                f"γ = {small:g}: memory anchors' embeddings are highly similar, more than the reasoning "
                                "anchors' (Fig. 3A)")
            ordered = out.group("fig3a-reasoning-anchors-ordered",
                                f"γ = {small:g}: the reasoning anchors' cosine falls with |s_i − s_j| (Fig. 3A)")
            follows = out.group("fig3c-embedding-follows-label-law",
                                f"γ = {small:g}: the reasoning anchors' cosines follow those of P^s − 1/d_vob (Fig. 3A vs 3C)")
            for k in snaps:
                e = emb[small][k]
                row = k.replace(" ", "").replace("(", "-").replace(")", "")
                aligned.value(f"mem-cos/{row}", e["mem_cos"], c.mem_cos_min, 0.0, "ge", arms=[s_arm],
                              statement=f"{k}: mean off-diagonal cos of memory anchors ≥ {c.mem_cos_min:g} (t)")
                aligned.compare(f"mem-above-rsn/{row}", e["mem_cos"], e["rsn_cos"], "gt", paired=True, arms=[s_arm],
                                statement=f"{k}: mean off-diagonal cos, memory − reasoning anchors > 0")
                ordered.value(f"rho/{row}", e["rsn_rho"], c.rsn_rho_max, 0.0, "le", arms=[s_arm],
                              statement=f"{k}: Spearman ρ(cos, |s_i − s_j|) of reasoning anchors ≤ {c.rsn_rho_max:g} (t)")
                follows.value(f"spearman/{row}", e["theory_spearman"], c.theory_spearman_min, 0.0, "ge", arms=[s_arm],
                              statement=f"{k}: Spearman(measured cos, P^s cos) over reasoning pairs ≥ {c.theory_spearman_min:g} (t)")
        if large in emb:
            end = [k for k in emb[large] if k.startswith("end")][0]
            e = emb[large][end]
            grp = out.group("fig10-large-init-orthogonal",
                            f"γ = {large:g}: anchors' embeddings stay near-orthogonal, not shaped by the label laws (Fig. 10)")
            grp.value("memory", e["mem_abs_cos"], c.large_abs_cos_max, 0.0, "le", arms=[l_arm], learning_required=False,
                      statement=f"{end}: mean |off-diagonal cos| of memory anchors ≤ {c.large_abs_cos_max:g} (t)")
            grp.value("reasoning", e["rsn_abs_cos"], c.large_abs_cos_max, 0.0, "le", arms=[l_arm], learning_required=False,
                      statement=f"{end}: mean |off-diagonal cos| of reasoning anchors ≤ {c.large_abs_cos_max:g} (t)")
        ordered_g = sorted(emb)
        if len(ordered_g) >= 2:
            grp = out.group("fig10-memory-alignment-grows-with-gamma",
                            "The memory anchors' mean cosine increases with γ (Figs. 3A, 10)")
            for lo, hi in zip(ordered_g, ordered_g[1:]):
                end_lo = [k for k in emb[lo] if k.startswith("end")][0]
                end_hi = [k for k in emb[hi] if k.startswith("end")][0]
                grp.compare(f"{hi:g}-above-{lo:g}", emb[hi][end_hi]["mem_cos"], emb[lo][end_lo]["mem_cos"], "gt",
                            paired=True, arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
                            statement=f"end of training: memory anchors' mean cos at γ = {hi:g} minus at γ = {lo:g} > 0")
        self._sanity(cfg, out, task, laws, theory_cos, curves, ceilings)
        for g in cfg.gammas:
            s = curves[g]
            out.notes.append(
                f"γ = {g:g}: T50 mem/rsn-train/rsn-test = {s['T50_mem']} / {s['T50_rsn_train']} / {s['T50_test']} epochs; "
                f"final acc mem {np.mean(s['final_acc_mem']):.3f} (order-blind ceiling {np.mean(ceilings):.3f} on the "
                f"training set, {np.mean(population_ceilings):.3f} on the population), "
                f"rsn-train {np.mean(s['final_acc_rsn_train']):.3f}, rsn-test {np.mean(s['final_acc_test']):.3f} (seed means).")
        return out

    def _sanity(self, cfg: AnchorsMlpConfig, out: Analysis, task: Anchors, laws: torch.Tensor, theory_cos: torch.Tensor,
                curves: dict[float, dict[str, list[float]]], ceilings: list[float]) -> None:
        t = cfg.task
        mem_laws = torch.stack([token_label_law(task, s) for s in range(t.mem_min, t.mem_max + 1)])
        grp: ClaimGroup = out.sanity("fig3b-label-laws", "Eq. 7: every memory anchor has the same label law; Eq. 8: the "
                                     "reasoning anchors' laws shift with s, so their cosines fall with |s_i − s_j| (Fig. 3B–C)")
        spread = float((mem_laws - mem_laws[0]).abs().max())
        grp.value("memory-laws-equal", [spread], 0.0, 1e-12, "close", deterministic=True,
                  statement="max |P^s − P^s'| over memory anchors = 0")
        n = theory_cos.shape[0]
        i, j = torch.triu_indices(n, n, 1)
        dist = (i - j).abs().double()
        rho = _spearman(theory_cos[i, j], dist)
        grp.value("theory-rsn-rho", [rho], cfg.claims.rsn_rho_max, 0.0, "le", deterministic=True,
                  statement=f"Spearman ρ(cos(P^s_i − 1/d_vob, P^s_j − 1/d_vob), |s_i − s_j|) ≤ {cfg.claims.rsn_rho_max:g} "
                            "(each row falls with distance; pairs of equal |Δ| differ by the edges and M)")
        ceil = out.sanity("emb-mlp-order-blind-ceiling",
                          "Sum-pooling is order-blind: final D_mem accuracy ≤ the order-blind ceiling of the training "
                          "set (Def. 1; D_mem is a subset of the training set)")
        for g in cfg.gammas:
            acc = curves[g]["final_acc_mem"]
            gaps = [a - cl for a, cl in zip(acc, ceilings)]
            ceil.every(f"gamma={g:g}", gaps, 0.0, 0.0, "le", member_se=[_ceiling_se(cl, cfg.schedule.n_eval) for cl in ceilings],
                       arms=[GammaArms.arm(g)], learning_required=False,
                       statement=f"γ = {g:g}: final acc_mem − ceiling ≤ 0 (each member, ± its evaluation-set error)")

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsMlpConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        df = run.metrics()
        chance = 1.0 / (cfg.task.key_max - cfg.task.key_min + 1)
        arms = [(GammaArms.arm(g), f"γ = {g:g}") for g in cfg.gammas]
        paths = [save_figure(plot_split_curves(df, arms, cfg.steps_per_epoch, chance,
                                               f"Fig. 2B — Emb-MLP, {cfg.members} seeds per γ (mean, band min–max)"),
                             figdir / "fig2b_emb_mlp_accuracy.png")]
        task = self.task(cfg)
        laws, theory_cos = reasoning_theory_cosines(task)
        t = cfg.task
        small = cfg.claims.small_gamma
        if small in cfg.gammas:
            snaps = {k: v for k, v in self.snapshots(cfg, run, small).items() if k != "init"}
            fig, axes = plt.subplots(2, len(snaps), figsize=(3.6 * len(snaps), 6.6), squeeze=False)
            for col, (label, W) in enumerate(snaps.items()):
                for row, (lo, hi, kind) in enumerate(((t.mem_min, t.mem_max, "memory"), (t.rsn_min, t.rsn_max, "reasoning"))):
                    _heat(axes[row][col], cosine_matrix(anchor_embeddings(W, lo, hi)).mean(0), lo, f"{kind}, {label}")
            fig.suptitle(f"Fig. 3A — cosine of anchor embeddings, γ = {small:g} (mean over {cfg.members} seeds)")
            paths.append(save_figure(fig, figdir / "fig3a_anchor_cosines.png"))
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for k, s in enumerate(range(t.rsn_min, t.rsn_max + 1)):
            axes[0].plot(np.arange(t.d_vob), (laws[k] - 1.0 / t.d_vob).numpy(), lw=1, label=f"s = {s}")
        axes[0].set_xlabel("label i")
        axes[0].set_ylabel("P^s(i) − 1/d_vob")
        axes[0].legend(fontsize=6, ncol=2)
        axes[0].set_title("Fig. 3B — label laws of reasoning anchors")
        _heat(axes[1], theory_cos, t.rsn_min, "Fig. 3C — cos(P^si − 1/d_vob, P^sj − 1/d_vob)")
        paths.append(save_figure(fig, figdir / "fig3bc_label_laws.png"))
        others = [g for g in cfg.gammas if g != small]
        if others:
            fig, axes = plt.subplots(2, len(others), figsize=(3.6 * len(others), 6.6), squeeze=False)
            for col, g in enumerate(others):
                W = run.arrays(GammaArms.arm(g))["W_emb"]
                for row, (lo, hi, kind) in enumerate(((t.mem_min, t.mem_max, "memory"), (t.rsn_min, t.rsn_max, "reasoning"))):
                    _heat(axes[row][col], cosine_matrix(anchor_embeddings(W, lo, hi)).mean(0), lo, f"{kind}, γ = {g:g}")
            fig.suptitle(f"Fig. 10 — cosine of anchor embeddings at the end (epoch {cfg.schedule.epochs})")
            paths.append(save_figure(fig, figdir / "fig10_anchor_cosines.png"))
        return paths


def _spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    rx = torch.from_numpy(rankdata(x.numpy())) - (len(x) + 1) / 2
    ry = torch.from_numpy(rankdata(y.numpy())) - (len(y) + 1) / 2
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))


def _heat(ax: plt.Axes, c: torch.Tensor, first: int, title: str) -> None:
    n = c.shape[0]
    im = ax.imshow(c.numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
    ticks = list(range(0, n, max(1, n // 5)))
    ax.set_xticks(ticks, [str(first + k) for k in ticks])
    ax.set_yticks(ticks, [str(first + k) for k in ticks])
    ax.set_title(title, fontsize=9)
    plt.colorbar(im, ax=ax, fraction=0.046)
