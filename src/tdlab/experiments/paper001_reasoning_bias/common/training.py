"""What the seed-001 experiments share: the γ-sweep trained as one ensemble, the fixed data sets with
their evaluation splits, the learning-curve measures (T50, AUC) and their baselines, the training-health
gate, when a row read from trained parameters is the seed's own setting, and the Fig. 2-style plots.

γ-sweep as one ensemble (A.3: "γ = 0.3, 0.5, 0.8"). γ changes only the initialisation, so every
(γ, seed index) pair is one member of one ensemble: members ``i * G + g`` (seed index ``i``, γ index
``g`` of ``G``), so a member's seed, γ and data never depend on how many seed indices run, and a
``--decide`` round with more seed indices trains only the new members (the sweep's seeds extend the last
round's). Member ``(g, i)`` draws its data set from the seed of member ``(0, i)`` (``FixedDataset``'s
``data_seeds``), so the arms of one seed index train on the very same sequences and differ in γ, in
their initial draw and in their epoch shuffles. The run stores each γ as its own arm ``gamma=<γ>``
(members ``0..n-1`` = seed indices), so the health gate and the plots read one γ at a time and
comparisons between γ pair members by seed index.

Splits (names of the metrics ``{split}_loss``, ``{split}_acc`` at every evaluation):

* ``mem``: the first ``n_eval`` memory sequences *of the training set* (D_mem, §4.1: memorisation is
  measured on the sequences that were trained on);
* ``rsn_train``: the first ``n_eval`` reasoning-train sequences of the training set (D_rsn,train);
* ``test``: a held-out set of ``n_test`` sequences of the masked tuples ``M`` (D_rsn,test).

Measures. ``T50_D``: the first evaluated epoch at which ``acc_D`` is above ``t50_acc``
(:func:`tdlab.probes.curves.first_crossing`): known to one evaluation interval, and *censored* at the
last evaluation for a member that never gets there (only a lower bound is known). ``AUC_D``: the mean
``acc_D`` over the evaluations at epochs ``>= 1`` (the epoch-0 evaluation, chance for every arm, is
left out). Baselines: the loss of the training set's label marginal on each split
(:func:`tdlab.tasks.anchors.label_marginal_losses`, the best input-blind predictor: a model below it has learnt something
of the map) and chance accuracy on D_rsn,test.

Health gate. The seed's γ = 0.3 finding is that the held-out loss does *not* fall (§4.1): gating on it
would declare that arm untrained by construction. Whether an arm *trained* is a question about the
data it was trained on, so :class:`AnchorsHealth` gates on the loss over the training-set splits
(D_mem and D_rsn,train weighted by their tuple counts), against the uniform predictor's ``log d_vob``.

Readings. :func:`parameter_reading` gives a row read from the trained parameters its provenance; when such a
row is the seed's own setting is declared once, as the reading ``parameter_reading`` of the seed's
``experiments.yaml``, and listed by every experiment that reads trained parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field

from tdlab.claims import ArmHealth, ClaimSpec, Measurements, Sample, Stage, assess_arm
from tdlab.claims.declare import Hypothesis, Provenance, Threshold
from tdlab.config import Config, Distinct
from tdlab.models.ensemble import assemble
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.curves import Crossings, auc, t50
from tdlab.probes.embedding import cosine_matrix
from tdlab.report.standard_figures import Curves, Line, Panel
from tdlab.run_context import RunContext, extend_fit, init_arm, initial_states, snapshot_arm
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.tasks.anchors import Anchors, AnchorsConfig, anchor_splits
from tdlab.train.cpu import cpu_threads
from tdlab.train.data import FixedDataset
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import DivergenceError, FitResult, TrainConfig, Trainer

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the module
    from matplotlib.axes import Axes


SPLIT_NAMES: tuple[str, ...] = ("mem", "rsn_train", "test")  # eval splits (metric prefixes)
SPLIT_LABELS = {"mem": "D_mem", "rsn_train": "D_rsn,train", "test": "D_rsn,test"}
SPLIT_COLORS = {"mem": "tab:blue", "rsn_train": "tab:purple", "test": "tab:orange"}  # Fig. 2's colours

# A γ-sweep's values (§3.4's init rate), one arm each: at least one, distinct, each in [0, 10].
Gammas = Annotated[list[Annotated[float, Field(ge=0.0, le=10.0)]], Field(min_length=1), Distinct]

PAPER_EPOCHS = 1000  # A.3: every anchor-function model trains 1000 epochs
PAPER_LR_TRANSFORMER = 1e-5  # A.3: the transformer's AdamW learning rate
PAPER_LR_EMB_MLP = 5e-6  # A.3: the Emb-MLP's


class EpochsConfig(Config):
    """The epoch-based schedule of a fixed data set (A.3) and the evaluation sets."""

    epochs: int = Field(1000, ge=1, le=100_000)  # A.3: 1000 epochs
    eval_epochs: int = Field(1, ge=1, le=100_000)  # evaluate every this many epochs (T50 resolution)
    n_eval: int = Field(10_000, ge=1, le=10_000_000)  # sequences of D_mem and of D_rsn,train evaluated (ours)
    eval_batch: int = Field(1000, ge=1, le=1_000_000)  # sequences per evaluation forward pass (speed only)


class Seed001TrainConfig(TrainConfig):
    """A.3's optimisation (the transformer's; Emb-MLP overrides ``lr``). Field defaults, not a default
    instance, so a profile that sets one field keeps the others."""

    batch: int = Field(100, ge=1, le=1_000_000)  # A.3: batch 100
    lr: float = Field(1e-5, gt=0.0, le=100.0)  # A.3: "initial" lr 1e-5, held constant (A.3 names no schedule)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)  # torch AdamW default (the group's code)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)  # torch AdamW default (the group's code)
    weight_decay: float = Field(0.01, ge=0.0, le=10.0)  # torch AdamW default (the group's code)
    schedule: Literal["cosine", "constant"] = "constant"  # A.3 names one lr; warm-up + cosine is an option
    grad_clip: float | None = Field(1.0, gt=0.0)  # A.3: gradient clipping at norm 1


class Seed001GPTConfig(GPTConfig):
    """The seed-001 transformer (A.2–A.3, Eqs. 15–18) as field defaults, so a profile that changes widths
    keeps the rest. ``vocab`` and ``max_len`` are set from the task."""

    arch: Literal["sec2", "gpt2"] = "gpt2"
    vocab: int = Field(200, ge=2, le=4096)  # d_vob (A.3)
    d: int = Field(200, ge=1, le=4096)  # d_m (A.3)
    d_attn: int | None = Field(64, ge=1, le=4096)  # d_k (A.3)
    d_ff: int | None = Field(512, ge=1, le=65536)  # d_f (A.3)
    layers: int = Field(2, ge=1, le=64)  # A.3: 2 decoder layers
    heads: int = Field(1, ge=1, le=64)  # A.3: 1 head
    max_len: int = Field(9, ge=1, le=65536)  # L = 9 (§4.1)
    norm: Literal["auto", "pre", "post", "none"] = "post"  # Eq. 18
    activation: Literal["auto", "relu", "gelu"] = "relu"  # the group's code
    tie_weights: bool = False  # untied output layer (A.2)
    head_bias: bool | None = True  # the group's code
    init: Literal["standard", "local-to-global", "gamma"] = "gamma"  # §3.4
    init_gamma: float = Field(0.8, ge=0.0, le=10.0)  # set per member from `gammas`


@dataclass(frozen=True)
class GammaArms:
    """Members of a γ-sweep trained as one ensemble.

    Attributes:
        gammas: the γ values, one arm each.
        n: members (seed indices) per γ.
        seeds: all ``len(gammas) * n`` member seeds; member ``i * len(gammas) + g`` is γ ``gammas[g]``, seed
            index ``i`` (seed index major: the seeds of ``n`` seed indices are the first of ``n + 1``'s).
    """

    gammas: tuple[float, ...]
    n: int
    seeds: tuple[int, ...]

    @classmethod
    def make(cls, root: int, gammas: Sequence[float], n: int) -> GammaArms:
        return cls(tuple(float(g) for g in gammas), n, tuple(member_seeds(root, len(gammas) * n)))

    @staticmethod
    def arm(gamma: float) -> str:
        """The stored arm of one γ."""
        return f"gamma={gamma:g}"

    @property
    def arms(self) -> list[str]:
        return [self.arm(g) for g in self.gammas]

    @property
    def gamma_of(self) -> dict[int, float]:
        """member seed -> its γ (a build looks members up by seed: the trainer may hand it a chunk)."""
        return {s: self.gammas[k % len(self.gammas)] for k, s in enumerate(self.seeds)}

    @property
    def index_seeds(self) -> list[int]:
        """The seed of each seed index ``i``: that of its member in the first arm, which its data set is drawn from."""
        return [self.seeds[m] for m in self.members_of(0)]

    @property
    def data_seeds(self) -> dict[int, int]:
        """member seed -> the seed its data set is drawn from: that of seed index ``i`` in the first arm."""
        G = len(self.gammas)
        return {s: self.seeds[(k // G) * G] for k, s in enumerate(self.seeds)}

    def members_of(self, gamma_index: int) -> list[int]:
        """Indices (into :attr:`seeds`) of one arm's members, in seed-index order."""
        return [i * len(self.gammas) + gamma_index for i in range(self.n)]


def gamma_gpt(cfg: GPTConfig, seeds: Sequence[int], gamma_of: Mapping[int, float]) -> GPT:
    """A :class:`GPT` ensemble whose member ``e`` is γ-initialised with ``gamma_of[seeds[e]]``.

    ``GPT`` takes one ``init_gamma`` per model, so each member's parameters are those of the one-member
    model ``GPT(cfg with init_gamma = γ_e, [seeds[e]])`` (member ``e`` of any ensemble equals that model:
    draws come from the member's own INIT stream), copied into the ensemble.
    """
    if cfg.init != "gamma":
        raise ValueError(f"model.init must be 'gamma' for a γ-sweep, got {cfg.init!r}")
    seeds = list(seeds)
    return assemble(GPT(cfg, seeds), (GPT(cfg.updated({"init_gamma": float(gamma_of[s])}), [s]) for s in seeds))


def fixed_data(
    task: Anchors,
    arms: GammaArms,
    n_train: int,
    ep: EpochsConfig,
    n_test: int,
    batch: int,
    view: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> FixedDataset:
    """The fixed data set of a γ-sweep: one per seed index, shared by its γ arms."""
    return FixedDataset(
        anchor_splits(task, n_train, ep.n_eval, n_test, view),
        batch,
        eval_splits=SPLIT_NAMES,
        eval_batch=ep.eval_batch,
        data_seeds=arms.data_seeds,
    )


def epoch_train_config(
    train: TrainConfig, ep: EpochsConfig, n_train: int, seq_len: int, epochs: int | None = None
) -> TrainConfig:
    """``train`` with steps, evaluation and logging counted in epochs of ``n_train // batch`` steps.
    ``seq_len`` is the sequence length (the trainer's CPU chunking reads it)."""
    spe = max(1, n_train // train.batch)
    e = ep.epochs if epochs is None else epochs
    return train.updated(
        {"steps": e * spe, "eval_every": ep.eval_epochs * spe, "log_every": spe, "seq_len": max(2, seq_len)}
    )


def fit_gamma_arms(
    ctx: RunContext, trainer: Trainer, build: Callable[[list[int]], Any], arms: GammaArms, data: Any
) -> dict[str, FitResult]:
    """One ensemble fit of every (γ, seed) member, stored as one arm per γ (``gamma=<γ>``).

    Like :meth:`RunContext.fit`: checkpointed in the run's ``checkpoints/``, skipped when a resumed run
    had finished it, the initial parameters stored under ``ARM@init``, what a diverging fit measured
    stored before the error goes on up. Parameters the trainer kept at its ``snapshot_steps``
    are stored per arm as ``ARM@step<N>`` (:func:`tdlab.experiments.base.snapshot_arm`).

    Returns:
        ``{arm: FitResult}`` with members renumbered ``0..n-1`` (seed index).
    """
    names = arms.arms
    if all(ctx.writer.arrays_path(a).is_file() for a in names):
        return {a: FitResult(rows=ctx.writer.arm_rows(a), states=ctx.writer.load_arrays(a)) for a in names}
    seeds = list(arms.seeds)
    # A --decide round: the last round's sweep trained the first members with the same seeds (seed index
    # major), and a member's numbers depend on its seed alone, so only the new members train.
    sweep = "gamma-sweep/" + ",".join(f"{g:g}" for g in arms.gammas)
    old_seeds, old = ctx.reuse.get(sweep, ([], FitResult()))
    k = len(old_seeds) if 0 < len(old_seeds) <= len(seeds) and seeds[: len(old_seeds)] == old_seeds else 0
    trainer.checkpoint = ctx.writer.path / "checkpoints" / f"gamma-sweep{f'+{k}' if k else ''}.json"
    trainer.config_hash = ctx.writer.config_hash()

    def store(result: FitResult) -> dict[str, FitResult]:
        out = {}
        init = initial_states(build, seeds)
        for g, arm in enumerate(names):
            idx = arms.members_of(g)
            pos = {m: i for i, m in enumerate(idx)}
            sub = FitResult(
                rows=[(s, pos[m], n, v) for s, m, n, v in result.rows if m in pos],
                states=[result.states[m] for m in idx if m < len(result.states)],
            )
            ctx.store_rows(arm, sub.rows)
            ctx.writer.save_arrays(arm, sub.states)
            ctx.writer.save_arrays(init_arm(arm), [init[m] for m in idx])
            for step, sts in sorted(result.snapshots.items()):  # the trainer's snapshot_steps, as ARM@stepN
                ctx.writer.save_arrays(snapshot_arm(arm, step), [sts[m] for m in idx if m < len(sts)])
            out[arm] = sub
        return out

    try:
        result = extend_fit(old, trainer.fit(build, seeds[k:], data), k) if k < len(seeds) else old
    except DivergenceError as err:
        if k:  # the member named as the whole sweep numbers it
            err = DivergenceError(err.member + k, err.step, extend_fit(old, err.result, k))
        store(err.result)
        raise err from None
    ctx.fits[sweep] = (seeds, result)
    return store(result)


def fit_anchor_sweep(
    ctx: RunContext,
    cfg: Any,
    task: Anchors,
    arms: GammaArms,
    build: Callable[[list[int]], Any],
    seq_len: int,
    view: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> None:
    """The anchors γ-sweep's training (A.3): every (γ, seed) member on its seed index's fixed data set
    (:func:`fixed_data`, ``view`` the model's input), last-position cross-entropy, epochs of
    ``task.n_train // train.batch`` steps, parameters kept at each of ``cfg.snapshot_epochs``
    (:func:`fit_gamma_arms`). ``cfg``: an anchors γ-sweep config (``task``, ``train``, ``schedule``,
    ``snapshot_epochs``, ``steps_per_epoch``, ``cpu_threads``); ``seq_len`` the model's input length."""
    tcfg = epoch_train_config(cfg.train, cfg.schedule, cfg.task.n_train, seq_len)
    data = fixed_data(task, arms, cfg.task.n_train, cfg.schedule, cfg.task.n_test, cfg.train.batch, view=view)
    trainer = Trainer(
        tcfg,
        ctx.device,
        ctx.progress,
        label="γ-sweep",
        objective=LastPosition(),
        snapshot_steps=[e * cfg.steps_per_epoch for e in cfg.snapshot_epochs],
    )
    with cpu_threads(cfg.cpu_threads, ctx.device):
        fit_gamma_arms(ctx, trainer, build, arms, data)


# ------------------------------------------------------------------------------------------------
# Learning-curve measures


def t50_sample(c: Crossings) -> Sample:
    """A :class:`Sample` of crossing epochs that carries their censoring and evaluation interval."""
    return Sample(c.steps, censored=c.censored, resolution=c.resolution)


@dataclass(frozen=True)
class ArmCurves:
    """One arm's evaluation curves over epochs: ``epochs (S,)``, ``acc[split]`` and ``loss[split]``
    ``(members, S)`` for each split in :data:`SPLIT_NAMES` the run evaluated."""

    epochs: np.ndarray
    acc: dict[str, np.ndarray]
    loss: dict[str, np.ndarray]

    @classmethod
    def read(cls, view: RunView, arm: str, steps_per_epoch: int, splits: Sequence[str] = SPLIT_NAMES) -> ArmCurves:
        acc, loss = {}, {}
        steps = np.zeros(0)
        for s in splits:
            steps, acc[s] = view.curves(arm, f"{s}_acc")
            _, loss[s] = view.curves(arm, f"{s}_loss")
        return cls(np.asarray(steps, dtype=float) / steps_per_epoch, acc, loss)

    def t50(self, split: str, threshold: float) -> Crossings:
        return t50(self.epochs, self.acc[split], threshold)

    def auc(self, split: str) -> list[float]:
        return auc(self.epochs, self.acc[split])

    def final_acc(self, split: str) -> np.ndarray:
        return self.acc[split][:, -1]

    def summary(self, threshold: float) -> dict[str, Any]:
        """The report's numbers: per split T50 (``None`` = never within the run), AUC, final accuracy and loss."""
        out: dict[str, Any] = {}
        for s in self.acc:
            out[f"T50_{s}"] = self.t50(s, threshold).as_optional()
            out[f"AUC_{s}"] = self.auc(s)
            out[f"final_acc_{s}"] = self.final_acc(s).tolist()
            out[f"final_loss_{s}"] = self.loss[s][:, -1].tolist()
        return out


RSN_PAST_MARGINAL = Stage(
    "rsn-train-past-label-marginal",
    "the arm's final loss on D_rsn,train is below that of the training set's label marginal (the best "
    "input-blind predictor): it has learnt something of the reasoning map",
)


def record_rsn_past_marginal(out: Any, arm: str, curves: ArmCurves, marginal: Mapping[str, float]) -> None:
    """Record :data:`RSN_PAST_MARGINAL` for ``arm`` (``out``: the :class:`~tdlab.claims.Measurements`)."""
    out.stage(
        arm,
        RSN_PAST_MARGINAL,
        curves.loss["rsn_train"][:, -1],
        marginal["rsn_train"],
        "lt",
        evidence="final D_rsn,train loss vs the label marginal's, nats",
    )


def _row_gamma(row: Any) -> float | None:
    g = row.context.get("gamma")
    return float(g) if isinstance(g, (int, float)) else None


# The seed's own line between small and large (§3.4): "initialization scales with γ > 0.5 are generally
# considered small"; γ = 0.5 is the default (LeCun, He). Its small init is γ = 0.8, its large γ = 0.3.
SMALL_INIT = Hypothesis(
    "a small init, γ > 0.5 (§3.4: 'initialization scales with γ > 0.5 are generally considered small'; the seed's "
    "small init is γ = 0.8)",
    lambda cfg, row: (g := _row_gamma(row)) is not None and g > 0.5,
    on="row",
)
LARGE_INIT = Hypothesis(
    "a large init, γ < 0.5 (§3.4: γ = 0.5 is the common default scale, γ > 0.5 small; the seed's large init is γ = 0.3)",
    lambda cfg, row: (g := _row_gamma(row)) is not None and g < 0.5,
    on="row",
)
SMALL_VS_LARGE = Hypothesis(
    "a small init (γ > 0.5) set against a large one (γ < 0.5), as the seed's γ = 0.8 against γ = 0.3 (§3.4)",
    lambda cfg, row: (
        (g := _row_gamma(row)) is not None
        and isinstance(r := row.context.get("reference_gamma"), (int, float))
        and g > 0.5 > float(r)
    ),
    on="row",
)
# A direction the seed's figure or text states, with no margin: decided by a paired interval or, on discrete or
# censored values, an exact sign test (tdlab.claims.judge).
DIRECTION = Threshold(
    "paper", "the direction the seed states, no margin: a paired interval, or an exact sign test on discrete values"
)


def reasoning_first_claim(id: str, statement: str, quote: str, where: str) -> ClaimSpec:
    """Fig. 2's ordering at small init, declared once for the transformer (2A) and the Emb-MLP (2B): both
    reasoning sets are learnt before the memory set (rows of :func:`reasoning_first_rows`); ``quote`` and
    ``where``: the seed's words for the model at hand."""
    return ClaimSpec(
        id,
        statement,
        quote=quote,
        where=where,
        form="settings",
        hypotheses=(SMALL_INIT,),
        threshold=DIRECTION,
        all_rows=True,  # both reasoning sets, on both measures
        test="compare",
        relation="lt",
        margin=0.0,
        horizon="budget",
        stage=RSN_PAST_MARGINAL,
        quantity="T50 (first evaluated epoch with accuracy above claims.t50_acc; known to one evaluation interval, "
        "censored at the last evaluation when never reached) of D_rsn,train or D_rsn,test minus T50 of D_mem; and "
        "AUC_mem − AUC_rsn,test (mean accuracy over epochs ≥ 1); paired over seeds",
        unit=" epochs",
    )


def reasoning_first_rows(out: Any, claim: str, arm: str, curves: ArmCurves, threshold: float, gamma: float) -> None:
    """The rows of :func:`reasoning_first_claim` for one arm (``out``: the :class:`~tdlab.claims.Measurements`)."""
    mem = t50_sample(curves.t50("mem", threshold))
    for split, name in (("rsn_train", "rsn-train"), ("test", "rsn-test")):
        out.row(
            claim,
            f"t50-{name}-before-mem",
            t50_sample(curves.t50(split, threshold)),
            mem,
            arms=[arm],
            context={"gamma": gamma, "split": split},
            label=f"γ = {gamma:g}: T50 of {SPLIT_LABELS[split]} − T50 of D_mem < 0",
        )
    out.row(
        claim,
        "auc-mem-below-rsn-test",
        curves.auc("mem"),
        curves.auc("test"),
        arms=[arm],
        context={"gamma": gamma},
        label=f"γ = {gamma:g}: AUC_mem − AUC_rsn,test < 0",
    )


def bias_gap(curves: ArmCurves) -> list[float]:
    """The reasoning bias of one arm per member: ``AUC_rsn,test − AUC_mem``."""
    return [a - b for a, b in zip(curves.auc("test"), curves.auc("mem"), strict=True)]


def bias_gap_row(out: Measurements, claim: str, hi: float, lo: float, curves: dict[float, ArmCurves]) -> None:
    """Row ``HI-above-LO`` of ``claim``: the reasoning bias (:func:`bias_gap`) at γ = ``hi`` against γ = ``lo``,
    paired by member."""
    out.row(
        claim,
        f"{hi:g}-above-{lo:g}",
        bias_gap(curves[hi]),
        bias_gap(curves[lo]),
        arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
        context={"gamma": hi, "reference_gamma": lo},
        label=f"(AUC_rsn,test − AUC_mem) at γ = {hi:g} minus at γ = {lo:g} > 0",
    )


@dataclass(frozen=True)
class Reading:
    """Whether a row read from trained parameters is the seed's own setting, and the label that says why."""

    provenance: Provenance
    label: str


def parameter_reading(
    epoch: int,
    epochs: int,
    lr: float,
    paper_lr: float,
    paper_epochs: Sequence[int] | None = None,
    paper_budget: int = PAPER_EPOCHS,
) -> Reading:
    """The provenance of a row read from the parameters after ``epoch`` of an ``epochs``-epoch run at a
    constant ``lr``, for a figure the seed reads after ``paper_epochs`` of its ``paper_budget`` epochs at
    ``paper_lr`` (``None``: the end of training, where the seed names no epoch).

    The row stands for the seed's epoch nearest in fraction of training. It is the seed's setting only
    at the seed's learning rate and budget, read at that very epoch: a snapshot taken at the same
    fraction of a shorter run at a larger learning rate is taken at another point of training (the quick
    profiles' layer-1 attention leaves the average operator long before their last epoch), so that row
    is ours.
    """
    paper_epoch = min(paper_epochs or (paper_budget,), key=lambda e: abs(e / paper_budget - epoch / epochs))
    if math.isclose(lr, paper_lr, rel_tol=1e-9) and epochs == paper_budget and epoch == paper_epoch:
        return Reading("paper", f"epoch {epoch} of {epochs} at lr {lr:g}: the seed's reading")
    return Reading(
        "ours",
        f"read after epoch {epoch} of {epochs} at lr {lr:g} ({lr / paper_lr:.3g}× the seed's "
        f"{paper_lr:g}), standing for the seed's epoch {paper_epoch} of {paper_budget}: not the seed's "
        "setting",
    )


def reading_note(cfg_lr: float, epochs: int, paper_lr: float, paper_budget: int = PAPER_EPOCHS) -> str | None:
    """The notes' line when a run's parameters are not read in the seed's setting (``None`` when they are)."""
    if math.isclose(cfg_lr, paper_lr, rel_tol=1e-9) and epochs == paper_budget:
        return None
    return (
        f"This run trains {epochs} epochs at lr {cfg_lr:g} ({cfg_lr / paper_lr:.3g}× the seed's {paper_lr:g} over "
        f"{paper_budget} epochs): statements about the trained parameters at an epoch are read at a scaled epoch "
        "under a larger learning rate, which is not the seed's setting. Those rows are ours: judged and shown, "
        "never deciding a paper claim (the paper profile reads them at the seed's epochs and learning rate)."
    )


def has_state(run: RunView, arm: str) -> bool:
    """Whether the run stored parameters for ``arm`` (a snapshot arm ``ARM@stepN`` exists only where kept)."""
    return (run.path / "arrays" / f"{arm.replace('/', '__')}.safetensors").is_file()


# ------------------------------------------------------------------------------------------------
# Health and plots


def loss_health(run: RunView, arm: str, steps: np.ndarray, loss: np.ndarray, trivial: float) -> ArmHealth:
    """The health of ``arm`` from a training-loss curve ``loss (members, S)`` evaluated at ``steps (S,)``: its
    first and last values, every step accepted, the last against the ``trivial`` predictor's; finite when every
    metric the arm stored is."""
    finite = all(bool(np.all(np.isfinite(run.curves(arm, n)[1]))) for n in run.names(arm))
    return assess_arm(
        arm,
        loss[:, 0].tolist(),
        loss[:, -1].tolist(),
        accepted_steps=[float(steps.max())] * loss.shape[0],
        test_error=loss[:, -1].tolist(),
        trivial_error=trivial,
        all_finite=finite,
    )


class AnchorsHealth:
    """What every γ-sweep experiment of seed 001 shares: its task and γ × seed members (from the config's
    ``task``, ``seed``, ``gammas``, ``members``) and the health gate on the training-set loss (module docstring).
    """

    @staticmethod
    def task(cfg: Any) -> Anchors:
        return Anchors(cfg.task)

    @staticmethod
    def gamma_arms(cfg: Any) -> GammaArms:
        return GammaArms.make(cfg.seed, cfg.gammas, cfg.members)

    def trivial_error(self, cfg: Any, arm: str) -> float:
        return math.log(cfg.task.d_vob)  # the uniform predictor over the vocabulary

    def health(self, cfg: Any, run: Run | RunView) -> dict[str, ArmHealth]:
        run = run if isinstance(run, RunView) else RunView(run)
        task = self.task(cfg)
        w_mem, w_rsn = len(task.mem_tuples), len(task.rsn_train_tuples)
        out: dict[str, ArmHealth] = {}
        for arm in run.arms():
            if not (run.has(arm, "mem_loss") and run.has(arm, "rsn_train_loss")):
                continue
            _, mem = run.curves(arm, "mem_loss")
            steps, rsn = run.curves(arm, "rsn_train_loss")
            fit = (w_mem * mem + w_rsn * rsn) / (w_mem + w_rsn)  # loss on the training distribution
            out[arm] = loss_health(run, arm, steps, fit, self.trivial_error(cfg, arm))
        return out


def split_curves(file: str, title: Callable[[Any], str], chance: Callable[[Any], float]) -> Curves:
    """Fig. 2-style curves: loss (top row) and accuracy (bottom row) on D_mem, D_rsn,train, D_rsn,test over
    epochs, one column per γ of ``cfg.gammas``; the accuracy panels mark 0.5 and ``chance(cfg)``."""

    def panels(cfg: Any, m: Mapping[str, Any]) -> list[Panel]:
        def lines(arm: str, metric: str) -> list[Line]:
            return [
                Line(arm, f"{s}_{metric}", SPLIT_LABELS[s], SPLIT_COLORS[s], per=cfg.steps_per_epoch)
                for s in SPLIT_NAMES
            ]

        c = chance(cfg)
        arms = [(GammaArms.arm(g), f"γ = {g:g}") for g in cfg.gammas]
        return [Panel(label, lines(arm, "loss"), ylabel="loss") for arm, label in arms] + [
            Panel("", lines(arm, "acc"), {"0.5": 0.5, f"chance {c:.3g}": c}, ylim=(-0.02, 1.02), ylabel="acc")
            for arm, _ in arms
        ]

    return Curves(file, panels, title=title, xlabel="epoch", size=(4.2, 3.2), columns=lambda cfg: len(cfg.gammas))


def cosine_heatmap(ax: Axes, c: torch.Tensor, first: int, title: str) -> None:
    """A cosine matrix ``(n, n)`` as a heatmap on ``[-1, 1]``, ticks labelled with token ids from ``first``."""
    from tdlab.report.figures import plt

    n = c.shape[0]
    im = ax.imshow(c.numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
    ticks = list(range(0, n, max(1, n // 5)))
    ax.set_xticks(ticks, [str(first + k) for k in ticks])
    ax.set_yticks(ticks, [str(first + k) for k in ticks])
    ax.set_title(title, fontsize=9)
    plt.colorbar(im, ax=ax, fraction=0.046)


def anchor_cosine_grid(axes: Any, panels: Sequence[tuple[str, torch.Tensor]], task: AnchorsConfig) -> None:
    """Figs. 3A, 4A, 10, 11: the members' mean cosine matrix of the memory anchors' (top row) and the reasoning
    anchors' (bottom row) embeddings, a column per ``(label, embedding table (E, vocab, d))`` of ``panels``."""
    kinds = ((task.mem_min, task.mem_max, "memory"), (task.rsn_min, task.rsn_max, "reasoning"))
    for col, (label, W) in enumerate(panels):
        for row, (lo, hi, kind) in enumerate(kinds):
            cosine_heatmap(axes[row][col], cosine_matrix(W[:, lo : hi + 1]).mean(0), lo, f"{kind}, {label}")
