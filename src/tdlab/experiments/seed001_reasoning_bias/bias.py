"""``anchors-bias``: seed 001 (Reasoning bias under small initialisation), §4.1, Fig. 2A and Fig. 8.

A 2-layer, 1-head post-LN transformer (Eqs. 15–18, A.2–A.3) is trained on the composite anchor
functions (§3.1, Eq. 1: reasoning ``y = z_p + Σa``, memory ``y^(z_p, a) ~ U(Z)`` drawn once) from three
initialisation rates γ ∈ {0.3, 0.5, 0.8} (§3.4: ``W_ij ~ N(0, d_out^{-2γ})``, larger γ = smaller init),
the γ × seed grid as one ensemble (:mod:`~tdlab.experiments.seed001_reasoning_bias.training`). Loss and
accuracy on D_mem, D_rsn,train and the held-out D_rsn,test (tuples ``M = {(11, 13), (13, 11)}``) are
recorded every epoch (Fig. 2A). The seed's reading: at γ = 0.8 both reasoning sets are learnt long
before the memory set and the masked tuples are inferred; at γ = 0.3 memory and reasoning-train fall
together and D_rsn,test does not; the reasoning bias grows with γ.

Claims (thresholds marked (t) are ours, in :class:`BiasClaims`; each claim declares the seed's words, the
small (γ > 0.5) or large (γ < 0.5) init it is about, and where its threshold comes from):

* γ = 0.8, reasoning first: ``T50_rsn,train < T50_mem``, ``T50_rsn,test < T50_mem`` (censored and
  discrete: an exact sign test over seeds) and ``AUC_mem < AUC_rsn,test``; the arm must have learnt
  something of the reasoning map (past the label marginal on D_rsn,train);
* γ = 0.8 generalises: final ``acc_rsn,test >= 0.9`` (t), once D_rsn,train has been learnt (T50 reached);
* γ = 0.3 memorises at the reasoning pace: ``|log(T50_mem / T50_rsn,train)| <= log 1.5`` (t), once both
  training splits have been learnt within the run;
* γ = 0.3 does not generalise: final ``acc_rsn,test`` at most chance (``1/N_Z``, a guess from the held-out
  labels' marginal) plus 0.05 (t, calibrated: chance holds, the inferred solution fails), once D_rsn,train has
  been learnt. The seed's "remains effectively unchanged" is a statement that something *stays*: it holds only
  from a run of the seed's 1000 epochs, and fails from any run where M is already inferred;
* ``AUC_rsn,test − AUC_mem`` grows with γ (paired comparisons of neighbouring γ).

The trained ensemble (``arrays/gamma=<γ>.safetensors``, ``@init`` and the ``snapshot_epochs`` as
``@step<N>`` beside it) is what the probe experiments read. Fig. 8 (App. A.1) draws example sequences
of the task, coloured by token type.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ClaimSpec, GroupResult, Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Calibration, Threshold
from tdlab.config import Config
from tdlab.experiments.axes import AtlasAxes, AtlasAxis
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.experiments.manifest import Setting
from tdlab.experiments.seed001_reasoning_bias.training import (
    DIRECTION,
    LARGE_INIT,
    MEMBERS_DIFFER,
    RSN_PAST_MARGINAL,
    SEED_EPOCHS,
    SEED_LR_TRANSFORMER,
    SMALL_INIT,
    TASK_MANIFEST,
    AnchorsHealth,
    ArmCurves,
    EpochsConfig,
    GammaArms,
    Seed001GPTConfig,
    Seed001TrainConfig,
    bias_gap,
    check_gammas,
    epoch_train_config,
    fit_gamma_arms,
    fixed_data,
    gamma_gpt,
    label_marginal_losses,
    plot_split_curves,
    reasoning_first_claim,
    reasoning_first_rows,
    record_rsn_past_marginal,
)
from tdlab.experiments.view import RunView
from tdlab.models.gpt import GPTConfig
from tdlab.tasks.anchors import Anchors, AnchorsConfig
from tdlab.train.cpu import cpu_threads
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import Trainer

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the module
    from matplotlib.figure import Figure

__all__ = [
    "BOTH_REACHED",
    "RSN_TRAIN_REACHED",
    "TRANSFORMER_MANIFEST",
    "AnchorsBias",
    "AnchorsBiasConfig",
    "BiasClaims",
    "chance_acc_test",
    "draw_examples",
]


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
    gammas: list[float] = [0.3, 0.5, 0.8]  # A.3
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
        check_gammas(self.gammas)
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


def chance_acc_test(cfg: AnchorsConfig) -> float:
    """Chance accuracy on D_rsn,test: a guess from the held-out labels' marginal (``z + Σa`` with ``z``
    uniform: ``1/N_Z``)."""
    return 1.0 / (cfg.key_max - cfg.key_min + 1)


def draw_examples(task: Anchors, seed: int, per_kind: int = 4) -> dict[str, dict[str, torch.Tensor]]:
    """Fig. 8's example sequences: ``per_kind`` memory and reasoning sequences of the task."""
    g = torch.Generator().manual_seed(seed)
    mem = task.dataset(g, per_kind, "mem")
    rsn = task.dataset(g, per_kind, "rsn_train")
    return {"memory": mem, "reasoning": rsn}


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
    return chance_acc_test(cfg.task)


