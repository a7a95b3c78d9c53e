"""``anchors-labels``: seed 001 §4.5, Fig. 7 — the label distribution steers what a memory task learns.

(a) The ``groups`` arm (four groups of memory mappings, ``groups_task``) is trained for ``groups_epochs``
epochs; on ``schedule.n_eval`` training sequences per member its predictions are compared with the targets,
per group: the share of each group's predictions inside its label range, and the rise of the mean
prediction from group ``i`` to ``i + 1`` against the targets' rise.

(b) ``F_mem,1`` (``y ~ U(Z)``, arm ``mem1``) vs ``F_mem,2`` (``y ~ U{z_p − Σa .. z_p + Σa}``, arm ``mem2``),
otherwise identical: memory sequences only (anchors 1..10), the same member seeds (so the same
initialisations and token sequences; only the label draws differ); their learning speeds are compared by
``T50`` and ``AUC`` of the memory accuracy.

Every arm's accuracy and loss are on the first ``n_eval`` training sequences (``mem_acc``, ``mem_loss``), as
the seed measures memorisation.

Declared in the seed's ``experiments.yaml`` (``tdlab explain anchors-labels``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ArmHealth, GroupResult, Measurements, Stage
from tdlab.claims.declare import Hypothesis, Provenance
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    EpochsConfig,
    Seed001GPTConfig,
    Seed001TrainConfig,
    epoch_train_config,
    loss_health,
    t50_sample,
)
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.curves import auc, t50
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.anchors import Anchors, AnchorsConfig, label_marginal_losses, memory_splits, training_sets
from tdlab.train.cpu import cpu_threads
from tdlab.train.data import DATASET, FixedDataset
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import Trainer

ARMS = {"groups": "Fig. 7 left: 4 memory groups", "mem1": "F_mem,1: y ~ U(Z)", "mem2": "F_mem,2: y ~ U{z − Σa..z + Σa}"}


class GroupsTaskConfig(AnchorsConfig):
    """Fig. 7 left (``tasks.anchors``' documented make-up): memory only, anchors 1..20 in 4 groups of 5."""

    mix: Literal["both", "memory", "reasoning"] = "memory"
    mem_max: int = Field(20, ge=0, le=65535)
    memory_groups: int = Field(4, ge=1, le=64)


class CompareTaskConfig(AnchorsConfig):
    """Fig. 7 right: memory only, anchors 1..10; ``memory_labels`` is set per arm (uniform / window)."""

    mix: Literal["both", "memory", "reasoning"] = "memory"


class LabelsClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run."""

    early_acc_max: float = Field(0.3, ge=0.0, le=1.0)  # (t) the snapshot is "early": accuracy <= 0.3
    in_range_min: float = Field(0.95, ge=0.0, le=1.0)  # (t) >= 95% of each group's predictions in its range
    rise_min: float = Field(0.5, ge=0.0, le=10.0)  # (t) mean prediction rises by >= half the targets' rise
    t50_acc: float = Field(0.5, gt=0.0, lt=1.0)


class AnchorsLabelsConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=1024)
    gamma: float = Field(0.8, ge=0.0, le=10.0)  # §4.5: small init
    model: Seed001GPTConfig = Seed001GPTConfig()
    groups_task: GroupsTaskConfig = GroupsTaskConfig()
    compare_task: CompareTaskConfig = CompareTaskConfig()
    train: Seed001TrainConfig = Seed001TrainConfig()
    schedule: EpochsConfig = EpochsConfig()  # (b)'s schedule; (a) stops at groups_epochs
    groups_epochs: int = Field(
        50, ge=1, le=100_000
    )  # (a)'s early snapshot (the seed: "early stages"; ours: 50 of 1000)
    claims: LabelsClaims = LabelsClaims()
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> AnchorsLabelsConfig:
        if self.groups_task.mix != "memory" or self.compare_task.mix != "memory":
            raise ValueError("groups_task.mix and compare_task.mix must be 'memory' (Fig. 7 trains memory tasks only)")
        if self.groups_task.memory_groups < 1:
            raise ValueError("groups_task.memory_groups must be >= 1 (Fig. 7 left: the groups)")
        if self.model.init != "gamma":
            raise ValueError(f"model.init must be 'gamma' (seed 001 §3.4), got {self.model.init!r}")
        for name in ("groups_task", "compare_task"):
            if getattr(self, name).n_train < self.train.batch:
                raise ValueError(
                    f"{name}.n_train={getattr(self, name).n_train} must hold one batch of train.batch={self.train.batch}"
                )
        for lab in ("uniform", "window"):  # both arms of (b) must be valid tasks
            AnchorsConfig(**{**self.compare_task.model_dump(), "memory_labels": lab})
        return self

    def model_for(self, task: AnchorsConfig) -> GPTConfig:
        return self.model.updated({"vocab": task.d_vob, "max_len": task.L, "init_gamma": self.gamma})

    def task_of(self, arm: str) -> Anchors:
        if arm == "groups":
            return Anchors(self.groups_task)
        lab = {"mem1": "uniform", "mem2": "window"}[arm]
        return Anchors(AnchorsConfig(**{**self.compare_task.model_dump(), "memory_labels": lab}))

    def steps_per_epoch(self, arm: str) -> int:
        t = self.groups_task if arm == "groups" else self.compare_task
        return max(1, t.n_train // self.train.batch)

    def epochs_of(self, arm: str) -> int:
        """How many epochs ``arm`` trains: (a) stops at ``groups_epochs``, (b)'s arms run the schedule's."""
        return self.groups_epochs if arm == "groups" else self.schedule.epochs


def group_in_range(pred: torch.Tensor, group: torch.Tensor, ranges: list[tuple[int, int]]) -> torch.Tensor:
    """Share of each group's predictions inside its label range.

    Args:
        pred: ``(E, n)`` predicted labels of each sequence.
        group: ``(E, n)`` group index of each sequence.
        ranges: inclusive ``(lo, hi)`` per group.
    Returns:
        ``(E, G)`` float64 (NaN for a group with no sequence).
    """
    out = torch.full((pred.shape[0], len(ranges)), float("nan"), dtype=torch.float64)
    for k, (lo, hi) in enumerate(ranges):
        sel = group == k
        inside = ((pred >= lo) & (pred <= hi) & sel).sum(-1).double()
        n = sel.sum(-1).double()
        out[:, k] = torch.where(n > 0, inside / n.clamp(min=1), torch.full_like(n, float("nan")))
    return out


def group_mean(values: torch.Tensor, group: torch.Tensor, groups: int) -> torch.Tensor:
    """Mean of ``values (E, n)`` over each group's sequences (``group (E, n)``): ``(E, groups)`` float64 (NaN
    for an empty group)."""
    out = torch.full((values.shape[0], groups), float("nan"), dtype=torch.float64)
    for k in range(groups):
        sel = (group == k).double()
        n = sel.sum(-1)
        out[:, k] = torch.where(n > 0, (values.double() * sel).sum(-1) / n.clamp(min=1), out[:, k])
    return out


GROUPS_PAST_MARGINAL = Stage(
    "groups-past-label-marginal",
    "at the snapshot the groups arm's loss on its training sequences is below that of "
    "the group-blind label marginal (the pooled law of the four groups' labels): it has learnt something of the "
    "groups' label laws",
)
PAST_MARGINAL = Stage(
    "mem-past-label-marginal",
    "the arm's final loss on its training sequences is below that of its label marginal "
    "(the best input-blind predictor): it has learnt something of its map",
)

_AT_LEAST = {"share": "in_range_min", "rise": "rise_min"}

# §4.5 reads the label laws' effect "under small initialization" (its first sentence); it states no γ of its own.
SMALL_INIT_RUN = Hypothesis(
    "a small init, γ > 0.5 (§4.5: 'under small initialization, the distribution of labels plays a pivotal role'; "
    "§3.4: γ > 0.5 is small)",
    lambda cfg: cfg.gamma > 0.5,
)


def _at_least(cfg: AnchorsLabelsConfig, row: Any) -> float:
    return float(getattr(cfg.claims, _AT_LEAST[row.context["quantity"]]))


@register
class AnchorsLabels(Experiment[AnchorsLabelsConfig]):
    Config = AnchorsLabelsConfig

    def run(self, cfg: AnchorsLabelsConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)  # the same seeds in every arm: paired by seed index
        with cpu_threads(cfg.cpu_threads, ctx.device):
            fits = []
            for arm in ARMS:
                task = cfg.task_of(arm)
                epochs = cfg.epochs_of(arm)
                tcfg = epoch_train_config(cfg.train, cfg.schedule, task.cfg.n_train, task.cfg.L, epochs)
                data = FixedDataset(
                    memory_splits(task, task.cfg.n_train, cfg.schedule.n_eval),
                    cfg.train.batch,
                    eval_splits=("mem",),
                    eval_batch=cfg.schedule.eval_batch,
                )
                trainer = Trainer(tcfg, ctx.device, ctx.progress, label=arm, objective=LastPosition())
                fits.append(Fit(arm, trainer, partial(GPT, cfg.model_for(task.cfg)), seeds, data))
            ctx.fit_all(fits)  # the arms train at once on one-thread lanes

    # ---- health: the loss on the training sequences (memory tasks have no held-out set) ---------
    def health(self, cfg: AnchorsLabelsConfig, run: Run | RunView) -> dict[str, ArmHealth]:
        run = run if isinstance(run, RunView) else RunView(run)
        out = {}
        for arm in ARMS:
            if not run.has(arm, "mem_loss"):
                continue
            steps, loss = run.curves(arm, "mem_loss")
            d_vob = (cfg.groups_task if arm == "groups" else cfg.compare_task).d_vob
            out[arm] = loss_health(run, arm, steps, loss, math.log(d_vob))
        return out

    # ---- measurement ----------------------------------------------------------------------------
    def snapshot_predictions(self, cfg: AnchorsLabelsConfig, run: RunView) -> dict[str, torch.Tensor]:
        """(a) at its snapshot: ``pred``, ``label``, ``group`` ``(E, n_eval)`` on each member's first
        ``n_eval`` training sequences (rebuilt from the member seeds, as the fit drew them)."""
        task = cfg.task_of("groups")
        seeds = member_seeds(cfg.seed, cfg.members)
        n = min(cfg.schedule.n_eval, cfg.groups_task.n_train)
        d = training_sets(task, generators(seeds, DATASET), cfg.groups_task.n_train, ("tokens", "label", "anchors"), n)
        model = GPT(cfg.model_for(cfg.groups_task), list(range(cfg.members)))
        model.load_state_dict(run.arrays("groups"))
        with torch.no_grad():
            pred = model.eval()(d["tokens"])[:, :, -1].argmax(-1)
        return {"pred": pred, "label": d["label"], "group": task.memory_group(d["anchors"][..., 0])}

    def measure(self, cfg: AnchorsLabelsConfig, run: RunView) -> Measurements:
        c = cfg.claims
        out = Measurements()
        self._groups(cfg, run, out)
        curves = {}
        for arm in ("mem1", "mem2"):
            steps, acc = run.curves(arm, "mem_acc")
            _, loss = run.curves(arm, "mem_loss")
            epochs = steps / cfg.steps_per_epoch(arm)
            curves[arm] = (t50(epochs, acc, c.t50_acc), auc(epochs, acc))
            marginal = label_marginal_losses(cfg.task_of(arm))["mem"]
            out.stage(
                arm,
                PAST_MARGINAL,
                loss[:, -1],
                marginal,
                "lt",
                evidence="final loss on the training sequences vs the label marginal's, nats",
            )
            out.values[arm] = {
                "T50": curves[arm][0].as_optional(),
                "AUC": curves[arm][1],
                "final_acc": acc[:, -1].tolist(),
                "final_loss": loss[:, -1].tolist(),
                "label_marginal_loss": marginal,
                "AUC_mean": float(np.mean(curves[arm][1])),
                "final_acc_mean": float(np.mean(acc[:, -1])),
                "final_loss_mean": float(np.mean(loss[:, -1])),
            }
        (t1, a1), (t2, a2) = curves["mem1"], curves["mem2"]
        claim, arms = "fig7-right-window-labels-learnt-faster", ["mem1", "mem2"]
        out.row(
            claim,
            "t50",
            t50_sample(t2),
            t50_sample(t1),
            arms=arms,
            label="T50_mem of F_mem,2 minus that of F_mem,1 < 0",
        )
        out.row(claim, "auc", a1, a2, arms=arms, label="AUC_mem of F_mem,1 minus that of F_mem,2 < 0")
        return out

    def _groups(self, cfg: AnchorsLabelsConfig, run: RunView, out: Measurements) -> None:
        """(a)'s rows: per group the share of predictions in range, per pair of neighbouring groups the rise of
        the mean prediction as a fraction of the targets' rise; the stage and whether the snapshot is early."""
        c = cfg.claims
        task = cfg.task_of("groups")
        G = cfg.groups_task.memory_groups
        ranges = [task.group_range(k) for k in range(G)]
        snap = self.snapshot_predictions(cfg, run)
        share = group_in_range(snap["pred"], snap["group"], ranges)
        pred_mean = group_mean(snap["pred"], snap["group"], G)
        target_mean = group_mean(snap["label"], snap["group"], G)
        _, acc = run.curves("groups", "mem_acc")
        _, loss = run.curves("groups", "mem_loss")
        acc_snap = acc[:, -1]
        marginal = label_marginal_losses(task)["mem"]
        out.stage(
            "groups",
            GROUPS_PAST_MARGINAL,
            loss[:, -1],
            marginal,
            "lt",
            evidence="snapshot loss on the training sequences vs the group-blind label marginal's, nats",
        )
        early = float(np.mean(acc_snap)) <= c.early_acc_max
        provenance: Provenance = "paper" if early else "ours"
        when = f"epoch {cfg.groups_epochs}, accuracy {np.mean(acc_snap):.3f}" + (
            "" if early else f" > {c.early_acc_max:g} (t): not the seed's early stage"
        )
        claim = "fig7-left-predictions-follow-label-ranges"
        for k, (lo, hi) in enumerate(ranges):
            out.row(
                claim,
                f"share/group{k + 1}",
                share[:, k].tolist(),
                arms=["groups"],
                provenance=provenance,
                context={"quantity": "share", "group": k + 1},
                label=f"{when}: share of group {k + 1}'s predictions in {lo}..{hi} ≥ {c.in_range_min:g} (t)",
            )
        rise = []
        for k in range(G - 1):
            r = ((pred_mean[:, k + 1] - pred_mean[:, k]) / (target_mean[:, k + 1] - target_mean[:, k])).tolist()
            rise.append(r)
            out.row(
                claim,
                f"rise/group{k + 1}-{k + 2}",
                r,
                arms=["groups"],
                provenance=provenance,
                context={"quantity": "rise", "group": k + 1},
                label=f"{when}: mean prediction of group {k + 2} minus group {k + 1}, over the targets' difference, "
                f"≥ {c.rise_min:g} (t)",
            )
        out.values["groups"] = {
            "epoch": cfg.groups_epochs,
            "acc": acc_snap.tolist(),
            "in_range": share.tolist(),
            "mean_prediction": pred_mean.tolist(),
            "mean_target": target_mean.tolist(),
            "rise": rise,
            "ranges": ranges,
            "label_marginal_loss": marginal,
            "final_loss": loss[:, -1].tolist(),
            "early": early,
        }

    def notes(self, cfg: AnchorsLabelsConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        a = measured.values["groups"]
        share = np.asarray(a["in_range"])
        notes = [
            f"(a) epoch {cfg.groups_epochs}: accuracy {np.mean(a['acc']):.3f}; share in range per group "
            + ", ".join(f"{lo}..{hi}: {float(share[:, k].mean()):.3f}" for k, (lo, hi) in enumerate(a["ranges"]))
            + "; mean prediction per group "
            + ", ".join(f"{v:.1f}" for v in np.nanmean(a["mean_prediction"], 0))
            + " vs targets "
            + ", ".join(f"{v:.1f}" for v in np.nanmean(a["mean_target"], 0))
            + f" (seed means); snapshot loss {np.mean(a['final_loss']):.3f} vs the group-blind marginal's "
            f"{a['label_marginal_loss']:.3f} nats. A constant prediction in 30..49 would be in every nested range: "
            "the rise rows are what it cannot pass.",
        ]
        return [*super().notes(cfg, measured, groups), *notes]

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsLabelsConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import curve_with_band, plt, save_figure

        snap = self.snapshot_predictions(cfg, run)
        ranges = analysis.measurements["groups"]["ranges"]
        G = len(ranges)
        fig, axes = plt.subplots(G, 2, figsize=(11, 2.2 * G), squeeze=False, gridspec_kw={"width_ratios": [1.4, 1]})
        bins = np.arange(0, cfg.groups_task.d_vob + 1) - 0.5
        for k, (lo, hi) in enumerate(ranges):
            ax = axes[k][0]
            sel = snap["group"] == k
            ax.hist(snap["label"][sel].numpy(), bins=bins, color="tab:red", alpha=0.6, label="target")
            ax.hist(snap["pred"][sel].numpy(), bins=bins, color="tab:blue", alpha=0.6, label="prediction")
            ax.axvspan(lo - 0.5, hi + 0.5, color="grey", alpha=0.1)
            ax.set_title(f"group {k + 1}: labels {lo}..{hi}", fontsize=9)
            if k == 0:
                ax.legend(fontsize=8)
        ax = axes[0][1]
        for arm, color in (("mem1", "tab:red"), ("mem2", "tab:blue")):
            steps, v = run.curves(arm, "mem_acc")
            curve_with_band(ax, steps / cfg.steps_per_epoch(arm), v, ARMS[arm], color)
        ax.set_xlabel("epoch")
        ax.set_ylabel("accuracy on D_mem")
        ax.legend(fontsize=8)
        ax.set_title("Fig. 7 right — learning speed", fontsize=9)
        for k in range(1, G):
            axes[k][1].axis("off")
        fig.subplots_adjust(hspace=0.6)  # room for each group's title above the previous axis
        fig.suptitle(
            f"Fig. 7 — left: targets vs predictions at epoch {cfg.groups_epochs} (all {cfg.members} seeds), γ = {cfg.gamma:g}"
        )
        return [save_figure(fig, figdir / "fig7_label_distribution.png")]
