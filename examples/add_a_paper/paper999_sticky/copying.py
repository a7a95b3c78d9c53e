"""``sticky-copy``: seed 999 (an example paper), "Eq. 1": a one-layer transformer trained on sticky tokens
ends at the entropy rate. In tdlab: ``src/tdlab/experiments/paper999_sticky/copying.py``.

An experiment declares its claims as data, trains through ``RunContext.fit`` (``run``), and returns typed
measurements (``measure``): it never decides a verdict. ``tdlab.claims.judge`` does, behind the health
gate (every arm trained: its final test loss below the trivial predictor's, log V here).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from paper999_sticky.task import StickyTokens, entropy_rate
from tdlab.claims import ClaimSpec, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Calibration, Threshold
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.manifest import Setting
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.seeding import member_seeds
from tdlab.train.trainer import TrainConfig, Trainer

ARM = "gpt2"


class StickyConfig(Config):
    vocab: int = Field(4, ge=2, le=64)  # "Sec. 2" of the example paper: V = 4
    r: float = Field(0.6, ge=0.0, lt=1.0)  # repeat probability


class StickyClaims(Config):
    tol_nats: float = Field(0.02, gt=0.0, le=1.0)  # scientific tolerance on the gap to the Bayes loss


class StickyCopyConfig(ExperimentConfig):
    task: StickyConfig = StickyConfig()
    model: GPTConfig = GPTConfig(arch="gpt2", vocab=4, d=16)
    train: TrainConfig = TrainConfig(lr=1e-2)
    claims: StickyClaims = StickyClaims()


def _bayes_against_uniform(cfg: StickyCopyConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted end states at the run's members: at the Bayes predictor's loss (gap 0) and at the uniform
    predictor's (gap log V − entropy rate), the alternative a model that learnt nothing ends at."""
    gap = float(np.log(cfg.task.vocab)) - entropy_rate(cfg.task.vocab, cfg.task.r)
    return planted_pair(0.0, gap, cfg.claims.tol_nats / 5, cfg.members)


CLAIMS = (
    ClaimSpec(
        "ends-at-entropy-rate",
        "A one-layer transformer trained on sticky tokens ends at the entropy rate (seed 999, Eq. 1)",
        # what the paper says: its words and place, the kind of statement, where the threshold comes from
        quote="the trained model's loss reaches the entropy rate of Eq. 1",
        where="Eq. 1 of the example paper",
        form="settings",
        threshold=Threshold(
            "ours",
            "claims.tol_nats = 0.02 nats around the Bayes predictor's loss on the same batches",
            Calibration(
                "planted",
                "members at the Bayes predictor's loss hold, members at the uniform predictor's fail",
                plant=_bayes_against_uniform,
            ),
        ),
        test="value",
        relation="close",
        quantity="final test loss − the Bayes predictor's loss on the same batches, nats",
        expected=0.0,
        tolerance="claims.tol_nats",  # a config path: the run's own tolerance
        horizon="budget",
        unit=" nats",
    ),
    ClaimSpec(
        "bayes-loss-is-entropy-rate",
        "The Bayes predictor's loss on the evaluation batches is the closed-form entropy rate",
        kind="sanity",
        test="value",
        relation="close",
        quantity="final test loss of the Bayes predictor, nats",
        expected=lambda cfg, row: entropy_rate(cfg.task.vocab, cfg.task.r),  # theory of the setting that ran
        tolerance=0.05,  # sampling error of a few evaluation batches
        horizon="static",
        learning_required=False,
        unit=" nats",
    ),
)


@register
class StickyCopy(Experiment[StickyCopyConfig]):
    name = "sticky-copy"
    paper = "999 Sticky tokens (an example)"
    figure = "Eq. 1"
    description = "One-layer GPT-2 on sticky tokens; the final test loss against the entropy rate."
    Config = StickyCopyConfig
    claims = CLAIMS
    # every setting the paper states, by config field, with its place (a run at these is at its settings)
    manifest: ClassVar[dict[str, Setting]] = {"task.vocab": Setting(4, "Sec. 2"), "task.r": Setting(0.6, "Sec. 2")}
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {"members": 3, "train": {"steps": 150, "seq_len": 32, "eval_every": 25, "eval_batches": 16}},
        "paper": {"members": 5, "train": {"steps": 2000, "seq_len": 128, "eval_every": 100}},
    }

    def run(self, cfg: StickyCopyConfig, ctx: RunContext) -> None:
        task = StickyTokens(cfg.task.vocab, cfg.task.r)
        model = cfg.model.updated({"vocab": cfg.task.vocab, "max_len": cfg.train.seq_len})
        trainer = Trainer(cfg.train, ctx.device, ctx.progress, label=ARM)
        ctx.fit(ARM, trainer, partial(GPT, model), member_seeds(cfg.seed, cfg.members), task)

    def trivial_error(self, cfg: StickyCopyConfig, arm: str) -> float:
        return float(np.log(cfg.task.vocab))  # the uniform predictor

    def measure(self, cfg: StickyCopyConfig, run: RunView) -> Measurements:
        _, loss = run.curves(ARM, "test_loss")  # (members, evaluations)
        _, bayes = run.curves(ARM, "test_loss@bayes")
        out = Measurements({"entropy_rate": entropy_rate(cfg.task.vocab, cfg.task.r)})
        out.row("ends-at-entropy-rate", ARM, Sample(loss[:, -1] - bayes[:, -1]), arms=[ARM])
        out.row("bayes-loss-is-entropy-rate", ARM, Sample(bayes[:, -1]), arms=[ARM])
        return out

    def plot(self, cfg: StickyCopyConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import curve_with_band, plt, reference_lines, save_figure

        fig, ax = plt.subplots(figsize=(5, 3.5))
        curve_with_band(ax, *run.curves(ARM, "test_loss"), "test loss")
        reference_lines(ax, {"entropy rate": analysis.measurements["entropy_rate"]})
        ax.set(xlabel="step", ylabel="nats", title=f"{self.name}: mean of {cfg.members} members (band: min–max)")
        ax.legend(fontsize=8)
        return [save_figure(fig, figdir / "test_loss.png")]