def _chance_or_inferred(cfg: AnchorsBiasConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted final accuracies on D_rsn,test at the run's members and held-out size: at chance (the masked tuples
    not inferred, what the seed says of γ = 0.3), members spread over ± 2 binomial standard errors of
    ``task.n_test`` sequences; and inferred (accuracy 1, the reasoning solution the seed's small init reaches, the
    alternative §4.1 contrasts it with), spread the same below 1."""
    c = chance_acc_test(cfg.task)
    spread = 2 * math.sqrt(c * (1 - c) / cfg.task.n_test)
    return planted_pair(c, 1.0 - spread, spread, cfg.members)


CLAIMS = (
    reasoning_first_claim(
        "small-init-learns-reasoning-first",
        "Small init (γ = 0.8): D_rsn,train and D_rsn,test are learnt before D_mem (§4.1, Fig. 2A)",
        quote="In contrast, when γ = 0.8, the losses on D_rsn,train and D_rsn,test decrease significantly faster than "
        "the loss on D_mem.",
        where="§4.1; Fig. 2A (γ = 0.8 column)",
    ),
    ClaimSpec(
        "small-init-generalises-to-masked-tuples",
        "Small init (γ = 0.8): the masked tuples M are inferred — accuracy on D_rsn,test approaches 1 (§4.1, Fig. 2A)",
        quote="when γ = 0.8, the losses on D_rsn,train and D_rsn,test decrease significantly faster than the loss on "
        "D_mem. This behavior indicates a shift towards a reasoning bias in the model.",
        where="§4.1; Fig. 2A (bottom row, γ = 0.8: the accuracy on D_rsn,test rises with D_rsn,train's)",
        form="settings",
        hypotheses=(SMALL_INIT,),
        threshold=Threshold(
            "ours",
            "claims.small_final_test_acc = 0.9: our reading of Fig. 2A's accuracy curve, which the text gives no level "
            "for (no level between chance and 1 follows from the seed)",
        ),
        test="value",
        relation="ge",
        expected="claims.small_final_test_acc",
        tolerance=0.0,
        horizon="budget",
        stage=RSN_TRAIN_REACHED,
        quantity="final accuracy on D_rsn,test (held-out tuples of M)",
    ),
    ClaimSpec(
        "large-init-memorises-at-reasoning-pace",
        "Large init (γ = 0.3): D_mem and D_rsn,train are learnt at nearly identical rates (§4.1, Fig. 2A)",
        quote="As illustrated in Figure 2A, for γ = 0.3, the losses on D_mem and D_rsn,train decrease at nearly "
        "identical rates",
        where="§4.1; Fig. 2A (γ = 0.3 column)",
        form="settings",
        hypotheses=(LARGE_INIT,),
        threshold=Threshold(
            "ours",
            "claims.large_t50_factor = 1.5: 'nearly identical rates' read as T50s within a factor 1.5 "
            "(the seed gives no number and no theory of the two paces)",
        ),
        test="value",
        relation="close",
        expected=0.0,
        tolerance=_large_t50_tol,
        horizon="budget",
        stage=BOTH_REACHED,
        quantity="log(T50_mem / T50_rsn,train) (T50 known to one evaluation interval: the resolution is the largest "
        "change of the log ratio over ± half an interval)",
    ),
    ClaimSpec(
        "large-init-does-not-generalise",
        "Large init (γ = 0.3): the loss on D_rsn,test remains effectively unchanged — the masked tuples are not "
        "inferred (§4.1, Fig. 2A)",
        quote="while the loss on D_rsn,test remains effectively unchanged. This observation suggests that the model "
        "primarily memorizes the training data in this setting.",
        where="§4.1; Fig. 2A (γ = 0.3 column)",
        form="settings",
        hypotheses=(LARGE_INIT,),
        threshold=Threshold(
            "ours",
            "claims.large_test_acc_tol = 0.05 above chance (1/N_Z) on the final D_rsn,test accuracy",
            Calibration(
                "planted",
                "members at chance (± 2 binomial standard errors of task.n_test held-out sequences) hold, members at "
                "the inferred solution (accuracy 1, the small init's) fail, at the run's member count",
                plant=_chance_or_inferred,
                test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
            ),
        ),
        test="value",
        relation="le",
        expected=_chance,
        tolerance="claims.large_test_acc_tol",
        horizon="budget",
        stage=RSN_TRAIN_REACHED,
        learning_required=False,
        # "remains unchanged" over the seed's 1000 epochs: a shorter run still at chance may yet infer M
        stays=True,
        length="schedule.epochs",
        seed_length=SEED_EPOCHS,
        quantity="final accuracy on D_rsn,test, against chance (1/N_Z: a guess from the held-out labels' marginal)",
    ),
    ClaimSpec(
        "reasoning-bias-grows-with-gamma",
        "The smaller the init (the larger γ), the stronger the reasoning bias (§4.1, Fig. 2A)",
        quote="as the initialization scale decreases, the model exhibits a progressively stronger reasoning bias.",
        where="§4.1; Fig. 2A (γ = 0.3, 0.5, 0.8 columns)",
        form="settings",
        threshold=DIRECTION,
        all_rows=True,  # "progressively": every neighbouring pair of γ
        test="compare",
        relation="gt",
        margin=0.0,
        horizon="budget",
        stage=RSN_PAST_MARGINAL,
        quantity="AUC_rsn,test − AUC_mem at the larger γ minus at the smaller (neighbouring γ, paired over seeds)",
    ),
)


def log_ratio_resolution(t_mem: np.ndarray, t_rsn: np.ndarray, interval: float) -> float:
    """Twice the largest change of ``log(t_mem / t_rsn)`` when each T50 moves by up to half an evaluation
    interval (both ``> interval / 2``): the log ratio's resolution."""
    h = interval / 2
    r = np.log(t_mem / t_rsn)
    hi = np.log((t_mem + h) / (t_rsn - h)) - r
    lo = r - np.log((t_mem - h) / (t_rsn + h))
    return float(2 * np.max(np.maximum(hi, lo)))


