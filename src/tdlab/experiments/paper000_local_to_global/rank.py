"""``markov-rank``: seed 000 (Local to Global), App. A.3.1, Figure 3 and Figure 6 (App. N), App. C.

Two arms of the Sec. 2 single-layer transformer (``GPT(arch="sec2")``) trained on the binary
first-order chain (p, q) = (0.2, 0.3):

* ``standard`` (Fig. 3, "Low-rank at convergence"): every parameter ~ N(0, 0.001²); the trained
  weights are read for the low-rank structure Fig. 3 shows.
* ``rank-one`` (Fig. 6, "Low-rank initialization remains low-rank during training"): "we randomly
  initialize the weight parameters as rank-one matrices and the embeddings on the hypercube {±1}^d
  ... train them without any low-rank restrictions ... the parameters still stay low-rank". The
  seed gives no formula; ours (:func:`tdlab.models.init.rank_one_init_`) is built from App. C's structure.
  Under SGD and AdamW alike it stays exactly rank one *by construction* (every gradient keeps the α
  factor, and AdamW's elementwise scaling does too for α ∈ {±1}^d), so Fig. 6 is a sanity check here
  (to round-off), not a finding.

Measured from the stored parameters (final ``arrays/ARM.safetensors``, initial ``ARM@init``) and from σ₂/σ₁ recorded
every ``probe_every`` steps (:class:`~.common.low_rank.TrajectoryProbe`). Its readings of the seed and its claims
are declared in the seed's ``experiments.yaml`` (``tdlab explain markov-rank``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ClaimSpec, GroupResult, Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Calibration, Horizon, Hypothesis, Kind, Provenance, Threshold
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper000_local_to_global.common.low_rank import CLAIMED, RankOneInitConfig, TrajectoryProbe
from tdlab.experiments.paper000_local_to_global.common.plateau import LEFT_PLATEAU, plateau_escape
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.init import rank_one_init_
from tdlab.probes.sec2_weights import MATRICES, app_c_structure, bias_step_excess, snapshot, trained_vs_init
from tdlab.probes.spectrum import abs_cosine, hypercube_spread, sv_ratio
from tdlab.report.standard_figures import Curves, Line, Matrices, Matrix, Panel
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import ChainConfig, MarkovChain, entropy_rate, marginal_entropy
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer

Arm = Literal["standard", "rank-one"]
Arms = Annotated[list[Arm], Field(min_length=1), Distinct]
OTHERS_FIG3 = ("W_Q", "W_K", "W_2")  # App. A.3.1: "the same conclusion for other weight matrices W_{K,Q}, W_2"

# SGD step size when optimizer=sgd and no lr is given: not stated by the seed; the smallest of {0.1, 0.3,
# 1.0} whose test loss reached the entropy rate within 200 of 800 iterations (N = 256, d = 8), chosen on
# the test loss alone before any rank was measured.
SGD_LR = 0.3


# Nested defaults live on subclasses: a profile or --set touching a section is merged into the class
# defaults (tdlab.config.build_config), so instance defaults would be lost.
class RankChainConfig(ChainConfig):
    """Binary first-order chain of App. A.3.1."""

    p: float = Field(0.2, gt=0.0, lt=1.0)  # App. A.3.1 (Fig. 3): p = 0.2
    q: float = Field(0.3, gt=0.0, lt=1.0)  # App. A.3.1 (Fig. 3): q = 0.3


class RankModelConfig(GPTConfig):
    """The Sec. 2 model of App. A.3.1."""

    arch: Literal["sec2", "gpt2"] = "sec2"  # App. A.3.1: "the single-layer transformer as defined in Sec. 2"
    d: int = Field(8, ge=2, le=4096)  # App. A.3.1: embedding dimension d = 8
    init_std: float = Field(0.001, gt=0.0, le=10.0)  # App. A.3.1: "standard deviation 0.001 (Pagliardini, 2023)"


class RankTrainConfig(TrainConfig):
    """App. A.3.1: batch 16, 800 iterations, N = 1024; optimiser and the rest as Table 2 (AdamW; see the
    module docstring for A.3.1's SGD)."""

    steps: int = Field(800, ge=1, le=10_000_000)  # App. A.3.1: t = 800 iterations
    batch: int = Field(16, ge=1, le=1_000_000)  # App. A.3.1: batch size B = 16
    seq_len: int = Field(1024, ge=2, le=65536)  # App. A.3.1: N = 1024
    # Table 2 (and the authors' code): AdamW (0.9, 0.95), cosine, wd 1e-3. App. A.3.1's text says SGD
    # without a step size: "sgd" is an option whose lr (0.3 unless set, our choice) is not stated by the seed.
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(1e-3, gt=0.0, le=100.0)  # Table 2: 1e-3 (AdamW); with optimizer sgd and no lr given: 0.3

    @model_validator(mode="before")
    @classmethod
    def _sgd_lr(cls, data: Any) -> Any:
        """SGD without an explicit lr gets 0.3 (Table 2's 1e-3 is AdamW's; at 1e-3 SGD leaves a
        σ = 0.001 init where it is in 800 steps)."""
        if isinstance(data, dict) and data.get("optimizer") == "sgd" and "lr" not in data:
            return {**data, "lr": SGD_LR}
        return data

    eval_every: int = Field(50, ge=1)  # our choice: 16 evaluations over 800 steps
    eval_batches: int = Field(8, ge=1, le=100_000)  # our choice: 8 x 16 x N fresh tokens per evaluation


class RankClaimConfig(Config):
    """Scientific tolerances of the verdicts, set before any run (never tuned to a result). The
    expected values are App. C's exact structure (σ₂/σ₁ = 0, |cos| = 1, spread 0); the members' spread
    is added on top by the verdict (t-interval of the member mean, :mod:`tdlab.claims`)."""

    # "Approximately rank-one": sigma2/sigma1 <= 0.1, the second direction carrying <= 1% of the
    # first's energy. Not derivable from the seed (App. C's optimum is exactly rank one); a scientific
    # tolerance. For scale: a Gaussian 8x8 matrix has sigma2/sigma1 ~ 0.8, and the init noise left in a
    # trained matrix puts a floor of about sigma1(init)/sigma1(final) under it (reported per matrix as
    # ``init_noise_floor``; where it exceeds ratio_max the claim cannot be met by this training).
    ratio_max: float = Field(0.1, gt=0.0, lt=1.0)
    # "Same as the embedding vector": |cos| >= 0.9 (angle <= 26 degrees), a scientific tolerance. Two
    # random unit vectors in R^8 have |cos| ~ 0.28 on average.
    cos_min: float = Field(0.9, gt=0.0, le=1.0)
    # "All entries in {±1} up to a scaling": std(|e_i|)/mean(|e_i|) <= 0.25, a scientific tolerance:
    # 0 on the hypercube, ~0.76 for a Gaussian vector (half-normal magnitudes), 0.25 a third of that.
    spread_max: float = Field(0.25, gt=0.0, le=10.0)
    # "At convergence": final gap to the Bayes (bigram) predictor on the same evaluation batches within
    # 0.01 nats (Thm. 8, p+q<1: the global minimum), as in markov-init; also the stages' "at a minimum".
    tol_nats: float = Field(0.01, gt=0.0, le=1.0)
    # markov-init's plateau-escape level, H(π) − escape_fraction · (H(π) − entropy rate): a p+q<1 member
    # below it has left the unigram stage (the stage "fig3-converged" needs before it can fail).
    escape_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    # An exactly rank-one matrix stored in float32 has sigma2/sigma1 at round-off (~1e-7): the sanity
    # checks of the Fig. 6 init and of its staying rank one (by construction) allow 1e-5.
    roundoff: float = Field(1e-5, gt=0.0, lt=1.0)
    # App. C "p ≈ e/2": p/e = -<mean_n p_n, e>/|e|^2 within 0.5 ± 0.1 (±20%), a scientific tolerance (App. C
    # says only "≈" and "e > p").
    position_ratio_tol: float = Field(0.1, gt=0.0, le=0.5)
    # App. C "p_n constant across positions": sqrt(mean_n |p_n - mean p|^2)/|mean p| <= 0.25 (the
    # hypercube spread's scale: a quarter of the mean's length).
    position_spread_max: float = Field(0.25, gt=0.0, le=10.0)
    # App. C "<v, α> ≈ 0 and hence y_n = x_n": the attention path's gain α^T W_O W_V α (α = e/|e|; the
    # attention adds gain × a weighted mean of the x_i to x_n) within ±0.1, a scientific tolerance.
    attention_gain_max: float = Field(0.1, gt=0.0, le=10.0)
    # "One additional step is usually sufficient" (Sec. 3): after one bias step the loss is within 1e-3
    # nats of min_b L(θ, b), a tenth of tol_nats (the scale at which this experiment compares losses).
    tol_bias: float = Field(1e-3, gt=0.0, le=1.0)
    # Step of the extra bias step (not stated by the seed): 1/sup_z sigma'(z) = 4, the largest step of
    # guaranteed descent on a logistic loss in one scalar.
    bias_lr: float = Field(4.0, gt=0.0, le=100.0)
    # Fresh sequences (batch x seq_len each) on which the bias excess is measured.
    bias_batches: int = Field(4, ge=1, le=10_000)


class MarkovRankConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # the seed shows one run per figure; Table 2: 3 or 5 repetitions
    task: RankChainConfig = RankChainConfig()
    model: RankModelConfig = RankModelConfig()
    train: RankTrainConfig = RankTrainConfig()
    arms: Arms = ["standard", "rank-one"]  # Fig. 3 (standard init) and Fig. 6 (rank-one init)
    rank_one: RankOneInitConfig = RankOneInitConfig()
    # sigma2/sigma1 recorded every this many training steps (our choice; the authors' code saved the
    # matrices every 100 iterations). The end of training is always measured from the final weights.
    probe_every: int = Field(25, ge=1)
    claims: RankClaimConfig = RankClaimConfig()
    # torch threads on CPU (tdlab.train.cpu): d = 8 tensors gain nothing from a second thread and
    # lose much to spin-waits on shared cores. None: leave torch's default.
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> MarkovRankConfig:
        m = self.model
        if m.arch != "sec2" or m.layers != 1 or m.heads != 1 or not m.tie_weights or not m.out_proj:
            raise ValueError(
                "model must be the Sec. 2 single-layer model: arch 'sec2', layers 1, heads 1, tie_weights and out_proj true"
            )
        if m.positions != "absolute" or m.init != "standard":
            raise ValueError(
                "model.positions must be 'absolute' and model.init 'standard' (the rank-one arm sets its own init)"
            )
        return self

    def arm_model(self) -> GPTConfig:
        return self.model.updated({"max_len": self.train.seq_len})


# ----------------------------------------------------------------------------------------------
# Stages and claims


AT_A_MINIMUM = Stage(
    "at-a-minimum",
    "the member's final test loss is within tol_nats of the Bayes (entropy rate) or the unigram (H(π)) "
    "predictor's loss on the same batches: training ended at one of Thm. 1's minima ('at convergence', Fig. 3)",
)
AT_GLOBAL_MINIMUM = Stage(
    "at-global-minimum",
    "the member's final test loss is within tol_nats of the Bayes predictor's loss on the same "
    "batches: it is at a global minimum, whose structure App. C describes",
)
STALE_BIAS = Stage(
    "stale-bias",
    "before the step, the member's loss is at least tol_bias above min_b L(θ, b): the bias is stale, "
    "so there is something for one step to do",
)


def _cos_tolerance(cfg: MarkovRankConfig, row: Any) -> float:
    return 1.0 - cfg.claims.cos_min


# ----------------------------------------------------------------------------------------------
# Calibration: planted members at App. C's exact structure against the structure-free Gaussian init
#
# Fig. 3 contrasts the trained weights with "a standard gaussian initialization"; the violating plant of each
# structural statement is the statistic's median over i.i.d. Gaussian draws at the run's shapes (d = model.d,
# r = 4d; N = train.seq_len), the smaller one where a claim covers several shapes (the harder case to tell
# apart). Seeded, so the plants are deterministic.

_NULL_DRAWS = 2048


def _gaussian(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _null_ratio(shapes: tuple[tuple[int, int], ...], product: bool = False) -> float:
    """Median σ₂/σ₁ of a Gaussian matrix of each shape (``product``: of the product of two d × d ones, as
    W_O W_V and W_Q^T W_K are), the smallest over the shapes."""
    out = []
    for i, (m, n) in enumerate(shapes):
        w = _gaussian(_NULL_DRAWS, m, n, seed=i)
        if product:
            w = w @ _gaussian(_NULL_DRAWS, n, n, seed=100 + i)
        out.append(float(sv_ratio(w).median()))
    return min(out)


def _null_cos(dim: int, best_of: int = 1) -> float:
    """Median |cos| of a random direction in R^dim with a fixed one (the best of ``best_of`` directions)."""
    e = _gaussian(_NULL_DRAWS, dim, seed=7)
    c = torch.stack([abs_cosine(_gaussian(_NULL_DRAWS, dim, seed=10 + k), e) for k in range(best_of)]).amax(0)
    return float(c.median())


def _rank_plant(shapes: Any, product: bool = False) -> Any:
    def plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
        d = cfg.model.d
        null = _null_ratio(shapes(d), product)
        return planted_pair(0.0, null, cfg.claims.ratio_max / 5, cfg.members)

    return plant


def _cos_plant(dim: Any, best_of: int = 1) -> Any:
    def plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
        null = _null_cos(dim(cfg.model.d), best_of)
        return planted_pair(1.0, null, (1.0 - cfg.claims.cos_min) / 5, cfg.members)

    return plant


def _spread_plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
    null = float(hypercube_spread(_gaussian(_NULL_DRAWS, cfg.model.d, seed=3)).median())
    return planted_pair(0.0, null, cfg.claims.spread_max / 5, cfg.members)


def _position_ratio_plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
    # Gaussian p_n and e share no direction: p/e = -<p̄, e>/|e|² is 0 in expectation.
    return planted_pair(0.5, 0.0, cfg.claims.position_ratio_tol / 5, cfg.members)


def _position_spread_plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
    wpe = _gaussian(256, cfg.train.seq_len, cfg.model.d, seed=5)
    pbar = wpe.mean(1)
    null = float(((wpe - pbar[:, None]).pow(2).sum(2).mean(1).sqrt() / pbar.norm(dim=1)).median())  # ≈ √N
    return planted_pair(0.0, null, cfg.claims.position_spread_max / 5, cfg.members)


def _converged_plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
    """At the predictor Thm. 2/8 names (gap 0) against the other minimum (gap ±(H(π) − entropy rate))."""
    p, q = cfg.task.p, cfg.task.q
    gap = marginal_entropy(p, q) - entropy_rate(p, q)
    return planted_pair(0.0, gap if p + q < 1 else -gap, cfg.claims.tol_nats / 5, cfg.members)


def _bias_plant(cfg: MarkovRankConfig, context: Any) -> tuple[Sample, Sample]:
    """One step that fits the bias (excess 0) against one that leaves the standard init's stale bias where it
    is: from σ = 0.001 the model predicts ≈ uniformly, so the excess is KL(π ‖ uniform) = log 2 − H(π)."""
    excess = math.log(2) - marginal_entropy(cfg.task.p, cfg.task.q)
    return planted_pair(0.0, excess, cfg.claims.tol_bias / 5, cfg.members)


_PLANT_TEST = "tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases"


def _ours(note: str, calibration: str | None = None, plant: Any = None) -> Threshold:
    if calibration is None:
        return Threshold("ours", note)
    return Threshold("ours", note, Calibration("planted", calibration, plant=plant, test=_PLANT_TEST))


def _ratio_threshold(what: str, plant: Any) -> Threshold:
    return _ours(
        "claims.ratio_max = 0.1: 'approximately rank-one' read as σ₂/σ₁ ≤ 0.1 (App. C's optimum is exactly rank one)",
        f"members at σ₂/σ₁ = 0 ± ratio_max/5 hold; members at the median σ₂/σ₁ of {what} (0.70-0.82) fail",
        plant,
    )


def _cos_threshold(what: str, plant: Any) -> Threshold:
    return _ours(
        "claims.cos_min = 0.9: 'same as the embedding vector' read as |cos| ≥ 0.9 (26°)",
        f"members at |cos| = 1 ± (1 − cos_min)/5 hold; members at the median |cos| of {what} fail",
        plant,
    )


# App. C: "the low-rank structure for the global minima found by SGD consistently across multiple runs when
# p + q < 1" (recalled from Makkuva et al., 2024).
APP_C_SIDE = Hypothesis(
    "p + q < 1 (App. C: the structure of the global minima found when p + q < 1)",
    lambda cfg: cfg.task.p + cfg.task.q < 1,
)


def _rank_claim(
    id: str,
    statement: str,
    *,
    horizon: Horizon = "convergence",
    stage: Stage | None = AT_A_MINIMUM,
    quantity: str = "σ₂/σ₁ of the trained matrix (members' mean, t-interval; the drift of its recorded "
    "trajectory over the last tenth of the learning-rate integral)",
    kind: Kind = "paper",
    tolerance: str = "claims.ratio_max",
    **paper: Any,
) -> ClaimSpec:
    """ "Approximately rank one": σ₂/σ₁ ≈ 0 (App. C: exactly rank one) within ``tolerance``."""
    return ClaimSpec(
        id,
        statement,
        kind=kind,
        test="value",
        relation="le",
        quantity=quantity,
        expected=0.0,
        tolerance=tolerance,
        horizon=horizon,
        stage=stage,
        **paper,
    )


def _along_e_claim(
    id: str, statement: str, quantity: str, stage: Stage, horizon: Horizon = "convergence", **paper: Any
) -> ClaimSpec:
    """A singular vector (or direction) "same as the embedding vector": |cos| ≈ 1 within 1 − cos_min."""
    return ClaimSpec(
        id,
        statement,
        test="value",
        relation="ge",
        quantity=quantity,
        expected=1.0,
        tolerance=_cos_tolerance,
        horizon=horizon,
        stage=stage,
        **paper,
    )


# The planted null cases' shapes, as functions of d: the matrices a claim reads (W_V d × d, W_1 4d × d, W_Q and
# W_K d × d, W_2 d × 4d) and the dimension of the vector compared with e (R^d; R^{4d·d} for W_2ᵀ against W_1).
def _wv_w1_shapes(d: int) -> tuple[tuple[int, int], ...]:
    return ((d, d), (4 * d, d))


def _wqk_w2_shapes(d: int) -> tuple[tuple[int, int], ...]:
    return ((d, d), (d, 4 * d))


def _square_shape(d: int) -> tuple[tuple[int, int], ...]:
    return ((d, d),)


def _embedding_dim(d: int) -> int:
    return d


def _w1_entries(d: int) -> int:
    return 4 * d * d


def _evolution_panels(cfg: MarkovRankConfig, m: Any) -> list[Panel]:
    """σ₂/σ₁ of the two claimed matrices over training (log scale, with the rank-one threshold) and the test
    loss against H(π) and the entropy rate, every arm in each."""
    thr = cfg.claims.ratio_max
    h_rate, h_pi = m["entropy_rate"], m["marginal_entropy"]
    return [
        *(
            Panel(
                f"σ₂/σ₁ of {name}",
                [Line(arm, f"sv_ratio/{name}", label=arm) for arm in cfg.arms],
                reference={f"threshold {thr}": thr},
                # an exactly rank-one init sits at float round-off (~1e-16), below the frame
                ylim=(1e-6, 2.0),
                yscale="log",
                ylabel=f"σ₂/σ₁ of {name}",
            )
            for name in CLAIMED
        ),
        Panel(
            "test loss",
            [Line(arm, label=f"{arm} init") for arm in cfg.arms],
            reference={f"H(π) = {h_pi:.3f}": h_pi, f"entropy rate = {h_rate:.3f}": h_rate},
            ylim=(h_rate - 0.03, max(np.log(2), h_pi) + 0.02),
        ),
    ]


# Figs. 3 and 6's panels, a row of them per arm: (matrix, when); e, a vector, is the narrow last column.
MATRIX_PANELS = (("W_V", "init"), ("W_V", "final"), ("W_1", "init"), ("W_1", "final"), ("e", "final"))


def _matrix_panels(cfg: MarkovRankConfig, run: RunView, _: Any) -> list[Matrix]:
    """Member 0's W_V ``(d, d)`` and W_1 ``(4d, d)`` at init and at the end, and its trained e ``(d,)``, for
    each arm; rows (outputs) numbered."""
    out = []
    for arm in cfg.arms:
        states = {"init": run.arrays(f"{arm}@init"), "final": run.arrays(arm)}
        for name, when in MATRIX_PANELS:
            mat = states[when]["e" if name == "e" else MATRICES[name]][0].double()  # member 0
            out.append(Matrix(mat, f"{arm}: {name} ({when})", rows=[str(i) for i in range(mat.shape[0])]))
    return out


@register
class MarkovRank(Experiment[MarkovRankConfig]):
    Config = MarkovRankConfig

    # ------------------------------------------------------------------------------------------
    def run(self, cfg: MarkovRankConfig, ctx: RunContext) -> None:
        task = MarkovChain(cfg.task.p, cfg.task.q)
        seeds = member_seeds(cfg.seed, cfg.members)
        mcfg = cfg.arm_model()
        probes: dict[str, list[TrajectoryProbe]] = {arm: [] for arm in cfg.arms}

        def build(chunk: list[int], arm: str) -> GPT:
            model = rank_one_init_(GPT(mcfg, chunk), cfg.rank_one) if arm == "rank-one" else GPT(mcfg, chunk)
            probe = TrajectoryProbe(cfg.probe_every, seeds.index(chunk[0]), len(chunk))
            model.register_forward_pre_hook(probe)
            probes[arm].append(probe)
            return model

        with cpu_threads(cfg.cpu_threads, ctx.device):
            # fit_all stores the final parameters and, under ARM@init, the initial ones (rebuilt from the
            # seeds: that build's probe never sees a training step); the arms train at once on lanes.
            ctx.fit_all(
                [
                    Fit(
                        arm,
                        Trainer(cfg.train, ctx.device, ctx.progress, label=arm),
                        partial(build, arm=arm),
                        seeds,
                        task,
                    )
                    for arm in cfg.arms
                ]
            )
            for arm in cfg.arms:
                trained = [p for p in probes[arm] if p.seen > 0]
                # Store the trajectory only when this process saw every member's whole training (a
                # run resumed mid-arm has no complete trajectory; the claims then use init + final).
                if sum(p.members for p in trained) == len(seeds) and all(p.seen == cfg.train.steps for p in trained):
                    ctx.writer.add_metrics(arm, [r for p in trained for r in p.rows])

    def trivial_error(self, cfg: MarkovRankConfig, arm: str) -> float:
        return float(np.log(2))  # next-token arms over {0, 1}: the uniform predictor's loss, log V

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _provenance(cfg: MarkovRankConfig, arm: str) -> Provenance:
        """``paper`` for the standard arm under AdamW (Table 2); ``ours`` for SGD at our step size and for
        the rank-one arm (our init)."""
        return "paper" if arm == "standard" and cfg.train.optimizer == "adamw" else "ours"

    @staticmethod
    def _drift(run: RunView, arm: str, name: str) -> float | None:
        """End drift of a recorded trajectory (``sv_ratio/W_V``, ``emb_cos/W_1``, ...) in learning-rate
        time; None when no complete trajectory was stored."""
        if not run.has(arm, name):
            return None
        d = run.drift(arm, name)
        return d if np.isfinite(d) else None

    def measure(self, cfg: MarkovRankConfig, run: RunView) -> Measurements:
        """Per arm: the spectra and alignments of the final and initial weights, the maximum σ₂/σ₁ over
        training, App. C's structure, the bias-step excesses, the final gaps to the reference predictors,
        and the stage checks (at a minimum, at the global minimum, left the plateau, stale bias)."""
        p, q = cfg.task.p, cfg.task.q
        c = cfg.claims
        h_rate, h_pi = entropy_rate(p, q), marginal_entropy(p, q)
        out = Measurements(
            {
                "entropy_rate": h_rate,
                "marginal_entropy": h_pi,
                "bigram_logit_gap": float(np.log((1 - q) / q) - np.log(p / (1 - p))),
                "optimizer": cfg.train.optimizer,
                "lr": cfg.train.lr,
                "thresholds": c.model_dump(),
            }
        )
        tokens = MarkovChain(p, q).sample(
            generators(member_seeds(cfg.seed, cfg.members), "bias-step-eval"),
            cfg.train.batch * c.bias_batches,
            cfg.train.seq_len,
        )
        target = "unigram" if p + q > 1 else "bayes"
        for arm in cfg.arms:
            final, init = snapshot(run.arrays(arm)), snapshot(run.arrays(f"{arm}@init"))
            _, loss = run.curves(arm, "test_loss")
            gap = {ref: loss[:, -1] - run.curves(arm, f"test_loss@{ref}")[1][:, -1] for ref in ("bayes", "unigram")}
            out.stage(
                arm,
                AT_A_MINIMUM,
                np.minimum(np.abs(gap["bayes"]), np.abs(gap["unigram"])),
                c.tol_nats,
                "lt",
                evidence="|final test loss − the nearer of the Bayes / unigram losses on the same batches|",
            )
            out.stage(
                arm,
                AT_GLOBAL_MINIMUM,
                np.abs(gap["bayes"]),
                c.tol_nats,
                "lt",
                evidence="|final test loss − the Bayes loss on the same batches|",
            )
            _, below, margin = plateau_escape(cfg, run, arm)
            out.stage(
                arm, LEFT_PLATEAU, below, -margin, "lt", evidence="final test loss − the unigram loss, same batches"
            )
            m = trained_vs_init(final, init, noise_floor=arm == "standard")
            m.update(
                final_test_loss=loss[:, -1].tolist(),
                final_minus_entropy_rate=(loss[:, -1] - h_rate).tolist(),
                final_minus_marginal_entropy=(loss[:, -1] - h_pi).tolist(),
                final_gap_to_bayes=gap["bayes"].tolist(),
                final_gap_to_unigram=gap["unigram"].tolist(),
                trajectory_stored=all(run.has(arm, f"sv_ratio/{n}") for n in CLAIMED),
            )
            if arm == "standard":
                self._fig3(cfg, run, out, final, init, gap[target])
            else:
                self._fig6(cfg, run, out, final, init, m)
            m["app_c"] = self._app_c(cfg, out, arm, run.arrays(arm))
            m["bias_step"] = self._bias_step(cfg, run, out, arm, tokens)
            out.values[arm] = m
        return out

    def _fig3(
        self, cfg: MarkovRankConfig, run: RunView, out: Measurements, final: dict, init: dict, gap: np.ndarray
    ) -> None:
        c, arm = cfg.claims, "standard"
        prov = self._provenance(cfg, arm)
        ctx = {"arm": arm}

        def row(claim: str, key: str, values: np.ndarray, metric: str | None, label: str) -> None:
            drift = self._drift(run, arm, metric) if metric else None
            out.row(claim, key, Sample(values, drift=drift), arms=[arm], provenance=prov, context=ctx, label=label)

        for name in CLAIMED:
            row(
                "fig3-rank-one",
                name,
                final[name]["sv_ratio"],
                f"sv_ratio/{name}",
                f"trained {name}: σ₂/σ₁ ≤ {c.ratio_max}",
            )
            side = "the better of its two singular vectors" if name == "W_V" else "its right (d-dim) singular vector"
            row(
                "fig3-aligned-with-embedding",
                name,
                final[name]["cos_best"],
                f"emb_cos/{name}",
                f"trained {name}: |cos| of {side} with e ≥ {c.cos_min}",
            )
            out.row(
                "standard-init-not-rank-one",
                name,
                Sample(init[name]["sv_ratio"]),
                arms=[arm],
                context=ctx,
                label=f"init {name}: σ₂/σ₁ ≥ {c.ratio_max}",
            )
        row(
            "fig3-embedding-on-hypercube",
            "e",
            final["embedding"]["spread"],
            "emb_spread",
            f"trained e: hypercube spread ≤ {c.spread_max}",
        )
        for name in OTHERS_FIG3:
            row(
                "fig3-other-matrices-rank-one",
                name,
                final[name]["sv_ratio"],
                f"sv_ratio/{name}",
                f"trained {name}: σ₂/σ₁ ≤ {c.ratio_max}",
            )
        target = "unigram" if cfg.task.p + cfg.task.q > 1 else "bayes"
        out.row(
            "fig3-converged",
            arm,
            Sample(gap, drift=run.drift(arm, "test_loss", minus=f"test_loss@{target}")),
            arms=[arm],
            provenance=prov,
            context=ctx,
            label=f"final gap to the {target} predictor ≈ 0",
        )

    def _fig6(self, cfg: MarkovRankConfig, run: RunView, out: Measurements, final: dict, init: dict, m: dict) -> None:
        c, arm = cfg.claims, "rank-one"
        for name in MATRICES:
            worst = np.maximum(init[name]["sv_ratio"], final[name]["sv_ratio"])
            if run.has(arm, f"sv_ratio/{name}"):  # (E, snapshots); NaN (a zero matrix) counts as not rank one
                _, during = run.curves(arm, f"sv_ratio/{name}")
                worst = np.maximum(worst, np.where(np.isnan(during), np.inf, during).max(axis=1))
                when = f"every {cfg.probe_every} steps and at the end"
            else:
                when = "at init and at the end (no trajectory stored)"
            m[name]["max_sv_ratio_during_training"] = worst.tolist()
            out.row(
                "fig6-stays-rank-one",
                name,
                Sample(worst),
                arms=[arm],
                provenance="ours",
                context={"arm": arm},
                label=f"{name}: max σ₂/σ₁ ({when}) ≤ {c.roundoff:g}",
            )
            out.row(
                "rank-one-init-is-rank-one",
                name,
                Sample(init[name]["sv_ratio"], deterministic=True),
                provenance="ours",
                context={"arm": arm},
                label=f"init {name}: σ₂/σ₁ ≤ {c.roundoff:g}",
            )

    def _app_c(self, cfg: MarkovRankConfig, out: Measurements, arm: str, state: dict) -> dict[str, list[float]]:
        """App. C's structure of the optimum on the final weights, one row per statement and arm
        (:func:`tdlab.probes.sec2_weights.app_c_structure`). On the rank-one arm, W_O W_V and W_Q^T W_K are
        rank one along α by construction: those rows are not measured there."""
        c, p, q = cfg.claims, cfg.task.p, cfg.task.q
        s = app_c_structure(state)
        side = 1.0 if p + q < 1 else -1.0
        prov, ctx = self._provenance(cfg, arm), {"arm": arm}

        def row(claim: str, key: str, value: Any, label: str) -> None:
            out.row(claim, key, value, arms=[arm], provenance=prov, context=ctx, label=label)

        row(
            "app-c-positions-along-e",
            arm,
            -s["position_cos"],
            label=f"{arm}: -cos(mean_n p_n, e) ≥ {c.cos_min:g}",
        )
        row(
            "app-c-positions-half-e",
            arm,
            s["position_ratio"],
            label=f"{arm}: p/e = -<mean p_n, e>/|e|² ≈ 1/2",
        )
        row(
            "app-c-positions-constant",
            arm,
            s["position_spread"],
            label=f"{arm}: spread of p_n over positions / |mean p_n| ≤ {c.position_spread_max:g}",
        )
        row(
            "app-c-w2-transpose-w1",
            arm,
            side * s["w2_w1t_cos"],
            label=f"{arm}: cos_F(W_2, {'+' if side > 0 else '-'}W_1^T) ≥ {c.cos_min:g} (p+q{'<' if side > 0 else '>'}1)",
        )
        row("app-c-attention-off", arm, s["attention_gain"], label=f"{arm}: α^T W_O W_V α ≈ 0")
        if arm == "standard":
            row(
                "app-c-wo-wv-rank-one",
                arm,
                s["wo_wv_ratio"],
                label=f"{arm}: σ₂/σ₁ of W_O W_V ≤ {c.ratio_max:g}",
            )
            row(
                "app-c-wo-wv-along-e",
                arm,
                s["wo_wv_left_cos"],
                label=f"{arm}: |cos(u_1(W_O W_V), e)| ≥ {c.cos_min:g}",
            )
            row(
                "app-c-wq-wk-rank-one",
                arm,
                s["qk_ratio"],
                label=f"{arm}: σ₂/σ₁ of W_Q^T W_K ≤ {c.ratio_max:g}",
            )
            for side_name, key in (("left", "qk_left_cos"), ("right", "qk_right_cos")):
                row(
                    "app-c-wq-wk-along-e",
                    f"{arm}/{side_name}",
                    s[key],
                    label=f"{arm}: |cos({'u' if side_name == 'left' else 'v'}_1(W_Q^T W_K), e)| ≥ {c.cos_min:g}",
                )
        return {k: v.tolist() for k, v in s.items()}

    def _bias_step(
        self, cfg: MarkovRankConfig, run: RunView, out: Measurements, arm: str, tokens: torch.Tensor
    ) -> dict[str, dict[str, list[float]]]:
        """Sec. 3 on the full model: one bias step from the initial and the trained weights
        (:func:`tdlab.probes.sec2_weights.bias_step_excess` on fresh sequences, stream ``bias-step-eval``)."""
        c = cfg.claims
        res = {}
        for when, key in (("init", f"{arm}@init"), ("final", arm)):
            r = bias_step_excess(cfg.arm_model(), run.arrays(key), tokens, c.bias_lr)
            res[when] = {k: v.tolist() for k, v in r.items()}
            # The stage is recorded under the stored parameters' name: the init row's "arm" is ARM@init.
            out.stage(
                key,
                STALE_BIAS,
                r["excess_before"],
                c.tol_bias,
                "gt",
                evidence="L(θ, b) − min_b L(θ, b) before the step, nats",
            )
            out.row(
                "one-extra-bias-step-full-model",
                f"{arm}/{when}",
                r["excess_after"],
                arms=[key],
                provenance=self._provenance(cfg, arm),
                context={"arm": arm, "weights": when},
                label=f"{arm} arm, {when} weights: L(θ, b − {c.bias_lr:g}·∂_bL) − min_b L(θ, b) ≤ {c.tol_bias:g} "
                f"(before the step: {float(np.mean(r['excess_before'])):.2e})",
            )
        return res

    # ------------------------------------------------------------------------------------------
    def notes(self, cfg: MarkovRankConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        c, v = cfg.claims, measured.values
        h_rate, h_pi = v["entropy_rate"], v["marginal_entropy"]
        notes = [self._finding(arm, v[arm], h_rate, h_pi) for arm in cfg.arms]
        if "standard" in cfg.arms:
            m = v["standard"]
            growth = {k: float(np.mean(m[k]["sigma1_growth"])) for k in MATRICES}
            still = [k for k in CLAIMED if growth[k] < 2.0]
            if still:
                notes.append(
                    f"standard: {' and '.join(still)} kept their initial scale (σ₁ final/init: "
                    + ", ".join(f"{k} ×{growth[k]:.2f}" for k in MATRICES)
                    + f"; |e| ×{float(np.mean(m['embedding']['norm_growth'])):.0f}): training did not drive them, so their "
                    f"spectra are those of the N(0, {cfg.model.init_std}²) init. |e|² = {float(np.mean(m['embedding']['norm_sq'])):.3f} "
                    f"vs the bigram logit gap {v['bigram_logit_gap']:.3f}: with a = e the embedding and b alone carry the "
                    "bigram predictor when p+q<1."
                )
            floors = {k: float(np.mean(m[k]["init_noise_floor"])) for k in (*CLAIMED, *OTHERS_FIG3)}
            high = [k for k, f in floors.items() if f > c.ratio_max]
            if high:
                notes.append(
                    "standard: the init noise left in "
                    + ", ".join(f"{k} (σ₁ init/final {floors[k]:.2f})" for k in high)
                    + f" exceeds the rank-one tolerance {c.ratio_max}: this training cannot make them rank one "
                    "within it, whatever the paper's mechanism."
                )
        if "rank-one" in cfg.arms:
            worst = max(max(v["rank-one"][k]["max_sv_ratio_during_training"]) for k in MATRICES)
            notes.append(
                f"Fig. 6: the rank-one init stays rank one by construction (every gradient keeps the α factor under "
                f"SGD and AdamW); the largest σ₂/σ₁ over training, {worst:.1e}, is round-off. A sanity check, not a "
                "test of the seed's Fig. 6."
            )
        bias = {
            r.context["arm"] + "/" + r.context["weights"]: r
            for g in groups
            if g.id == "one-extra-bias-step-full-model"
            for r in g.rows
        }
        for arm in cfg.arms:
            b = v[arm]["bias_step"]
            notes.append(
                f"{arm}, one extra bias step (step {c.bias_lr:g}): from the initial weights L − min_b L "
                f"{np.mean(b['init']['excess_before']):.1e} → {np.mean(b['init']['excess_after']):.1e} nats "
                f"; from the trained weights {np.mean(b['final']['excess_before']):.1e} → "
                f"{np.mean(b['final']['excess_after']):.1e}"
                + (
                    " (a bias that training already fitted leaves nothing for the step to do)"
                    if bias[f"{arm}/final"].cause == "stage not reached"
                    else ""
                )
                + (
                    f"; from a σ = {cfg.model.init_std:g} init the logits are ≈ b, where a step of 4 = 1/σ'(0) is nearly "
                    "Newton's on a one-parameter logistic fit."
                    if arm == "standard"
                    else "."
                )
            )
        for arm in cfg.arms:
            if not v[arm]["trajectory_stored"]:
                notes.append(
                    f"{arm}: no σ₂/σ₁ trajectory stored (run resumed mid-arm); claims use init and final weights, no drift."
                )
        return [*super().notes(cfg, measured, groups), *notes]

    @staticmethod
    def _finding(arm: str, m: dict, h_rate: float, h_pi: float) -> str:
        def mean(x: list[float]) -> float:
            return float(np.nanmean(x)) if len(x) else float("nan")

        final = mean(m["final_test_loss"])
        ratios = ", ".join(f"{k} {mean(m[k]['sv_ratio']):.4f}" for k in (*MATRICES, "W_OW_V"))
        where = "the entropy rate" if abs(final - h_rate) < abs(final - h_pi) else "H(π)"
        return (
            f"{arm}: final test loss {final:.4f} nats (entropy rate {h_rate:.4f}, H(π) {h_pi:.4f}; nearer {where}); "
            f"mean σ₂/σ₁ — {ratios}; |cos| with e — W_V {mean(m['W_V']['cos_best']):.3f}, W_1 {mean(m['W_1']['cos_best']):.3f}; "
            f"embedding spread {mean(m['embedding']['spread']):.4f}; σ₁ final/init — W_V ×{mean(m['W_V']['sigma1_growth']):.2f}, "
            f"W_1 ×{mean(m['W_1']['sigma1_growth']):.2f}; bias excess before one step (init → final weights) "
            f"{mean(m['bias_step']['init']['excess_before']):.1e} → {mean(m['bias_step']['final']['excess_before']):.1e} nats."
        )

    # ------------------------------------------------------------------------------------------
    figures = (
        Matrices(
            "fig3_fig6_matrices.png",
            _matrix_panels,
            title="Member 0, as in Figs. 3 and 6: W_V (d×d) and W_1 (4d×d), rows = outputs; e as a column",
            columns=len(MATRIX_PANELS),
            size=(2.6, 4.2),
            cmap="RdBu_r",
            # each panel on its own ±max|entry|, 0 white: the init's entries are ~1e-3, the trained ones ~0.1
            symmetric=True,
            ticks=8,
            aspect="auto",
            width_ratios=(8, 8, 8, 8, 1.2),
        ),
        Curves(
            "rank_evolution.png",
            _evolution_panels,
            title=lambda cfg: (
                f"p={cfg.task.p}, q={cfg.task.q}, d={cfg.model.d}, N={cfg.train.seq_len}, {cfg.train.optimizer} "
                f"lr={cfg.train.lr:g}, batch {cfg.train.batch}; mean over {cfg.members} members (band: min–max)"
            ),
            size=(5.0, 3.8),
        ),
    )

    def plot(self, cfg: MarkovRankConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The spectra (their own figure), then the declared Figs. 3 and 6's matrices and evolution curves."""
        return [self._plot_spectra(cfg, run, figdir), *super().plot(cfg, run, analysis, figdir)]

    def _plot_spectra(self, cfg: MarkovRankConfig, run: RunView, figdir: Path) -> Path:
        from tdlab.report.figures import plt, save_figure

        names = list(MATRICES)
        fig, axes = plt.subplots(
            len(cfg.arms), len(names), figsize=(2.3 * len(names), 2.6 * len(cfg.arms)), squeeze=False
        )
        for row, arm in zip(axes, cfg.arms, strict=True):
            final, init = snapshot(run.arrays(arm)), snapshot(run.arrays(f"{arm}@init"))
            for ax, name in zip(row, names, strict=True):
                for off, snap, label, color in ((-0.2, init, "init", "0.6"), (0.2, final, "final", "C0")):
                    s = snap[name]["sv_normalised"]  # (E, k)
                    x = np.arange(1, s.shape[1] + 1) + off
                    ax.bar(
                        x,
                        s.mean(0),
                        width=0.4,
                        color=color,
                        label=label,
                        yerr=np.vstack([s.mean(0) - s.min(0), s.max(0) - s.mean(0)]),
                        error_kw={"lw": 0.8},
                    )
                ax.axhline(cfg.claims.ratio_max, color="k", ls=":", lw=0.9)
                ax.set_title(f"{arm}: {name}", fontsize=9)
                ax.set_ylim(0, 1.05)
                ax.set_xticks(np.arange(1, s.shape[1] + 1))
                ax.tick_params(labelsize=7)
            row[0].set_ylabel("σ_i / σ_1 (mean over members)", fontsize=8)
        axes[0, 0].legend(fontsize=7)
        fig.suptitle(
            f"Singular values of the weight matrices, init vs after {cfg.train.steps} {cfg.train.optimizer} steps "
            f"(dotted: σ₂/σ₁ threshold {cfg.claims.ratio_max}); bars: min–max over {cfg.members} members",
            fontsize=10,
        )
        fig.tight_layout()
        return save_figure(fig, figdir / "spectra.png")
