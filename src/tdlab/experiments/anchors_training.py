"""What ``anchors-bias`` and ``anchors-mlp`` (seed 001, Figs. 2, 3, 10) share: a γ-sweep trained as one
ensemble, the fixed data sets with their evaluation splits, the per-γ arms it is stored under, the
training-health gate and the two learning-speed measures (T50, AUC).

γ-sweep as one ensemble (A.3: "γ = 0.3, 0.5, 0.8"). γ changes only the initialisation, so every
(γ, seed index) pair is one member of one ensemble: members ``g * n + i`` (γ index ``g``, seed index
``i``). Member ``(g, i)`` draws its data set from the seed of member ``(0, i)`` (``FixedDataset``'s
``data_seeds``), so the arms of one seed index train on the very same sequences and differ in γ, in
their initial draw and in their epoch shuffles. The run stores each γ as its own arm
``gamma=<γ>`` (members ``0..n-1`` = seed indices), so the health gate and the plots read one γ at a time
and comparisons between γ pair members by seed index.

Splits (names of the metrics ``{split}_loss``, ``{split}_acc`` at every evaluation):

* ``mem``: the first ``n_eval`` memory sequences *of the training set* (D_mem, §4.1: memorisation is
  measured on the sequences that were trained on);
* ``rsn_train``: the first ``n_eval`` reasoning-train sequences of the training set (D_rsn,train);
* ``test``: a held-out set of ``n_test`` sequences of the masked tuples ``M`` (D_rsn,test).

Health gate. The base gate reads ``test_loss``, here D_rsn,test. The seed's γ = 0.3 finding is that
this loss does *not* fall ("remains effectively unchanged", §4.1): gating on it would declare that
arm untrained and make the claim about it unevaluable by construction. Whether an arm *trained* is a
question about the data it was trained on, so :class:`AnchorsHealth` gates on the loss over the
training-set splits (D_mem and D_rsn,train weighted by their tuple counts), against the uniform
predictor's ``log d_vob``.

Measures (issue 15): ``T50_D`` = first evaluated epoch with ``acc_D >= 0.5`` (a member that never
gets there counts as the horizon plus one evaluation interval, a lower bound); ``AUC_D`` = mean
``acc_D`` over the evaluations at epochs ``>= 1`` (the epoch-0 evaluation, chance for every arm, is
left out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from tdlab.claims import ArmHealth, assess_arm
from tdlab.config import Config
from tdlab.experiments.base import RunContext, init_arm, initial_states, snapshot_arm
from tdlab.models.ensemble import assemble
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.report.figures import curve_with_band, member_curves, plt
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.tasks.anchors import KIND_MEM, KIND_RSN_TRAIN, Anchors
from tdlab.train.data import FixedDataset
from tdlab.train.trainer import DivergenceError, FitResult, TrainConfig, Trainer

__all__ = [
    "SPLIT_NAMES", "SPLIT_LABELS", "EpochsConfig", "Seed001TrainConfig", "GammaArms", "gamma_gpt", "anchor_splits", "fixed_data",
    "epoch_train_config", "fit_gamma_arms", "t50", "auc", "epoch_curves", "AnchorsHealth", "plot_split_curves",
]

SPLIT_NAMES: tuple[str, ...] = ("mem", "rsn_train", "test")  # eval splits (metric prefixes)
SPLIT_LABELS = {"mem": "D_mem", "rsn_train": "D_rsn,train", "test": "D_rsn,test"}
SPLIT_COLORS = {"mem": "tab:blue", "rsn_train": "tab:purple", "test": "tab:orange"}  # Fig. 2's colours


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
    lr: float = Field(1e-5, gt=0.0, le=100.0)  # A.3: "initial" lr 1e-5, constant here (issue 15)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)  # torch AdamW default (the group's code)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)  # torch AdamW default (the group's code)
    weight_decay: float = Field(0.01, ge=0.0, le=10.0)  # torch AdamW default (the group's code)
    schedule: Literal["cosine", "constant"] = "constant"  # A.3 names one lr; warm-up + cosine is an option
    grad_clip: float | None = Field(1.0, gt=0.0)  # A.3: gradient clipping at norm 1


@dataclass(frozen=True)
class GammaArms:
    """Members of a γ-sweep trained as one ensemble.

    Attributes:
        gammas: the γ values, one arm each.
        n: members (seed indices) per γ.
        seeds: all ``len(gammas) * n`` member seeds; member ``g * n + i`` is γ ``gammas[g]``, seed index ``i``.
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
        return {s: self.gammas[k // self.n] for k, s in enumerate(self.seeds)}

    @property
    def data_seeds(self) -> dict[int, int]:
        """member seed -> the seed its data set is drawn from: that of seed index ``i`` in the first arm."""
        return {s: self.seeds[k % self.n] for k, s in enumerate(self.seeds)}

    def members_of(self, gamma_index: int) -> list[int]:
        """Indices (into :attr:`seeds`) of one arm's members, in seed-index order."""
        return list(range(gamma_index * self.n, (gamma_index + 1) * self.n))


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


def anchor_splits(task: Anchors, n_train: int, n_eval: int, n_test: int,
                  view: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None):
    """The ``make(gen, device)`` of :class:`FixedDataset`: one member's ``train`` set (D_mem ∪ D_rsn,train),
    its ``mem`` / ``rsn_train`` evaluation subsets (the first ``n_eval`` training sequences of each kind)
    and the held-out ``test`` set (D_rsn,test, ``n_test`` sequences of ``M``).

    Args:
        view: maps a :meth:`Anchors.dataset` dict to the model's tokens (``Anchors.emb_mlp_view`` for the
            Emb-MLP); default the sequences themselves.
    Returns:
        ``make(gen, device) -> {split: {"tokens": (n, T) long, "label": (n,) long}}``.
    """
    view = view or (lambda d: d["tokens"])

    def make(gen: torch.Generator, device: str | torch.device = "cpu") -> dict[str, dict[str, torch.Tensor]]:
        train = task.dataset(gen, n_train, "train")  # the memory table comes from gen's seed
        test = task.dataset(gen, n_test, "test_rsn")
        tokens = view(train)
        out = {"train": {"tokens": tokens, "label": train["label"]}}
        for split, kind in (("mem", KIND_MEM), ("rsn_train", KIND_RSN_TRAIN)):
            idx = torch.nonzero(train["kind"] == kind).squeeze(1)[:n_eval]
            if idx.numel() == 0:
                raise ValueError(f"the training set holds no {split} sequences (task.mix={task.cfg.mix!r})")
            out[split] = {"tokens": tokens[idx], "label": train["label"][idx]}
        out["test"] = {"tokens": view(test), "label": test["label"]}
        return {k: {n: t.to(device) for n, t in v.items()} for k, v in out.items()}

    return make


def fixed_data(task: Anchors, arms: GammaArms, n_train: int, ep: EpochsConfig, n_test: int, batch: int,
               view: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None) -> FixedDataset:
    """The fixed data set of a γ-sweep: one per seed index, shared by its γ arms."""
    return FixedDataset(anchor_splits(task, n_train, ep.n_eval, n_test, view), batch, eval_splits=SPLIT_NAMES,
                        eval_batch=ep.eval_batch, data_seeds=arms.data_seeds)


def epoch_train_config(train: TrainConfig, ep: EpochsConfig, n_train: int, seq_len: int, epochs: int | None = None) -> TrainConfig:
    """``train`` with steps, evaluation and logging counted in epochs of ``n_train // batch`` steps.
    ``seq_len`` is the sequence length (the trainer's CPU chunking reads it)."""
    spe = max(1, n_train // train.batch)
    e = ep.epochs if epochs is None else epochs
    return train.updated({"steps": e * spe, "eval_every": ep.eval_epochs * spe, "log_every": spe, "seq_len": max(2, seq_len)})


def fit_gamma_arms(ctx: RunContext, trainer: Trainer, build: Callable[[list[int]], Any], arms: GammaArms,
                   data: Any) -> dict[str, FitResult]:
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
    trainer.checkpoint = ctx.writer.path / "checkpoints" / "gamma-sweep.json"
    trainer.config_hash = ctx.writer.config_hash()
    seeds = list(arms.seeds)

    def store(result: FitResult) -> dict[str, FitResult]:
        out = {}
        init = initial_states(build, seeds)
        for g, arm in enumerate(names):
            idx = arms.members_of(g)
            pos = {m: i for i, m in enumerate(idx)}
            sub = FitResult(rows=[(s, pos[m], n, v) for s, m, n, v in result.rows if m in pos],
                            states=[result.states[m] for m in idx if m < len(result.states)])
            ctx.store_rows(arm, sub.rows)
            ctx.writer.save_arrays(arm, sub.states)
            ctx.writer.save_arrays(init_arm(arm), [init[m] for m in idx])
            for step, sts in sorted(result.snapshots.items()):  # the trainer's snapshot_steps, as ARM@stepN
                ctx.writer.save_arrays(snapshot_arm(arm, step), [sts[m] for m in idx if m < len(sts)])
            out[arm] = sub
        return out

    try:
        result = trainer.fit(build, seeds, data)
    except DivergenceError as err:
        store(err.result)
        raise
    return store(result)


# ------------------------------------------------------------------------------------------------
# Measures


def t50(epochs: np.ndarray, acc: np.ndarray, horizon: float, threshold: float = 0.5) -> list[float]:
    """``T50`` per member: the first evaluated epoch with ``acc >= threshold``; ``horizon`` where none is.

    Args:
        epochs: ``(S,)`` evaluation epochs; acc: ``(members, S)``.
        horizon: the censoring value (the last epoch plus one evaluation interval: a lower bound).
    """
    out = []
    for row in np.atleast_2d(acc):
        hit = np.nonzero(np.asarray(row) >= threshold)[0]
        out.append(float(epochs[hit[0]]) if hit.size else float(horizon))
    return out


def auc(epochs: np.ndarray, acc: np.ndarray) -> list[float]:
    """``AUC`` per member: the mean accuracy over the evaluations at epochs ``>= 1``."""
    keep = np.asarray(epochs) >= 1
    if not keep.any():
        raise ValueError("no evaluation after the first epoch")
    return np.atleast_2d(acc)[:, keep].mean(1).tolist()


def epoch_curves(metrics: pd.DataFrame, arm: str, name: str, steps_per_epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(epochs (S,), values (members, S))`` of metric ``name`` in ``arm``, steps converted to epochs."""
    steps, values = member_curves(metrics, arm, name)
    if steps.size == 0:
        raise KeyError(f"no {name!r} rows for arm {arm!r}")
    return steps / steps_per_epoch, values


# ------------------------------------------------------------------------------------------------
# Health and plots


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

    def health(self, cfg: Any, run: Run) -> dict[str, ArmHealth]:
        task = self.task(cfg)
        w_mem, w_rsn = len(task.mem_tuples), len(task.rsn_train_tuples)
        df = run.metrics()
        out: dict[str, ArmHealth] = {}
        for arm, sub in df.groupby("arm", sort=False):
            names = set(sub["name"])
            if not {"mem_loss", "rsn_train_loss"} <= names:
                continue
            _, mem = member_curves(sub, str(arm), "mem_loss")
            steps, rsn = member_curves(sub, str(arm), "rsn_train_loss")
            fit = (w_mem * mem + w_rsn * rsn) / (w_mem + w_rsn)  # loss on the training distribution
            finite = bool(np.all(np.isfinite(sub["value"].to_numpy(dtype=float))))
            out[str(arm)] = assess_arm(str(arm), fit[:, 0].tolist(), fit[:, -1].tolist(),
                                       accepted_steps=[float(steps.max())] * fit.shape[0], test_error=fit[:, -1].tolist(),
                                       trivial_error=self.trivial_error(cfg, str(arm)), all_finite=finite)
        return out


def plot_split_curves(metrics: pd.DataFrame, arms: Sequence[tuple[str, str]], steps_per_epoch: int,
                      chance: float | None = None, title: str = "") -> plt.Figure:
    """Fig. 2-style panels: loss (top) and accuracy (bottom) on D_mem, D_rsn,train, D_rsn,test over
    epochs, one column per ``(arm, column title)``; mean over members with a min–max band."""
    fig, axes = plt.subplots(2, len(arms), figsize=(4.2 * len(arms), 6.4), squeeze=False, sharex="col")
    for col, (arm, label) in enumerate(arms):
        for row, metric in enumerate(("loss", "acc")):
            ax = axes[row][col]
            for split in SPLIT_NAMES:
                ep, v = epoch_curves(metrics, arm, f"{split}_{metric}", steps_per_epoch)
                curve_with_band(ax, ep, v, SPLIT_LABELS[split], SPLIT_COLORS[split])
            if metric == "acc":
                ax.set_ylim(-0.02, 1.02)
                ax.axhline(0.5, color="grey", lw=0.8, ls=":")
                if chance is not None:
                    ax.axhline(chance, color="k", lw=0.8, ls="--", label=f"chance {chance:.3g}")
                ax.set_xlabel("epoch")
            ax.set_ylabel(metric)
            if row == 0:
                ax.set_title(label)
            if col == 0:
                ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def check_gammas(gammas: Sequence[float]) -> None:
    """A γ-sweep's values: at least one, distinct, each in [0, 10] (ValueError naming ``gammas``)."""
    if not gammas or len(set(gammas)) != len(gammas):
        raise ValueError(f"gammas must list distinct values, got {gammas}")
    if any(not 0.0 <= g <= 10.0 for g in gammas):
        raise ValueError(f"gammas must lie in [0, 10], got {gammas}")