# The γ-sweep of §4.1 / A.3's transformers (anchors-bias and the probes that read its parameters).
TRANSFORMER_MANIFEST: dict[str, Setting] = {
    **TASK_MANIFEST,
    "task.L": Setting(9, "§4.1 (L = 9); A.3 ('a fixed length of 9 tokens')"),
    "task.n_train": Setting(
        198_000,
        "§4.1 ('The dataset contains 200000 data pairs, ensuring an equal number of samples for each anchor pair'); "
        "A.3",
        "1000 per anchor tuple: the 198 training tuples' sequences (tasks.anchors' documented reading)",
    ),
    "task.n_test": Setting(2_000, "§4.1; A.3", "the 1000 per tuple of M's two tuples: D_rsn,test"),
    "model.d": Setting(200, "A.3 (embedding dimension d_m)"),
    "model.d_attn": Setting(64, "A.3 (query-key-value dimension d_k)"),
    "model.d_ff": Setting(512, "A.3 (feedforward dimension d_f)"),
    "model.layers": Setting(2, "§4.1; A.3 (2 decoder layers)"),
    "model.heads": Setting(1, "§4.1; A.3 (1 attention head per layer)"),
    "model.norm": Setting("post", "A.2, Eq. 18 (LN after each residual sum)"),
    "gammas": Setting([0.3, 0.5, 0.8], "§4.1; A.3"),
    "members": Setting(1, "A.3 ('we train three Transformer models'; one per γ)"),
    "train.optimizer": Setting("adamw", "§4.1; A.3"),
    "train.lr": Setting(SEED_LR_TRANSFORMER, "A.3 (initial learning rate 1e-5)"),
    "train.batch": Setting(100, "A.3"),
    "train.grad_clip": Setting(1.0, "A.3 (gradient clipping at max norm 1)"),
    "schedule.epochs": Setting(SEED_EPOCHS, "A.3 (1000 epochs)"),
}


