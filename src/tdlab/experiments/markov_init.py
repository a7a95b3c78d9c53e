"""``markov-init``: seed 000 (Local to Global), App. A.3.2 and Figure 4.

A single-layer transformer is trained on a binary first-order Markov chain from two
initialisations: the standard Gaussian one (sigma = 0.02 for every parameter) and the seed's
proposed one (e = 0.5 in every coordinate, W_1 = 1, W_2 = -1, i.e. a point of I_* in Fig. 1d).
Fig. 4 shows, for (p, q) = (0.5, 0.8), the standard init ending at the unigram loss H(pi) (the local
minimum of Thm. 2, since p + q > 1) and the proposed init at the bigram loss (entropy rate, the
global minimum). Both architectures are run: the Sec. 2 equations (``sec2``) and the GPT-2 variant of
Table 1 (``gpt2``).

Claims are computed per member from the run's own test losses (fresh samples); the expected values
come from (p, q) through :mod:`tdlab.tasks.markov`: for p + q > 1 Thm. 2 predicts the local minimum
H(pi) from a small init, for p + q < 1 Thm. 8 predicts a global minimum (entropy rate). Measured and
reported besides: the step at which each member leaves the H(pi) plateau, if it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from tdlab.atlas.axes import AtlasAxes, AtlasAxis
from tdlab.claims import Claim, end_drift
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.report.figures import curve_with_band, member_curves, plt, reference_lines, save_figure
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain, entropy_rate, marginal_entropy
from tdlab.train.trainer import TrainConfig, Trainer

__all__ = ["ChainConfig", "MarkovInitConfig", "MarkovInit", "plateau_escape_step", "expected_small_init_loss"]

Arch = Literal["sec2", "gpt2"]
Init = Literal["standard", "local-to-global"]


class ChainConfig(Config):
    """Binary first-order Markov chain (Sec. 2)."""

    p: float = Field(0.5, gt=0.0, lt=1.0)  # Fig. 4: p = 0.5
    q: float = Field(0.8, gt=0.0, lt=1.0)  # Fig. 4: q = 0.8


class ClaimConfig(Config):
    """Tolerances of the computed verdicts."""

    # Scientific tolerance on the members' mean gap to the reference predictor (nats); the seed-to-seed
    # spread is added on top by the verdict (tdlab.claims).
    tol_nats: float = Field(0.01, gt=0.0, le=1.0)
    # A member has left the H(pi) plateau at the first evaluation where its test loss is below
    # H(pi) - escape_fraction * (H(pi) - entropy rate).
    escape_fraction: float = Field(0.25, gt=0.0, lt=1.0)


class MarkovInitConfig(ExperimentConfig):
    members: int = Field(5, ge=1, le=4096)  # Table 2: 3 or 5 repetitions
    task: ChainConfig = ChainConfig()
    model: GPTConfig = GPTConfig(d=8)  # Table 2 grid {4, ..., 64}; A.3 uses d = 8. arch/init set per arm.
    archs: list[Arch] = ["sec2", "gpt2"]  # Sec. 2 equations and Table 1 GPT-2
    inits: list[Init] = ["standard", "local-to-global"]  # App. A.3.2
    train: TrainConfig = TrainConfig()  # Table 2: AdamW (0.9, 0.95), lr 1e-3, cosine, wd 1e-3, batch 16, 8000 its
    claims: ClaimConfig = ClaimConfig()

    @model_validator(mode="after")
    def _check(self) -> MarkovInitConfig:
        if not self.archs or not self.inits:
            raise ValueError("archs and inits must each list at least one value")
        if len(set(self.archs)) != len(self.archs) or len(set(self.inits)) != len(self.inits):
            raise ValueError("archs and inits must not repeat values")
        return self

    def arm_model(self, arch: str, init: str) -> GPTConfig:
        return self.model.updated({"arch": arch, "init": init, "max_len": self.train.seq_len})


def plateau_escape_step(steps: np.ndarray, losses: np.ndarray, threshold: float) -> int | None:
    """First evaluation step > 0 whose loss is below ``threshold`` (None if it never is)."""
    below = np.nonzero((steps > 0) & (losses < threshold))[0]
    return int(steps[below[0]]) if below.size else None


def expected_small_init_loss(p: float, q: float) -> tuple[float, str]:
    """What the canonical theory predicts for a small Gaussian init, from (p, q)."""
    if p + q > 1:
        return marginal_entropy(p, q), "ends at the marginal entropy H(π), the local minimum (Thm. 2: p+q>1, Fig. 4)"
    if p + q < 1:
        return entropy_rate(p, q), "ends at the entropy rate, a global minimum (Thm. 8: p+q<1)"
    return entropy_rate(p, q), "ends at the entropy rate = H(π) (p+q=1: the chain is i.i.d.)"


@register
class MarkovInit(Experiment):
    name = "markov-init"
    paper = "000 Local to Global"
    figure = "Fig. 4 (App. A.3.2)"
    description = (
        "Single-layer transformer on a binary first-order Markov chain from the standard Gaussian "
        "init and the seed's proposed init (e=0.5, W1=1, W2=-1), for the Sec. 2 model and the GPT-2 "
        "variant. Claims: the proposed init ends at the entropy rate (global minimum); a small "
        "standard init ends where Thm. 2/8 place it (H(π) when p+q>1). Plateau-escape steps measured."
    )
    Config = MarkovInitConfig
    # Atlas (issue 18): Thms 2/8 split the (p, q) square at p + q = 1 (the seed's Fig. 1 phase diagram);
    # no grid point lies on that line, where H(π) = entropy rate and the claims cannot tell the minima
    # apart. The quick range keeps the seed's task and model and shortens training.
    atlas_axes = AtlasAxes(
        axes=(AtlasAxis("task.p", (0.2, 0.4, 0.6, 0.8), label="p"),
              AtlasAxis("task.q", (0.1, 0.3, 0.7, 0.9), label="q"),
              AtlasAxis("train.steps", (2000, 8000), quick=(1000,), label="steps")),
        profile_set={"quick": {"train.seq_len": 64, "train.eval_batches": 2}},
        why="Measured (README): the proposed init reaches the entropy rate everywhere tried, while the standard "
            "init's verdicts depend on the horizon (stuck at H(π) at 2000 steps for sec2, at the global minimum "
            "after 8000) and on which side of p + q = 1 the chain lies (Thm. 2 vs Thm. 8).",
    )
    arm_fields = {"model.arch": "archs=[...]", "model.init": "inits=[...]", "model.max_len": "train.seq_len"}
    profiles = {
        # 2 CPU cores, a few minutes: the seed's Fig. 4 horizon is long; we keep d, batch and the
        # optimiser and shrink the schedule and sequence length.
        "quick": {"members": 3, "train": {"steps": 2000, "seq_len": 256, "eval_every": 100, "eval_batches": 4}},
        # Table 2: 8000 iterations, sequence length 1024 (grid {512, 1024, 2048}), d = 8, 5 repetitions.
        "paper": {"members": 5, "train": {"steps": 8000, "seq_len": 1024, "eval_every": 200, "eval_batches": 8}},
    }

    @staticmethod
    def arms(cfg: MarkovInitConfig) -> list[tuple[str, str]]:
        return [(a, i) for a in cfg.archs for i in cfg.inits]

    def run(self, cfg: MarkovInitConfig, ctx: RunContext) -> None:
        task = MarkovChain(cfg.task.p, cfg.task.q)
        seeds = member_seeds(cfg.seed, cfg.members)
        for arch, init in self.arms(cfg):
            mcfg = cfg.arm_model(arch, init)
            trainer = Trainer(cfg.train, ctx.device, ctx.progress, label=f"{arch}/{init}")
            ctx.fit(f"{arch}/{init}", trainer, lambda s, m=mcfg: GPT(m, s), seeds, task)

    def trivial_error(self, cfg: MarkovInitConfig, arm: str) -> float:
        return float(np.log(2))  # the uniform predictor over {0, 1}

    def analyse(self, cfg: MarkovInitConfig, run: Run) -> Analysis:
        """Three paper statements, one row per architecture:

        * the proposed init ends at the global minimum: final gap to the Bayes (bigram) predictor on
          the same evaluation batches ≈ 0 (the finite-sample reference of the entropy rate);
        * the standard init ends where Thms. 2/8 place it: gap to the unigram predictor (p+q>1, the
          local minimum H(π)) or to the Bayes predictor (p+q<1) ≈ 0 — a claim about *not* learning
          the bigram law, so the gate only asks that the arm moved;
        * the standard init leaves the H(π) plateau later than the proposed one (paired over members;
          a member that never leaves counts as leaving at the horizon, a lower bound).
        End-state rows whose gap still moves by more than the tolerance over the last 10% of training
        are not resolved.
        """
        p, q = cfg.task.p, cfg.task.q
        h_rate, h_pi = entropy_rate(p, q), marginal_entropy(p, q)
        threshold = h_pi - cfg.claims.escape_fraction * (h_pi - h_rate)
        metrics = run.metrics()
        out = Analysis(measurements={"entropy_rate": h_rate, "marginal_entropy": h_pi, "escape_threshold": threshold})
        tol = cfg.claims.tol_nats
        proposed = out.group("proposed-init-ends-at-global-minimum",
                             "The proposed init (e=0.5, W1=1, W2=-1) ends at the entropy rate, the global minimum (App. A.3.2, Fig. 4)")
        std_target = "unigram" if p + q > 1 else "bayes"
        std_statement = expected_small_init_loss(p, q)[1]
        standard = out.group("standard-init-ends-at-theory-limit",
                             f"A small standard init (σ={cfg.model.init_std}) {std_statement}")
        later = out.group("standard-init-leaves-plateau-later",
                          "The standard init stays on the H(π) plateau longer than the proposed init (Fig. 4)")
        horizon = cfg.train.steps + cfg.train.eval_every  # never left: censored at the horizon
        escapes_by_arm = {}
        for arch, init in self.arms(cfg):
            arm = f"{arch}/{init}"
            steps, values = member_curves(metrics, arm, "test_loss")
            target = "bayes" if init == "local-to-global" else std_target
            _, ref = member_curves(metrics, arm, f"test_loss@{target}")
            gap = values - ref
            escapes = [plateau_escape_step(steps, v, threshold) for v in values]
            escapes_by_arm[arm] = [float(e) if e is not None else float(horizon) for e in escapes]
            out.measurements[arm] = {
                "final_test_loss": values[:, -1].tolist(),
                f"final_gap_to_{target}": gap[:, -1].tolist(),
                "plateau_escape_step": escapes,
                "escaped_fraction": float(np.mean([e is not None for e in escapes])),
            }
            group = proposed if init == "local-to-global" else standard
            row = group.value(arch, gap[:, -1], 0.0, tol, "close", arms=[arm], drift=end_drift(steps, gap),
                              learning_required=(init == "local-to-global"), unit=" nats",
                              statement=f"{arch}: final test loss − the {target} predictor's loss on the same batches ≈ 0")
            out.notes.append(self._finding(arm, row, values[:, -1], escapes, cfg.train.steps, h_pi, h_rate))
        for arch in cfg.archs:
            std, l2g = f"{arch}/standard", f"{arch}/local-to-global"
            if std in escapes_by_arm and l2g in escapes_by_arm:
                later.compare(arch, escapes_by_arm[std], escapes_by_arm[l2g], "gt", paired=True, arms=[std, l2g],
                              learning_required=False, unit=" steps",
                              statement=f"{arch}: plateau-escape step, standard − proposed > 0")
        if h_pi - h_rate < 2 * tol:
            out.notes.append(f"H(π) − entropy rate = {h_pi - h_rate:.4f} nats is below twice the tolerance "
                             f"({tol}): at these (p, q) the claims cannot tell the two minima apart.")
        return out

    @staticmethod
    def _finding(arm: str, row: Claim, final: np.ndarray, escapes: list[int | None], steps: int, h_pi: float, h_rate: float) -> str:
        n = len(escapes)
        left = [e for e in escapes if e is not None]
        mean = float(np.mean(final))
        where = "the entropy rate" if abs(mean - h_rate) < abs(mean - h_pi) else "H(π)"
        esc = (f"{len(left)}/{n} members left the H(π) plateau (steps {left})" if left
               else f"no member left the H(π) plateau within {steps} steps")
        return (f"{arm}: final test loss {mean:.4f} ± {float(np.std(final)):.4f} nats, nearer {where}; {esc}; "
                f"end-state claim {row.verdict}.")

    def plot(self, cfg: MarkovInitConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        metrics = run.metrics()
        h_rate, h_pi = analysis.measurements["entropy_rate"], analysis.measurements["marginal_entropy"]
        fig, axes = plt.subplots(1, len(cfg.archs), figsize=(5.5 * len(cfg.archs), 4), squeeze=False)
        for ax, arch in zip(axes[0], cfg.archs):
            for init in cfg.inits:
                steps, values = member_curves(metrics, f"{arch}/{init}", "test_loss")
                curve_with_band(ax, steps, values, f"{init} init")
            reference_lines(ax, {f"H(π) = {h_pi:.3f} (unigram)": h_pi, f"entropy rate = {h_rate:.3f} (bigram)": h_rate})
            ax.set_ylim(h_rate - 0.03, max(np.log(2), h_pi) + 0.05)
            ax.set_xlabel("iteration")
            ax.set_ylabel("test loss (nats)")
            ax.set_title(f"{arch}: p={cfg.task.p}, q={cfg.task.q}, d={cfg.model.d}, N={cfg.train.seq_len}")
            ax.legend(fontsize=8)
        fig.suptitle(f"Fig. 4 — mean test loss over {cfg.members} members (band: min–max)")
        return [save_figure(fig, figdir / "fig4_test_loss.png")]
