"""``icl-avdigits``: seed 002, Table 1 (Sec. 7, App. I).

The models are :mod:`tdlab.models.multimodal_ca` (I.3's cross-attention model and its ablations, the
bidirectional baseline of I.4, on the conv tokenisation of I.2), the data :mod:`tdlab.tasks.avdigits` (the
offline stand-in for avMNIST, or the real arrays with ``--set data.path=...``). Each model is one ensemble over
``members`` seeds; member ``i`` of every model shares the data set, the validation carve-out and the epoch
shuffles (all from seed index ``i``), so accuracies are compared paired by seed index.

Per model and member, from the per-epoch evaluations on a validation split carved from the training
set and on the test split:

* ``val_choice``: the test accuracy at the epoch of best validation accuracy;
* ``best_test`` and its epoch: what the seed reports;
* ``final``: the test accuracy after the last epoch.

Parameter counts are computed from the built models; they and the accuracies are printed beside the seed's
(``PAPER_TABLE1``), which are never pass criteria.

Declared in the seed's ``experiments.yaml`` (``tdlab explain icl-avdigits``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.claims.declare import Hypothesis, Threshold
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.models.multimodal_ca import (
    BiCAConfig,
    BidirectionalCA,
    MultimodalCA,
    MultimodalCAConfig,
    activation_bytes,
    parameter_count,
)
from tdlab.probes.curves import table1_measures
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import atomic_write
from tdlab.seeding import derive_seed, member_seeds
from tdlab.tasks import avdigits
from tdlab.tasks.avdigits import AVDigitsConfig
from tdlab.train.cpu import cpu_threads
from tdlab.train.data import FixedDataset
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import TrainConfig, Trainer, auto_chunk

Arm = Literal["full", "no-injection", "no-cross", "neither", "bi-ca"]
ARMS: tuple[Arm, ...] = ("full", "no-injection", "no-cross", "neither", "bi-ca")
LABELS = {
    "full": "Full paper-inspired (inj. & cross-attn)",
    "no-injection": "No injection",
    "no-cross": "No cross-attn",
    "neither": "No inj. & no cross-attn",
    "bi-ca": "Standard bi-CA transformer",
}
# Seed 002 Table 1: (parameters, best test accuracy %, best epoch), one run each, corrupted avMNIST.
PAPER_TABLE1 = {
    "full": (4.36e4, 63.85, 64),
    "no-injection": (3.82e4, 62.72, 65),
    "no-cross": (4.36e4, 62.10, 79),
    "neither": (3.82e4, 60.79, 90),
    "bi-ca": (6.07e4, 62.72, 62),
}
ABLATIONS = {
    "no-injection": {"inject": False},
    "no-cross": {"cross": False},
    "neither": {"inject": False, "cross": False},
}
DATA_FILE = "data.json"  # the data's provenance and sizes, written into the run directory


class AVDigitsTrainConfig(TrainConfig):
    """I.5's optimisation; fields the seed leaves open are marked."""

    batch: int = Field(256, ge=1, le=1_000_000)  # I.5: batch 256
    lr: float = Field(3e-4, gt=0.0, le=100.0)  # I.5: learning rate 3e-4
    beta1: float = Field(0.9, ge=0.0, lt=1.0)  # unstated ("standard specifications"): torch default
    beta2: float = Field(0.999, ge=0.0, lt=1.0)  # unstated: torch default
    weight_decay: float = Field(1e-4, ge=0.0, le=10.0)  # I.5: 1e-4
    schedule: Literal["cosine", "constant"] = "constant"  # unstated: one learning rate is named
    seq_len: int = Field(33, ge=2, le=65536)  # tokens per example (CLS + 16 + 16); the CPU chunking reads it