AnchorsBiasConfigT = TypeVar("AnchorsBiasConfigT", bound=AnchorsBiasConfig)


@register
class AnchorsBias(AnchorsHealth, Experiment[AnchorsBiasConfigT]):
    name = "anchors-bias"
    paper = "001 Reasoning bias under small initialisation"
    figure = "Fig. 2A, Fig. 8 (§4.1, A.1–A.3)"
    description = (
        "2-layer post-LN transformer on composite anchor functions from γ-init 0.3, 0.5, 0.8 (one ensemble): "
        "accuracy on D_mem, D_rsn,train and held-out D_rsn,test per epoch. Claims: at γ=0.8 reasoning is learnt "
        "before memory and generalises to M; at γ=0.3 memory and reasoning-train together, no generalisation; "
        "AUC_rsn,test − AUC_mem grows with γ."
    )
    # its own config; the experiments built on the γ-sweep (AnchorsBias[TheirConfig]) set theirs
    Config = AnchorsBiasConfig  # type: ignore[assignment]
    claims: ClassVar[tuple[ClaimSpec, ...]] = CLAIMS
    manifest: ClassVar[dict[str, Setting]] = TRANSFORMER_MANIFEST
    paper_differs: ClassVar[dict[str, str]] = {"members": MEMBERS_DIFFER}
    arm_fields: ClassVar[dict[str, str]] = {
        "model.init_gamma": "gammas=[...]",
        "model.vocab": "task.d_vob",
        "model.max_len": "task.L",
        "train.steps": "schedule.epochs",
        "train.eval_every": "schedule.eval_epochs",
        "train.log_every": "schedule.eval_epochs",
        "train.seq_len": "task.L",
    }
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        # One scale-down for 2 CPU cores, set once before any run. Kept from the seed: q = 2, L = 9, the
        # anchor sets and M, d_vob = 200, the γ values, the architecture's shape (2 post-LN layers, 1 head,
        # ReLU, untied head with bias), AdamW, batch 100, clip 1. Changed, and why:
        # * keys Z = 21..40 (N_Z = 20, not 100): the memory map has N_Z × 100 (key, tuple) pairs to
        #   store; 5× fewer keys is 5× fewer pairs, so memorisation can show in minutes;
        # * n_train = 20,000 = 5 sequences per (key, tuple) pair (the seed: 200,000 / (100 × 200) = 10),
        #   1,000 held-out sequences of M;
        # * widths d_m 64, d_k 32, d_f 128 (÷3–4): CPU time;
        # * lr 1e-3 instead of 1e-5 (constant, as the seed's), 12 epochs = 2,400 steps (the seed: 2,000,000):
        #   what fits in 10 minutes at ~0.2 s per step of the 9-member ensemble on one loaded core. Each
        #   memory (key, tuple) pair is then seen 60 times (the seed: 10,000): memorisation has little
        #   time to show here, reasoning (a shared rule) does not need it — claims that need γ = 0.3 to
        #   memorise are not evaluable when memory is never learnt within the run;
        # * evaluation every epoch on 1,000 sequences each of D_mem and D_rsn,train; snapshots at epochs
        #   1, 2, 11 (the seed's 50, 200, 900 of 1000 as fractions of 12 epochs, at least 1). At 100× the
        #   seed's lr these are not the seed's phases: the probes' rows read there are ours;
        # * six members per γ (the seed does not say how many it ran), in paper too: the reasoning-first claim
        #   is an exact sign test over paired members, which cannot decide on fewer at 95 %
        #   (claims.stats.min_sign_members; 3/3 members beyond the margin gave p = 0.25).
        "quick": {
            "members": 6,
            "task": {"key_min": 21, "key_max": 40, "n_train": 20_000, "n_test": 1_000},
            "model": {"d": 64, "d_attn": 32, "d_ff": 128},
            "train": {"lr": 1e-3},
            "schedule": {"epochs": 12, "eval_epochs": 1, "n_eval": 1_000},
            "snapshot_epochs": [1, 2, 11],
        },
        # A.3 exactly: 200,000 sequences (198,000 train + 2,000 of M), d_m 200, d_k 64, d_f 512, lr 1e-5,
        # 1000 epochs (2,000,000 steps per model; a GPU is advised).
        "paper": {"members": 6, "schedule": {"epochs": 1000, "eval_epochs": 1, "n_eval": 10_000}},
    }
    # atlas: the γ-bias claims (small γ learns reasoning first, t50 ratios, final accuracy) depend on the epoch budget (snapshots rescaled to fit every budget)
    atlas_axes = AtlasAxes(
        axes=(AtlasAxis("schedule.epochs", (500, 1000, 2000), quick=(6, 12), label="epochs"),),
        profile_set={"quick": {"snapshot_epochs": [1, 2, 5]}, "paper": {"snapshot_epochs": [50, 200, 450]}},
        why="The seed's dynamics claims (reasoning anchors learned before memory ones, t50 ratios, the final accuracies) are read along or at the end of a fixed epoch budget; the quick profile's 12 epochs are a scale-down of the paper's 1000, so the horizon is the setting these verdicts hinge on.",
    )

    def run(self, cfg: AnchorsBiasConfigT, ctx: RunContext) -> None:
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        mcfg = cfg.model_for_task()
        tcfg = epoch_train_config(cfg.train, cfg.schedule, cfg.task.n_train, cfg.task.L)
        data = fixed_data(task, arms, cfg.task.n_train, cfg.schedule, cfg.task.n_test, cfg.train.batch)
        trainer = Trainer(
            tcfg,
            ctx.device,
            ctx.progress,
            label="γ-sweep",
            objective=LastPosition(),
            snapshot_steps=[e * cfg.steps_per_epoch for e in cfg.snapshot_epochs],
        )
        gamma_of = arms.gamma_of
        with cpu_threads(cfg.cpu_threads, ctx.device):
            fit_gamma_arms(ctx, trainer, lambda s: gamma_gpt(mcfg, s, gamma_of), arms, data)

    # ---- measurement ----------------------------------------------------------------------------
    def measure(self, cfg: AnchorsBiasConfigT, run: RunView) -> Measurements:
        """Per γ: the curves' T50s (censored, discrete), AUCs and final accuracies; the label-marginal
        baselines and the stages the claims about reaching something need."""
        c = cfg.claims
        marginal = label_marginal_losses(self.task(cfg))
        chance = chance_acc_test(cfg.task)
        out = Measurements(
            {
                "label_marginal_loss": marginal,
                "chance_acc_test": chance,
                "lr_vs_seed": cfg.train.lr / SEED_LR_TRANSFORMER,
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
            out.values[arm] = {**cv.summary(c.t50_acc), "auc_gap": bias_gap(cv)}
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
            out.row(
                "reasoning-bias-grows-with-gamma",
                f"{hi:g}-above-{lo:g}",
                bias_gap(curves[hi]),
                bias_gap(curves[lo]),
                arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
                context={"gamma": hi, "reference_gamma": lo},
                label=f"(AUC_rsn,test − AUC_mem) at γ = {hi:g} minus at γ = {lo:g} > 0",
            )
        return out

    def notes(self, cfg: AnchorsBiasConfigT, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        m = measured.values
        notes = []
        for g in sorted(cfg.gammas):
            s = m[GammaArms.arm(g)]
            notes.append(
                f"γ = {g:g}: T50 mem/rsn-train/rsn-test = {_fmt(s['T50_mem'])} / {_fmt(s['T50_rsn_train'])} / "
                f"{_fmt(s['T50_test'])} epochs (— : never above {cfg.claims.t50_acc:g} within {cfg.schedule.epochs} "
                f"epochs); final acc mem/rsn-train/rsn-test = {np.mean(s['final_acc_mem']):.3f} / "
                f"{np.mean(s['final_acc_rsn_train']):.3f} / {np.mean(s['final_acc_test']):.3f} (seed means; chance on "
                f"D_rsn,test {m['chance_acc_test']:.3g}); final D_rsn,test loss {np.mean(s['final_loss_test']):.3f} vs the "
                f"label marginal's {m['label_marginal_loss']['test']:.3f} nats."
            )
        by_id = {g.id: g for g in groups}
        gen = by_id["large-init-does-not-generalise"]
        if gen.rows and gen.verdict == "fails":
            notes.append(
                f"γ = {cfg.claims.large_gamma:g} infers the masked tuples within this run (final acc_rsn,test "
                f"{gen.rows[0].mean:.3f} vs chance {m['chance_acc_test']:.3g}): the seed's large-init picture "
                "does not hold here."
            )
        if m["lr_vs_seed"] != 1.0:
            notes.append(
                f"The curves ran {cfg.schedule.epochs} epochs at lr {cfg.train.lr:g} ({m['lr_vs_seed']:.3g}× the "
                f"seed's {SEED_LR_TRANSFORMER:g} over 1000 epochs): the orderings are the seed's comparisons over a "
                "shortened, faster schedule, and a claim that needs a split learnt is not evaluable when it was "
                "not learnt within the run."
            )
        return notes

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsBiasConfigT, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import save_figure

        arms = [(GammaArms.arm(g), f"γ = {g:g}") for g in cfg.gammas]
        fig = plot_split_curves(
            run,
            arms,
            cfg.steps_per_epoch,
            chance_acc_test(cfg.task),
            f"Fig. 2A — transformer, {cfg.members} seeds per γ (mean, band min–max)",
        )
        paths = [save_figure(fig, figdir / "fig2a_loss_accuracy.png")]
        paths.append(save_figure(self.fig8(cfg), figdir / "fig8_examples.png"))
        return paths

    def fig8(self, cfg: AnchorsBiasConfigT) -> Figure:
        """Fig. 8: example sequences, one row each, tokens coloured by type (noise, key, anchor), label at right."""
        from tdlab.report.figures import plt

        task = self.task(cfg)
        ex = draw_examples(task, cfg.seed)
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


def _fmt(v: list[int | None]) -> str:
    return "[" + ", ".join("—" if x is None else f"{x:g}" for x in v) + "]"
