"""The γ-sweep of the anchors transformer (:class:`AnchorsGammaSweep`: anchors-bias registers it as it is,
anchors-embedding, anchors-attention and anchors-lowrank extend it), its config and claims (§4.1, Fig. 2A), and
the probe source the probe experiments read a trained sweep from (:class:`ProbeConfig`, :class:`ProbeSource`)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    PAPER_LR_TRANSFORMER,
    AnchorsHealth,
    ArmCurves,
    EpochsConfig,
    GammaArms,
    Gammas,
    Seed001GPTConfig,
    Seed001TrainConfig,
    bias_gap,
    bias_gap_row,
    fit_anchor_sweep,
    gamma_gpt,
    reading_note,
    reasoning_first_rows,
    record_rsn_past_marginal,
    split_curves,
)
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.curves import log_ratio_resolution
from tdlab.run_context import RunContext, init_arm, snapshot_arm
from tdlab.run_view import RunView
from tdlab.runs import Run, RunDirError
from tdlab.seeding import generators
from tdlab.tasks.anchors import (
    AnchorsConfig,
    chance_accuracy,
    example_sequences,
    label_marginal_losses,
    training_sets,
)
from tdlab.train.data import DATASET

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the module
    from matplotlib.figure import Figure


class BiasClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run."""

    t50_acc: float = Field(0.5, gt=0.0, lt=1.0)  # T50: first epoch with acc > 0.5
    small_final_test_acc: float = Field(0.9, ge=0.0, le=1.0)  # (t) γ = 0.8: final acc_rsn,test >= 0.9
    large_t50_factor: float = Field(1.5, ge=1.0, le=100.0)  # (t) γ = 0.3: T50_mem, T50_rsn,train within ×1.5
    large_test_acc_tol: float = Field(0.05, ge=0.0, le=1.0)  # (t) γ = 0.3: final acc_rsn,test <= chance + 0.05
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)  # the "small init" arm of the claims
    large_gamma: float = Field(0.3, ge=0.0, le=10.0)  # the "large init" arm of the claims


class AnchorsBiasConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=1024)  # seeds per γ (the seed trains one model per γ)
    task: AnchorsConfig = AnchorsConfig()  # §4.1 defaults: Z = 21..120, q = 2, L = 9, d_vob = 200
    model: Seed001GPTConfig = Seed001GPTConfig()
    gammas: Gammas = [0.3, 0.5, 0.8]  # A.3
    train: Seed001TrainConfig = Seed001TrainConfig()  # A.3: AdamW, batch 100, lr 1e-5, clip 1
    schedule: EpochsConfig = EpochsConfig()  # A.3: 1000 epochs
    claims: BiasClaims = BiasClaims()
    # Parameters kept after these epochs (< schedule.epochs), stored as gamma=<γ>@step<N> for the probe
    # experiments (the seed's Figs. 4 and 11 read epochs 200 and 900; init and the end are always kept).
    snapshot_epochs: list[int] = [50, 200, 900]
    # torch threads on the CPU (tdlab.train.cpu.cpu_threads): d = 64, batch 100 × 9 tokens is small work;
    # measured under load on the 2-core machine, 100 steps of the quick ensemble: 87 s with 2 threads, 25 s with 1.
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> AnchorsBiasConfig:
        if self.model.init != "gamma":
            raise ValueError(f"model.init must be 'gamma' (seed 001 §3.4), got {self.model.init!r}")
        if self.task.n_train < self.train.batch:
            raise ValueError(
                f"task.n_train={self.task.n_train} must hold at least one batch of train.batch={self.train.batch}"
            )
        bad = [e for e in self.snapshot_epochs if not 1 <= e < self.schedule.epochs]
        if bad:
            raise ValueError(f"snapshot_epochs {bad} must lie in 1..schedule.epochs-1={self.schedule.epochs - 1}")
        return self

    def model_for_task(self) -> GPTConfig:
        return self.model.updated({"vocab": self.task.d_vob, "max_len": self.task.L})

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.task.n_train // self.train.batch)


RSN_TRAIN_REACHED = Stage(
    "rsn-train-reached-t50",
    "accuracy on D_rsn,train rose above claims.t50_acc within the run: the reasoning map "
    "was learnt on the training tuples",
)


BOTH_REACHED = Stage(
    "mem-and-rsn-train-reached-t50",
    "accuracy on both D_mem and D_rsn,train rose above claims.t50_acc within the "
    "run: both training splits were learnt (a pace is defined)",
)