class ScheduleConfig(Config):
    """Epochs and the evaluation sets."""

    epochs: int = Field(100, ge=1, le=10_000)  # I.5: 100 epochs
    n_val: int = Field(5_000, ge=1, le=1_000_000)  # ours: validation examples carved from data.n_train
    eval_batch: int = Field(1_000, ge=1, le=1_000_000)  # examples per evaluation forward pass (speed only)


class Table1Claims(Config):
    """Decision settings of the claims (ours, fixed before any run)."""

    # the stage "above chance": a member's validation-chosen test accuracy exceeds chance (1/classes) by this
    # many binomial standard errors of an accuracy on the test set at chance
    chance_z: float = Field(2.0, ge=0.0, le=10.0)


class ICLAVDigitsConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=64)  # seeds per model (the seed reports one run)
    data: AVDigitsConfig = AVDigitsConfig()  # I.1: 60,000 train / 10,000 test, noise (avdigits.NOISE_DEFAULT)
    model: MultimodalCAConfig = MultimodalCAConfig()  # I.2, I.3, I.5 (inject/cross set per arm)
    baseline: BiCAConfig = BiCAConfig()  # I.4, I.5
    models: Annotated[list[Arm], Field(min_length=1), Distinct] = list(ARMS)
    train: AVDigitsTrainConfig = AVDigitsTrainConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    claims: Table1Claims = Table1Claims()
    # ours: one data set (seed index 0's) for every member, or member i's own (noise, pairs, pools from
    # seed index i). Either way member i of every model sees the same data: comparisons stay paired.
    data_per_seed: bool = False
    # torch threads on the CPU (tdlab.train.cpu.cpu_threads): d = 16, 33 tokens; one thread avoids the
    # spin-waits of a second one on the shared 2-core machine (bench/bench_avdigits.py).
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> ICLAVDigitsConfig:
        if not self.model.inject or not self.model.cross:
            raise ValueError(
                "model.inject and model.cross must stay true: the ablations are set per model (models=[...])"
            )
        if self.data.n_train - self.schedule.n_val < self.train.batch:
            raise ValueError(
                f"data.n_train - schedule.n_val = {self.data.n_train - self.schedule.n_val} must hold at "
                f"least one batch of train.batch={self.train.batch}"
            )
        return self

    @property
    def n_fit(self) -> int:
        """Examples trained on (the training set less the validation carve-out)."""
        return self.data.n_train - self.schedule.n_val

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.n_fit // self.train.batch)


def build_model(cfg: ICLAVDigitsConfig, arm: str, seeds: Sequence[int]) -> MultimodalCA | BidirectionalCA:
    """The ensemble of model ``arm`` (one of :data:`ARMS`) with one member per seed."""
    if arm == "bi-ca":
        return BidirectionalCA(cfg.baseline, seeds)
    if arm == "full":
        return MultimodalCA(cfg.model, seeds)
    return MultimodalCA(cfg.model.updated(ABLATIONS[arm]), seeds)


def chance_bound(classes: int, n_test: int, z: float) -> float:
    """The accuracy above which a member has left chance: ``1/classes + z * sqrt(p (1 - p) / n_test)`` at
    ``p = 1/classes`` (an accuracy on ``n_test`` examples at chance has that binomial standard error)."""
    p = 1.0 / classes
    return p + z * math.sqrt(p * (1 - p) / max(1, n_test))


ABOVE_CHANCE = Stage(
    "above-chance",
    "every member's validation-chosen test accuracy is above chance (1/classes) by more "
    "than claims.chance_z binomial standard errors: a model still at chance has not trained long enough "
    "for Table 1's comparison",
)

# Table 1 is a statement about corrupted avMNIST (Vielzeuf et al., 2019; App. I.1). A run on the offline stand-in
# (tdlab.tasks.avdigits: synthesised speech, no data.path) is a replication on other data: its rows are ours.
AVMNIST = Hypothesis(
    "Table 1's data: corrupted avMNIST (App. I.1), i.e. data.path names the real arrays; the offline stand-in is ours",
    lambda cfg: cfg.data.path is not None,
)
TABLE1_DIRECTION = Threshold(
    "paper",
    "the direction Table 1 reports (no margin), decided by the paired t-interval over seed indices at the "
    "validation-chosen epoch",
)