def _large_t50_tol(cfg: AnchorsBiasConfig, row: object) -> float:
    return math.log(cfg.claims.large_t50_factor)


def _chance(cfg: AnchorsBiasConfig, row: object) -> float:
    return chance_accuracy(cfg.task)


def _chance_or_inferred(cfg: AnchorsBiasConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted final accuracies on D_rsn,test at the run's members and held-out size: at chance (the masked tuples
    not inferred, what the seed says of γ = 0.3), members spread over ± 2 binomial standard errors of
    ``task.n_test`` sequences; and inferred (accuracy 1, the reasoning solution the seed's small init reaches, the
    alternative §4.1 contrasts it with), spread the same below 1."""
    c = chance_accuracy(cfg.task)
    spread = 2 * math.sqrt(c * (1 - c) / cfg.task.n_test)
    return planted_pair(c, 1.0 - spread, spread, cfg.members)


AnchorsBiasConfigT = TypeVar("AnchorsBiasConfigT", bound=AnchorsBiasConfig)


class AnchorsGammaSweep(AnchorsHealth, Experiment[AnchorsBiasConfigT]):
    """The γ-sweep of anchors-bias (:mod:`tdlab.experiments.paper001_reasoning_bias.bias`): its config, claims, profiles, run, measure and figures,
    registered there as they are; the probe experiments extend it with their own config and claims."""

    # its own config; the experiments built on the γ-sweep (AnchorsGammaSweep[TheirConfig]) set theirs
    Config = AnchorsBiasConfig  # type: ignore[assignment]

    def run(self, cfg: AnchorsBiasConfigT, ctx: RunContext) -> None:
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        mcfg, gamma_of = cfg.model_for_task(), arms.gamma_of
        fit_anchor_sweep(ctx, cfg, task, arms, lambda s: gamma_gpt(mcfg, s, gamma_of), cfg.task.L)

    # ---- measurement ----------------------------------------------------------------------------
    def measure(self, cfg: AnchorsBiasConfigT, run: RunView) -> Measurements:
        """Per γ: the curves' T50s (censored, discrete), AUCs and final accuracies (per seed and their means);
        the label-marginal baselines and the stages the claims about reaching something need."""
        c = cfg.claims
        marginal = label_marginal_losses(self.task(cfg))
        chance = chance_accuracy(cfg.task)
        out = Measurements(
            {
                "label_marginal_loss": marginal,
                "chance_acc_test": chance,
                "lr_vs_paper": cfg.train.lr / PAPER_LR_TRANSFORMER,
            }
        )
        curves = {g: ArmCurves.read(run, GammaArms.arm(g), cfg.steps_per_epoch) for g in cfg.gammas}
        for g, cv in curves.items():
            arm = GammaArms.arm(g)
            record_rsn_past_marginal(out, arm, cv, marginal)
            peak = {s: np.nanmax(cv.acc[s], axis=1) for s in ("mem", "rsn_train")}
            out.stage(
                arm,
                RSN_TRAIN_REACHED,
                peak["rsn_train"],
                c.t50_acc,
                "gt",
                evidence="highest D_rsn,train accuracy vs claims.t50_acc",
            )
            out.stage(
                arm,
                BOTH_REACHED,
                np.minimum(peak["mem"], peak["rsn_train"]),
                c.t50_acc,
                "gt",
                evidence="the lower of the highest D_mem and D_rsn,train accuracies vs claims.t50_acc",
            )
            out.values[arm] = {
                **cv.summary(c.t50_acc),
                "auc_gap": bias_gap(cv),
                **{f"final_acc_{s}_mean": float(np.mean(cv.final_acc(s))) for s in cv.acc},
                "final_loss_test_mean": float(np.mean(cv.loss["test"][:, -1])),
            }
        small, large = c.small_gamma, c.large_gamma
        if small in curves:
            arm, cv = GammaArms.arm(small), curves[small]
            reasoning_first_rows(out, "small-init-learns-reasoning-first", arm, cv, c.t50_acc, small)
            out.row(
                "small-init-generalises-to-masked-tuples",
                f"gamma={small:g}",
                cv.final_acc("test"),
                arms=[arm],
                context={"gamma": small},
                label=f"γ = {small:g}: final acc_rsn,test ≥ {c.small_final_test_acc:g} (t)",
            )
        if large in curves:
            arm, cv = GammaArms.arm(large), curves[large]
            tm, tr = cv.t50("mem", c.t50_acc), cv.t50("rsn_train", c.t50_acc)
            # Rows of members that never reached T50 on a split are gated by BOTH_REACHED; their ratio is
            # stored as measured (a bound) and never decides.
            res = log_ratio_resolution(tm.steps, tr.steps, tm.resolution)
            out.row(
                "large-init-memorises-at-reasoning-pace",
                f"gamma={large:g}",
                Sample(np.log(tm.steps / tr.steps), resolution=res),
                arms=[arm],
                context={"gamma": large},
                label=f"γ = {large:g}: |log(T50_mem / T50_rsn,train)| ≤ log {c.large_t50_factor:g} (t)",
            )
            out.row(
                "large-init-does-not-generalise",
                f"gamma={large:g}",
                cv.final_acc("test"),
                arms=[arm],
                context={"gamma": large},
                label=f"γ = {large:g}: final acc_rsn,test ≤ chance {chance:.3g} + {c.large_test_acc_tol:g} (t)",
            )
        ordered = sorted(curves)
        for lo, hi in itertools.pairwise(ordered):
            bias_gap_row(out, "reasoning-bias-grows-with-gamma", hi, lo, curves)
        return out

    def notes(self, cfg: AnchorsBiasConfigT, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        ratio = measured.values["lr_vs_paper"]
        notes = (
            [
                f"The curves ran {cfg.schedule.epochs} epochs at lr {cfg.train.lr:g} ({ratio:.3g}× the "
                f"seed's {PAPER_LR_TRANSFORMER:g} over 1000 epochs): the orderings are the seed's comparisons over a "
                "shortened, faster schedule, and a claim that needs a split learnt is not evaluable when it was "
                "not learnt within the run."
            ]
            if ratio != 1.0
            else []
        )
        return [*super().notes(cfg, measured, groups), *notes]

    # ---- figures --------------------------------------------------------------------------------
    figures = (
        split_curves(
            "fig2a_loss_accuracy.png",
            lambda cfg: f"Fig. 2A — transformer, {cfg.members} seeds per γ (mean, band min–max)",
            lambda cfg: chance_accuracy(cfg.task),
        ),
    )

    def plot(self, cfg: AnchorsBiasConfigT, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared Fig. 2A curves, then Fig. 8's example sequences (its own figure)."""
        from tdlab.report.figures import save_figure

        return [*super().plot(cfg, run, analysis, figdir), save_figure(self.fig8(cfg), figdir / "fig8_examples.png")]

    def fig8(self, cfg: AnchorsBiasConfigT) -> Figure:
        """Fig. 8: example sequences, one row each, tokens coloured by type (noise, key, anchor), label at right."""
        from tdlab.report.figures import plt

        task = self.task(cfg)
        ex = example_sequences(task, cfg.seed)
        colors = {"noise": "#9ecae1", "key": "#fdae6b", "anchor": "#a1d99b", "label": "#eeeeee"}
        L = cfg.task.L
        fig, axes = plt.subplots(1, 2, figsize=(2 * (0.55 * (L + 2) + 0.6), 2.6))
        for ax, (kind, d) in zip(axes, ex.items(), strict=True):
            n = d["tokens"].shape[0]
            for r in range(n):
                y = n - 1 - r
                p = int(d["key_pos"][r])
                for t in range(L):
                    role = "key" if t == p else ("anchor" if p < t <= p + cfg.task.q else "noise")
                    ax.add_patch(plt.Rectangle((t, y), 0.95, 0.9, color=colors[role]))
                    ax.text(t + 0.47, y + 0.45, str(int(d["tokens"][r, t])), ha="center", va="center", fontsize=8)
                ax.add_patch(plt.Rectangle((L + 0.6, y), 1.2, 0.9, color=colors["label"]))
                ax.text(L + 1.2, y + 0.45, f"→ {int(d['label'][r])}", ha="center", va="center", fontsize=8)
            ax.set_xlim(-0.1, L + 2)
            ax.set_ylim(-0.1, n)
            ax.axis("off")
            ax.set_title(
                f"{kind} mapping" + (" (y drawn once per (z, a))" if kind == "memory" else " (y = z + a1 + a2)"),
                fontsize=9,
            )
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in ("noise", "key", "anchor")]
        fig.legend(handles, ["noise", "key", "anchor"], loc="lower center", ncol=3, fontsize=8)
        return fig


# Config keys an anchors-bias source run must share with the probe experiment reading it.
SOURCE_KEYS: tuple[str, ...] = ("seed", "members", "task", "model", "gammas", "train", "schedule")


class ProbeConfig(AnchorsBiasConfig):
    """An ``anchors-bias`` γ-sweep to probe: trained here, or read from ``from_run``."""

    # A finished anchors-bias run directory to read instead of training (its config must match: SOURCE_KEYS).
    from_run: str | None = Field(None, min_length=1, max_length=4096)
    n_probe: int = Field(1000, ge=1, le=1_000_000)  # training sequences per member fed through the model

    @model_validator(mode="after")
    def _source(self) -> ProbeConfig:
        if self.from_run is None:
            return self
        try:
            conf = Run(Path(self.from_run)).config
        except RunDirError as exc:
            raise ValueError(f"from_run: {exc}") from None
        if conf.get("experiment") != "anchors-bias":
            raise ValueError(f"from_run: {self.from_run} is a {conf.get('experiment')!r} run, need an anchors-bias run")
        theirs = conf.get("config", {})
        ours = self.model_dump(mode="json")
        bad = [k for k in SOURCE_KEYS if theirs.get(k) != ours.get(k)]
        if bad:
            raise ValueError(
                f"from_run: the source run's {', '.join(bad)} differ from this config's; run with the "
                f"source's profile and --set values (its config.yaml) so the probes read the same setting"
            )
        return self