def _full_fewer_params_than_bica_expected(cfg: Any, row: Any) -> float:
    return float(row.context["bica"]) - 1


@register
class ICLAVDigits(Experiment[ICLAVDigitsConfig]):
    Config = ICLAVDigitsConfig

    # ---- run ---------------------------------------------------------------------------------------
    def data(self, cfg: ICLAVDigitsConfig, seeds: Sequence[int], progress: bool) -> tuple[FixedDataset, str]:
        """The shared fixed data set regime and the data's provenance line.

        Member ``seeds[i]`` trains on the data set of seed index ``i`` when ``cfg.data_per_seed``, else
        on seed index 0's; the regime hands the same tensors to every model's fit.
        """
        index = list(range(len(seeds))) if cfg.data_per_seed else [0] * len(seeds)
        built: dict[int, dict[str, dict[str, torch.Tensor]]] = {}
        provenance = ""
        for i in sorted(set(index)):
            data_seed = derive_seed(cfg.seed, "avdigits-data", i)
            d = avdigits.build(cfg.data, data_seed, progress)
            provenance = d.provenance
            built[i] = avdigits.splits(d, cfg.schedule.n_val, data_seed)
        by_member = {s: built[i] for s, i in zip(seeds, index, strict=True)}
        # FixedDataset asks make() for one member's splits with that member's DATASET generator; its seed
        # names the member (derive_seed is how the generator was seeded).
        from tdlab.train.data import DATASET

        by_gen_seed = {derive_seed(s, DATASET): by_member[s] for s in seeds}

        def make(g: torch.Generator, device: str | torch.device) -> dict[str, dict[str, torch.Tensor]]:
            return {k: {n: t.to(device) for n, t in v.items()} for k, v in by_gen_seed[g.initial_seed()].items()}

        return FixedDataset(
            make, cfg.train.batch, eval_splits=("val", "test"), eval_batch=cfg.schedule.eval_batch
        ), provenance

    def trainer_config(self, cfg: ICLAVDigitsConfig, device: str = "cpu") -> TrainConfig:
        """The trainer's settings: epochs as steps, evaluation every epoch; members per chunk from the
        conv tokeniser's full-resolution maps (on a CPU, a chunk's copies of them within a cache: at batch
        64, 8 members train as 4 + 4; bench/bench_ensembles.py)."""
        spe = cfg.steps_per_epoch
        chunk = auto_chunk(
            cfg.members,
            cfg.train.batch,
            cfg.train.seq_len,
            device,
            member_bytes=max(
                activation_bytes(cfg.model, cfg.train.batch), activation_bytes(cfg.baseline, cfg.train.batch)
            ),
        )
        return cfg.train.updated(
            {"steps": cfg.schedule.epochs * spe, "eval_every": spe, "log_every": spe, "chunk": chunk}
        )

    def run(self, cfg: ICLAVDigitsConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)  # shared by every model: paired by seed index
        data, provenance = self.data(cfg, seeds, ctx.progress)
        info = {
            "provenance": provenance,
            "n_fit": cfg.n_fit,
            "n_val": cfg.schedule.n_val,
            "n_test": cfg.data.n_test,
            "data_per_seed": cfg.data_per_seed,
        }
        atomic_write(ctx.writer.path / DATA_FILE, json.dumps(info, indent=1))
        tcfg = self.trainer_config(cfg, ctx.device)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            for arm in cfg.models:
                # Dropout draws from torch's global generator: seeded per model from the root seed, so a run
                # is reproducible (a member's masks depend on its ensemble; see multimodal_ca).
                torch.manual_seed(derive_seed(cfg.seed, "dropout", arm))
                trainer = Trainer(tcfg, ctx.device, ctx.progress, label=arm, objective=LastPosition())
                ctx.fit(arm, trainer, partial(build_model, cfg, arm), seeds, data)

    def trivial_error(self, cfg: ICLAVDigitsConfig, arm: str) -> float | None:
        """Chance cross-entropy log 10: a model whose test loss is not below it has not learned."""
        return math.log(cfg.model.classes)

    # ---- analysis ------------------------------------------------------------------------------------
    def parameter_counts(self, cfg: ICLAVDigitsConfig) -> dict[str, int]:
        return {arm: parameter_count(build_model(cfg, arm, [0])) for arm in ARMS}

    def measures(self, cfg: ICLAVDigitsConfig, run: RunView) -> dict[str, dict[str, list[float]]]:
        out: dict[str, dict[str, list[float]]] = {}
        for arm in cfg.models:
            if not (run.has(arm, "val_acc") and run.has(arm, "test_acc")):
                continue
            steps, val = run.curves(arm, "val_acc")
            steps_t, test = run.curves(arm, "test_acc")
            if steps.size == 0 or not np.array_equal(steps, steps_t):
                continue
            out[arm] = table1_measures(steps / cfg.steps_per_epoch, val, test)
        return out

    def measure(self, cfg: ICLAVDigitsConfig, run: RunView) -> Measurements:
        m = self.measures(cfg, run)
        counts = self.parameter_counts(cfg)
        bound = chance_bound(cfg.model.classes, cfg.data.n_test, cfg.claims.chance_z)
        out = Measurements(
            {**{arm: {**v, "params": counts[arm]} for arm, v in m.items()}, "params": counts, "chance_bound": bound}
        )
        info_path = run.path / DATA_FILE
        if info_path.is_file():
            out.values["data"] = json.loads(info_path.read_text())
        for arm, v in m.items():
            out.stage(
                arm,
                ABOVE_CHANCE,
                v["val_choice"],
                bound,
                "gt",
                evidence=f"validation-chosen test accuracy vs chance + {cfg.claims.chance_z:g} binomial se",
            )
        if "full" in m:
            full = Sample(m["full"]["val_choice"])
            for abl in ("no-injection", "no-cross", "neither"):
                if abl in m:
                    out.row(
                        "full-beats-ablations",
                        f"vs-{abl}",
                        full,
                        Sample(m[abl]["val_choice"]),
                        arms=["full", abl],
                        label=f"acc(full) − acc({abl}) > 0 (validation-chosen epoch)",
                    )
            if "bi-ca" in m:
                out.row(
                    "full-beats-bica",
                    "accuracy",
                    full,
                    Sample(m["bi-ca"]["val_choice"]),
                    arms=["full", "bi-ca"],
                    label="acc(full) − acc(bi-CA) > 0 (validation-chosen epoch)",
                )
        if "full" in cfg.models and "bi-ca" in cfg.models:
            out.row(
                "full-fewer-params-than-bica",
                "params",
                Sample([counts["full"]], deterministic=True),
                context={"bica": counts["bi-ca"]},
                label=f"params(full) = {counts['full']} < params(bi-CA) = {counts['bi-ca']}",
            )
        return out

    def notes(self, cfg: ICLAVDigitsConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        v = measured.values
        notes = []
        if "data" in v:
            info = v["data"]
            notes.append(
                f"data: {info['provenance']}; {info['n_fit']} train / {info['n_val']} validation / "
                f"{info['n_test']} test examples"
            )
        m: dict[str, dict[str, list[float]]] = {arm: v[arm] for arm in cfg.models if arm in v}
        notes.extend(self.table(cfg, m, v["params"]))
        at_chance = [arm for arm, x in m.items() if not all(a > v["chance_bound"] for a in x["val_choice"])]
        if at_chance:
            notes.append(
                f"at chance (validation-chosen test accuracy not above {v['chance_bound']:.3f}): {', '.join(at_chance)} — "
                "Table 1's comparisons need longer training (the paper profile), not a verdict."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    def table(self, cfg: ICLAVDigitsConfig, m: dict[str, dict[str, list[float]]], counts: dict[str, int]) -> list[str]:
        """Table 1 beside the seed's, one line per model (accuracies in %, mean ± sd over seeds)."""
        lines = [
            f"Table 1 ({cfg.members} seeds; ours: params | val-chosen test acc @epoch | best test acc @epoch "
            f"(optimistic: epoch chosen on test) | final acc; seed: params, best test acc @epoch)"
        ]
        for arm in cfg.models:
            sp, sa, se = PAPER_TABLE1[arm]
            if arm not in m:
                lines.append(f"{LABELS[arm]}: not measured")
                continue
            v = m[arm]
            lines.append(
                f"{LABELS[arm]}: {counts[arm]:,} (seed {sp:.3g}) | {_pm(v['val_choice'], 100)} % @{_pm(v['val_choice_epoch'])} | "
                f"{_pm(v['best_test'], 100)} % @{_pm(v['best_epoch'])} | {_pm(v['final'], 100)} % | seed {sa:.2f} % @{se}"
            )
        if "full" in m:
            for key, name in (("best_test", "best-test"), ("final", "final")):
                diffs = [
                    f"{abl} {100 * (statistics.fmean(m['full'][key]) - statistics.fmean(m[abl][key])):+.2f}"
                    for abl in ARMS[1:]
                    if abl in m
                ]
                if diffs:
                    lines.append(f"full − other, {name} accuracy (points, not judged): " + ", ".join(diffs))
        return lines

    # ---- figures -------------------------------------------------------------------------------------
    def plot(self, cfg: ICLAVDigitsConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import curve_with_band, plt, save_figure

        spe = cfg.steps_per_epoch
        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for arm in cfg.models:
            for ax, name in zip(axes[:2], ("val_acc", "test_acc"), strict=True):
                if run.has(arm, name):
                    steps, vals = run.curves(arm, name)
                    curve_with_band(ax, steps / spe, 100 * vals, LABELS[arm])
        for ax, title in zip(axes[:2], ("validation accuracy", "test accuracy"), strict=True):
            ax.axhline(10, color="k", ls=":", lw=1, label="chance")
            ax.set_xlabel("epoch")
            ax.set_ylabel("%")
            ax.set_title(title)
        axes[1].legend(fontsize=7)
        ax = axes[2]
        arms = [a for a in cfg.models if a in analysis.measurements]
        for i, arm in enumerate(arms):
            v = analysis.measurements[arm]
            for j, (key, mk) in enumerate((("val_choice", "o"), ("best_test", "^"), ("final", "s"))):
                ys = 100 * np.asarray(v[key])
                ax.scatter(
                    np.full(ys.shape, i + 0.2 * (j - 1)),
                    ys,
                    marker=mk,
                    s=18,
                    color=f"C{j}",
                    label=key if i == 0 else None,
                )
            ax.scatter(
                [i], [PAPER_TABLE1[arm][1]], marker="*", s=80, color="k", label="seed (best test)" if i == 0 else None
            )
        ax.set_xticks(range(len(arms)), [a for a in arms], rotation=20, fontsize=8)
        ax.set_ylabel("test accuracy %")
        ax.set_title("Table 1: per seed (val-chosen, best-test, final)")
        ax.legend(fontsize=7)
        fig.suptitle(f"icl-avdigits — {cfg.members} seeds per model")
        return [save_figure(fig, figdir / "table1_accuracy.png")]


def _pm(values: Sequence[float], scale: float = 1.0) -> str:
    v = [scale * x for x in values]
    if not v:
        return "nan"
    if len(v) == 1:
        return f"{v[0]:.2f}"
    return f"{statistics.fmean(v):.2f} ± {statistics.stdev(v):.2f}"