class ProbeSource(AnchorsHealth):
    """Train (or copy from ``from_run``) the γ-sweep and read its members back as models and data. A mixin
    before :class:`AnchorsGammaSweep` (whose γ-sweep it runs; its task and γ arms are :class:`AnchorsHealth`'s).

    ``--set from_run=RUN_DIR`` reads a finished ``anchors-bias`` run (its config must match on ``SOURCE_KEYS``,
    else one error names the fields) and copies its ``gamma=<γ>`` arrays and metrics into this run
    (:meth:`RunContext.copy_arms`), so the analysis reads this run alone; without it the experiment trains the
    same γ-sweep itself (``AnchorsGammaSweep.run``: parameters kept at init, at ``snapshot_epochs`` and at the end)."""

    def run(self, cfg: ProbeConfig, ctx: RunContext) -> None:
        if cfg.from_run is not None:
            ctx.copy_arms(Path(cfg.from_run), [GammaArms.arm(g) for g in cfg.gammas])
            return
        assert isinstance(self, AnchorsGammaSweep)  # a mixin before AnchorsGammaSweep (class docstring)
        AnchorsGammaSweep.run(self, cfg, ctx)  # the very γ-sweep of anchors-bias, snapshots at cfg.snapshot_epochs

    def probe_notes(
        self, cfg: ProbeConfig, measured: Measurements, groups: list[GroupResult], own: list[str]
    ) -> list[str]:
        """A probe experiment's notes: the generic ones (not the γ-sweep's own, whose claims it does not judge),
        then ``own``, then the reading note when the parameters are not read in the seed's setting."""
        assert isinstance(self, AnchorsGammaSweep)  # a mixin before AnchorsGammaSweep (class docstring)
        line = reading_note(cfg.train.lr, cfg.schedule.epochs, PAPER_LR_TRANSFORMER)
        return [*super(AnchorsGammaSweep, self).notes(cfg, measured, groups), *own, *([line] if line else [])]

    # ---- reading back ----------------------------------------------------------------------------
    @staticmethod
    def state_arm(cfg: ProbeConfig, gamma: float, when: str | int) -> str:
        """The stored arm of γ at ``when``: ``"end"``, ``"init"`` or an epoch (a trainer snapshot)."""
        arm = GammaArms.arm(gamma)
        if when == "end":
            return arm
        if when == "init":
            return init_arm(arm)
        return snapshot_arm(arm, int(when) * cfg.steps_per_epoch)

    @staticmethod
    def model(cfg: ProbeConfig, arrays: dict[str, torch.Tensor]) -> GPT:
        """The ensemble (one member per stored member) holding ``arrays`` (``(E, ...)`` each)."""
        E = next(iter(arrays.values())).shape[0]
        m = GPT(cfg.model_for_task(), list(range(E)))  # the draw is overwritten
        m.load_state_dict(arrays)
        return m.eval()

    def probe_sequences(self, cfg: ProbeConfig) -> dict[str, torch.Tensor]:
        """The first ``n_probe`` training sequences of each seed index (members of every γ train on them):
        ``{tokens (n, B, L), label, key_pos, kind (n, B)}`` rebuilt from the data seeds (as ``anchor_splits``)."""
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        b = min(cfg.n_probe, cfg.task.n_train)
        keys = ("tokens", "label", "key_pos", "kind")
        return training_sets(task, generators(arms.index_seeds, DATASET), cfg.task.n_train, keys, b)
