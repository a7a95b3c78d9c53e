"""``markov-tying``: seed 003 ("Attention with Markov", talk), Part I, "Theoretical results".

The talk's ``θ_π``: on a binary first-order chain, an explicitly constructed point of the single-layer
transformer whose prediction is the marginal ``π_1``; a bad local minimum with tied input/output embeddings
(``a = e``) and ``p + q > 1``, a saddle without tying.

Two parts, both on seed 000's Sec. 2 model (``GPT(arch="sec2")``, ``tie_weights`` True/False):

* **Landscape** (no training, horizon ``static``). ``θ_π`` is built in the full model (``e = a = 0``,
  ``σ(b) = π_1``; :mod:`tdlab.theory.markov_tying`), at the canonical point (other weights 0, exact
  closed-form spectrum) and at the ``θ_π`` nearest each member's standard init (other weights kept). On the exact
  population loss (all ``2^(N+1)`` sequences weighted by their probabilities) we measure
  ``L(θ_π) − H(π)``, ``max |∇L(θ_π)|``, the Hessian's extreme eigenvalues (exact, autograd, float64,
  ``d = 2..4``) and the loss change along random directions and the bottom eigenvector. These are
  exact computations with no seed noise: their samples are ``deterministic`` (the interval is the
  min–max over the points measured); the autograd spectrum at the canonical point is compared with
  :func:`tdlab.theory.markov_tying.theta_pi_spectrum`.
* **Training**. From the standard small init on a grid of ``(p, q)``, tied and untied. Per member: the step
  it leaves the H(π) plateau (:func:`tdlab.probes.curves.gap_crossing`) and its final test loss against the
  Bayes predictor's on the same evaluation batches.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-tying``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Hypothesis, Provenance, Threshold
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.curves import evaluation_noise, gap_crossing
from tdlab.report.standard_figures import Curves, Line, Panel, Series
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import derive_seed, member_seeds
from tdlab.tasks.markov import MarkovChain, entropy_rate, marginal_entropy, stationary
from tdlab.theory import markov_tying as th
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer

Others = Literal["zero", "keep"]
Pair = tuple[float, float]


def chain_tag(p: float, q: float) -> str:
    """Arm-name fragment of a chain: ``p0.5_q0.8``."""
    return f"p{p:g}_q{q:g}"


def _check_pairs(v: list[Pair]) -> list[Pair]:
    for p, q in v:
        if not (0 < p < 1 and 0 < q < 1):
            raise ValueError(f"(p, q) = ({p}, {q}): both must lie in (0, 1)")
    if len(set(v)) != len(v):
        raise ValueError("chains must not repeat")
    return v


class LandscapeConfig(Config):
    """θ_π in the full model, on the exact population loss."""

    # (0.5, 0.8): the p+q>1 chain of seed 000 Fig. 4 (and markov-init); (0.2, 0.3): a p+q<1 control,
    # where the closed form says θ_π is a saddle even with tying (2c < 0).
    chains: list[Pair] = [(0.5, 0.8), (0.2, 0.3)]
    dims: list[int] = [2, 3, 4]  # the Hessian exactly, with autograd: small d (it is dense)
    seq_len: int = Field(8, ge=1, le=10)  # N: 2^(N+1) sequences enumerated
    # zero: canonical point (positions and weights 0: closed-form spectrum); keep: the θ_π nearest
    # each member's standard init (weights kept), i.e. a generic point of the θ_π family.
    others: list[Others] = ["zero", "keep"]
    # Perturbation probe (our addition, beyond the Hessian): ||Δθ|| = radius, loss change ~ λ r²/2.
    radius: float = Field(1e-2, gt=0.0, le=1.0)
    directions: int = Field(32, ge=1, le=4096)  # random directions of the probe (each tried as ±u)

    @field_validator("chains")
    @classmethod
    def _chains(cls, v: list[Pair]) -> list[Pair]:
        return _check_pairs(v)

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if not v or any(d < 1 or d > 8 for d in v) or len(set(v)) != len(v):
            raise ValueError("dims must be distinct values in 1..8 (the Hessian is dense)")
        return v


class TyingClaimConfig(Config):
    """Tolerances of the computed verdicts."""

    exact_tol: float = Field(
        1e-9, gt=0.0
    )  # |L(θ_π) - H(π)|, max|∇L|, |λ - closed form|: float64 rounding of exact computations
    psd_rel_tol: float = Field(
        1e-6, gt=0.0
    )  # "almost PSD": λ_min >= -psd_rel_tol * λ_max (float64 rounding of the Hessian)
    # "clearly negative": λ_min <= -negative_fraction * |c|, c = π0 π1 (p+q-1) the closed-form curvature
    # (the canonical point's λ_min is -|c| untied and 2c tied; half of it separates a saddle from rounding)
    negative_fraction: float = Field(0.5, gt=0.0, le=1.0)
    # markov-init's plateau rule: a member has left the H(π) plateau at the first evaluation with
    # loss − the unigram loss on the same batches < −max(escape_fraction (H(π) − rate), 3 sd of one evaluation)
    escape_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    # Chains with H(π) - rate below this carry no training claim (the plateau and the minimum cannot be told apart)
    min_gap_nats: float = Field(0.02, ge=0.0)
    # Scientific tolerance (nats) on the members' mean gap to the Bayes predictor on the same evaluation
    # batches (markov-init's); the seed-to-seed spread is added by the verdict.
    tol_nats: float = Field(0.01, gt=0.0, le=1.0)


class MarkovTyingConfig(ExperimentConfig):
    members: int = Field(4, ge=1, le=4096)  # members per (p, q, tying) cell
    landscape: LandscapeConfig = LandscapeConfig()
    # Training grid: explicit (p, q) pairs. Default: the 3x3 grid {0.2, 0.5, 0.8}^2 (p+q<1, =1, >1).
    grid: list[Pair] = [(p, q) for p in (0.2, 0.5, 0.8) for q in (0.2, 0.5, 0.8)]
    # Seed 000 Sec. 2 model (A.3 uses d = 8, σ = 0.02); tie_weights is set per arm.
    model: GPTConfig = GPTConfig(arch="sec2", d=8)
    tying: list[bool] = [True, False]  # talk: "Weight tying" vs "No weight tying"
    train: TrainConfig = TrainConfig()  # seed 000 Table 2: AdamW (0.9, 0.95), lr 1e-3, cosine, batch 16
    claims: TyingClaimConfig = TyingClaimConfig()
    cpu_threads: int | None = Field(
        1, ge=1, le=1024
    )  # torch threads on CPU (tdlab.train.cpu.cpu_threads); None: torch default

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: list[Pair]) -> list[Pair]:
        return _check_pairs(v)

    @model_validator(mode="after")
    def _check(self) -> MarkovTyingConfig:
        if self.model.arch != "sec2":
            raise ValueError("model.arch must be 'sec2': θ_π is built in the Sec. 2 model")
        if not self.tying or len(set(self.tying)) != len(self.tying):
            raise ValueError("tying must list True and/or False, without repeats")
        return self

    def arm_model(self, tied: bool, max_len: int | None = None, d: int | None = None) -> GPTConfig:
        upd = {"tie_weights": tied, "max_len": max_len or self.train.seq_len}
        if d is not None:
            upd["d"] = d
        return self.model.updated(upd)


def _tying(tied: bool) -> str:
    return "tied" if tied else "untied"


def _regime(p: float, q: float) -> str:
    return "p+q>1" if p + q > 1 else ("p+q<1" if p + q < 1 else "p+q=1")


def _pq(row) -> tuple[float, float]:
    return float(row.context["p"]), float(row.context["q"])


def _theta_pi_loss(cfg: MarkovTyingConfig, row) -> float:
    return marginal_entropy(*_pq(row))


def _local_min_tolerance(cfg: MarkovTyingConfig, row) -> float:
    # the Hessian ratio is PSD up to float64 rounding of the matrix; the loss probe up to rounding of the loss
    return cfg.claims.psd_rel_tol if row.context["check"] == "hessian-psd" else cfg.claims.exact_tol


def _saddle_bound(cfg: MarkovTyingConfig, row) -> float:
    """``−negative_fraction·|c|`` for the smallest eigenvalue; times ``r²/2`` for the loss change along
    the bottom eigenvector at radius ``r`` (second order)."""
    bound = -cfg.claims.negative_fraction * abs(th.switching_curvature(*_pq(row)))
    return bound if row.context["check"] == "hessian-negative" else bound * cfg.landscape.radius**2 / 2


LEFT_PLATEAU = Stage(
    "left-plateau",
    "the member's final test loss is below the unigram predictor's on the same batches by more than "
    "escape_fraction · (H(π) − entropy rate) and 3 standard deviations of one evaluation: it has left the unigram stage",
)

_FIG4 = {"p": 0.5, "q": 0.8}

# The talk's hypotheses ("Theoretical results"), read off each row's own chain and arm. Rows keep their
# (p, q) in the context in every record; the tying is the key's segment (``{chain}/{tied|untied}/{check}``).
ABOVE_LINE = Hypothesis(
    "p + q > 1 (talk, Part I, 'Theoretical results': 'If p + q > 1 and the weights are tied ...')",
    lambda cfg, row: sum(_pq(row)) > 1,
    on="row",
)
BELOW_LINE = Hypothesis(
    "p + q < 1 (talk, Part I, gradient-flow slides: 'p+q < 1 ... Gaussian init. converges to global minima')",
    lambda cfg, row: sum(_pq(row)) < 1,
    on="row",
)
TIED_ARMS = Hypothesis(
    "the weights are tied (a = e; talk, Part I, 'Bad local minima (weight tying)'): the group's rows are the tied "
    "arms' (tying lists True)",
    lambda cfg: True in cfg.tying,
)
UNTIED = Hypothesis(
    "the weights are not tied (talk, Part I, 'Saddle point (no weight tying)')",
    lambda cfg, row: "untied" in row.key.split("/"),
    on="row",
)

# Exact float64 computations (the enumerated population loss, autograd gradients and Hessians): their
# thresholds are numerical precision, not a scientific choice.
PRECISION = Threshold(
    "closed form",
    "claims.exact_tol = 1e-9: the float64 rounding of an exact computation (the enumerated population loss and its "
    "autograd derivatives; the measured values are ~1e-16)",
)


def _between_minima(cfg: MarkovTyingConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted end states at the run's members (seed 000's markov-init plant): at the Bayes predictor's loss
    (gap 0, spread a fifth of the tolerance) and on the H(π) plateau of θ_π (gap H(π) − entropy rate)."""
    p, q = float(context["p"]), float(context["q"])
    return planted_pair(0.0, marginal_entropy(p, q) - entropy_rate(p, q), cfg.claims.tol_nats / 5, cfg.members)


_TIED_THETA_PI_LOCAL_MINIMUM_EXAMPLE = {**_FIG4, "check": "hessian-psd"}


_THETA_PI_SADDLE_EXAMPLE = {**_FIG4, "check": "hessian-negative"}


def _tying_panel(cfg: MarkovTyingConfig, p: float, q: float) -> Panel:
    """One chain's test loss, tied vs untied, against H(π) and the entropy rate."""
    h_pi, h_rate = marginal_entropy(p, q), entropy_rate(p, q)
    return Panel(
        f"(p, q) = ({p}, {q})",
        [Line(MarkovTying.train_arm(tied, p, q), label=_tying(tied)) for tied in cfg.tying],
        reference={f"H(π) = {h_pi:.3f}": h_pi, f"rate = {h_rate:.3f}": h_rate},
        ylim=(h_rate - 0.03, max(h_pi, math.log(2)) + 0.03),
    )


def _landscape_panel(cfg: MarkovTyingConfig, row: dict[str, Any], p: float, q: float) -> Panel:
    """One chain's smallest Hessian eigenvalue at θ_π over d: each measured point (tied right of d, untied
    left), the closed form per tying dashed, 0 solid."""
    ls, c = cfg.landscape, row["curvature_c"]
    span = [min(ls.dims) - 0.08, max(ls.dims) + 0.08]
    series = [Series(span, [0.0, 0.0], style="k-")]
    for tied, color in zip(cfg.tying, ("C0", "C3"), strict=False):
        t = _tying(tied)
        if t not in row:
            continue
        jitter = 0.08 if tied else -0.08
        for o, marker in zip(ls.others, ("o", "x", "^"), strict=False):
            sel = [pt for pt in row[t]["points"] if pt["others"] == o]
            x, y = [pt["d"] + jitter for pt in sel], [pt["eig_min"] for pt in sel]
            series.append(Series(x, y, f"{t}, {o}: λ_min (measured)", marker, color))
        cf = 0.0 if (tied and c > 0) else (2 * c if tied else -abs(c))
        series.append(Series(span, [cf, cf], f"{t}: closed form λ_min = {cf:.3f}", "--", color))
    return Panel(
        f"(p, q) = ({p}, {q}), p+q {'>' if p + q > 1 else '<'} 1, N = {ls.seq_len}",
        series=series,
        xlabel="embedding dimension d",
        ylabel="smallest Hessian eigenvalue at θ_π",
    )


@register
class MarkovTying(Experiment[MarkovTyingConfig]):
    Config = MarkovTyingConfig

    # ------------------------------------------------------------------------------------------
    def run(self, cfg: MarkovTyingConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            self._landscape(cfg, ctx, seeds)
            arms = [(self.train_arm(tied, p, q), tied, p, q) for p, q in cfg.grid for tied in cfg.tying]
            ctx.fit_all(
                [
                    Fit(
                        arm,
                        Trainer(cfg.train, ctx.device, ctx.progress, label=arm),
                        partial(GPT, cfg.arm_model(tied)),
                        seeds,
                        MarkovChain(p, q),
                    )
                    for arm, tied, p, q in arms
                ]
            )  # at once, on one-thread lanes

    @staticmethod
    def train_arm(tied: bool, p: float, q: float) -> str:
        return f"train/{_tying(tied)}/{chain_tag(p, q)}"

    @staticmethod
    def landscape_arm(p: float, q: float, tying: str, others: str, d: int) -> str:
        return f"landscape/{chain_tag(p, q)}/{tying}/{others}/d{d}"

    def _landscape(self, cfg: MarkovTyingConfig, ctx: RunContext, seeds: list[int]) -> None:
        """θ_π measurements, on the CPU in float64 (tiny models; exact Hessians)."""
        ls = cfg.landscape
        n = ls.seq_len
        for p, q in ls.chains:
            for tied in cfg.tying:
                for others in ls.others:
                    for d in ls.dims:
                        arm = self.landscape_arm(p, q, _tying(tied), others, d)
                        if ctx.writer.arm_rows(arm):
                            continue  # measured by an interrupted attempt of this (resumed) run
                        # The canonical point is the same for every member: measure it once.
                        mseeds = seeds[:1] if others == "zero" else seeds
                        model = th.set_theta_pi(GPT(cfg.arm_model(tied, max_len=n, d=d), mseeds).double(), p, q, others)
                        gens = [torch.Generator().manual_seed(derive_seed(s, "probe")) for s in mseeds]
                        readings = th.landscape_readings(
                            model, p, q, n, ls.radius, ls.directions, gens, (d, tied) if others == "zero" else None
                        )
                        rows = [(0, e, k, v) for e, vals in enumerate(readings) for k, v in vals.items()]
                        ctx.store_rows(arm, rows)
                        ctx.stop_point(arm)  # the paper grid's landscape takes many minutes: a stop loses no arm

    def trivial_error(self, cfg: MarkovTyingConfig, arm: str) -> float | None:
        # Training arms predict a binary next token: the uniform predictor's loss is log 2. The landscape
        # "arms" store no test_loss series and are not gated.
        return float(np.log(2)) if arm.startswith("train/") else None

    # ------------------------------------------------------------------------------------------
    def measure(self, cfg: MarkovTyingConfig, run: RunView) -> Measurements:
        """The landscape rows (exact, deterministic samples) and the training rows (paired escape steps,
        the p+q<1 end state with its drift and stage); see the module docstring."""
        out = Measurements()
        self._measure_landscape(cfg, run, out)
        self._measure_training(cfg, run, out)
        return out

    def _measure_landscape(self, cfg: MarkovTyingConfig, run: RunView, out: Measurements) -> None:
        ls = cfg.landscape
        points = [(o, d) for o in ls.others for d in ls.dims]
        table: dict[str, dict[str, Any]] = {}
        for p, q in ls.chains:
            tag = chain_tag(p, q)
            c = th.switching_curvature(p, q)
            pi0, pi1 = stationary(p, q)
            prov: Provenance = "paper" if p + q > 1 else "ours"  # the theorem's hypothesis is p + q > 1
            ctx = {"p": p, "q": q}

            def get(t: str, name: str, only: str | None = None, p: float = p, q: float = q) -> list[float]:
                return [
                    v
                    for o, d in points
                    if only in (None, o)
                    for v in run.final(self.landscape_arm(p, q, t, o, d), name).tolist()
                ]

            ties = [_tying(t) for t in cfg.tying]
            out.row(
                "theta-pi-loss-is-H(pi)",
                tag,
                Sample([v for t in ties for v in get(t, "loss")], deterministic=True),
                provenance=prov,
                context=ctx,
                label=f"(p, q) = ({p}, {q}): L(θ_π) = H(π) at every point measured",
            )
            out.row(
                "theta-pi-stationary",
                tag,
                Sample([v for t in ties for v in get(t, "grad_max")], deterministic=True),
                provenance=prov,
                context=ctx,
                label=f"(p, q) = ({p}, {q}), {_regime(p, q)}: max |∂L/∂θ_i| at θ_π = 0 at every point measured",
            )
            table[tag] = {
                "H_pi": float(marginal_entropy(p, q)),
                "entropy_rate": float(entropy_rate(p, q)),
                "L_theta_pi_minus_rate": float(marginal_entropy(p, q) - entropy_rate(p, q)),
                "curvature_c": float(c),
                "pi0_pi1": float(pi0 * pi1),
            }
            for tied in cfg.tying:
                t = _tying(tied)
                if "zero" in ls.others:
                    out.row(
                        "theta-pi-canonical-spectrum",
                        f"{tag}/{t}",
                        Sample(get(t, "spectrum_err", "zero"), deterministic=True),
                        provenance=prov,
                        context=ctx,
                        label=f"(p, q) = ({p}, {q}), {t}: max |λ − closed form| at the canonical θ_π, c = {c:.4f}",
                    )
                eig_min, eig_max = get(t, "eig_min"), get(t, "eig_max")
                # The closed form says: tied is a (flat) minimum iff c > 0; untied is a saddle iff c != 0.
                if tied and c > 0:
                    ratio = [lo / hi for lo, hi in zip(eig_min, eig_max, strict=True)]
                    out.row(
                        "tied-theta-pi-local-minimum",
                        f"{tag}/hessian-psd",
                        Sample(ratio, deterministic=True),
                        provenance=prov,
                        context={**ctx, "check": "hessian-psd"},
                        label=f"(p, q) = ({p}, {q}), tied: λ_min/λ_max ≥ −{cfg.claims.psd_rel_tol:g} at every point",
                    )
                    probe = [min(a, b) for a, b in zip(get(t, "probe_random"), get(t, "probe_bottom"), strict=True)]
                    out.row(
                        "tied-theta-pi-local-minimum",
                        f"{tag}/no-descent-direction",
                        Sample(probe, deterministic=True),
                        provenance=prov,
                        context={**ctx, "check": "no-descent-direction"},
                        label=f"(p, q) = ({p}, {q}), tied: no random direction nor the bottom eigenvector lowers "
                        f"the loss at radius {ls.radius:g}",
                    )
                elif c != 0:
                    # the talk's saddle: untied, p + q > 1; a saddle tied or untied below the line is ours
                    sprov: Provenance = "paper" if (not tied and p + q > 1) else "ours"
                    out.row(
                        "theta-pi-saddle",
                        f"{tag}/{t}/hessian-negative",
                        Sample(eig_min, deterministic=True),
                        provenance=sprov,
                        context={**ctx, "check": "hessian-negative"},
                        label=f"(p, q) = ({p}, {q}), {t}: λ_min ≤ −{cfg.claims.negative_fraction:g}|c| at every point",
                    )
                    out.row(
                        "theta-pi-saddle",
                        f"{tag}/{t}/descent-direction",
                        Sample(get(t, "probe_bottom"), deterministic=True),
                        provenance=sprov,
                        context={**ctx, "check": "descent-direction"},
                        label=f"(p, q) = ({p}, {q}), {t}: the loss drops along the bottom eigenvector at radius "
                        f"{ls.radius:g} by at least {cfg.claims.negative_fraction:g}|c| r²/2",
                    )
                table[tag][t] = {
                    "eig_min": eig_min,
                    "eig_max": eig_max,
                    "points": [
                        {"others": o, "d": d, "member": m, "eig_min": lo, "eig_max": hi}
                        for o, d in points
                        for m, (lo, hi) in enumerate(
                            zip(
                                run.final(self.landscape_arm(p, q, t, o, d), "eig_min").tolist(),
                                run.final(self.landscape_arm(p, q, t, o, d), "eig_max").tolist(),
                                strict=True,
                            )
                        )
                    ],
                }
        out.values["landscape"] = table

    def _measure_training(self, cfg: MarkovTyingConfig, run: RunView, out: Measurements) -> None:
        cl = cfg.claims
        cells: dict[str, dict] = {}
        for p, q in cfg.grid:
            tag = chain_tag(p, q)
            h_pi, h_rate = marginal_entropy(p, q), entropy_rate(p, q)
            gap = h_pi - h_rate
            informative = gap >= max(cl.min_gap_nats, 1e-12)
            regime = _regime(p, q)
            threshold = h_pi - cl.escape_fraction * gap
            row: dict[str, Any] = {
                "p": p,
                "q": q,
                "regime": regime,
                "H_pi": float(h_pi),
                "entropy_rate": float(h_rate),
                "informative": bool(informative),
                "escape_threshold": float(threshold),
            }
            escapes = {}
            for tied in cfg.tying:
                t = _tying(tied)
                arm = self.train_arm(tied, p, q)
                steps, loss = run.curves(arm, "test_loss")
                final = loss[:, -1]
                u = th.normalised_position(final, p, q) if gap > 0 else np.full_like(final, np.nan)
                stuck = u >= 1 - cl.escape_fraction
                _, unigram = run.curves(arm, "test_loss@unigram")
                esc, margin = gap_crossing(
                    steps, loss, unigram, cl.escape_fraction * gap, evaluation_noise(unigram, h_pi)
                )
                escapes[t] = esc
                row[t] = {
                    "final_test_loss": final.tolist(),
                    "u": u.tolist(),
                    "plateau_escape_step": esc.as_optional() if gap > 0 else [None] * final.size,
                    "stuck_fraction": float(np.mean(stuck)) if informative else None,
                }
                if informative and regime == "p+q<1":
                    _, ref = run.curves(arm, "test_loss@bayes")
                    d = loss[:, -1] - ref[:, -1]
                    row[t]["final_gap_to_bayes"] = d.tolist()
                    out.stage(
                        arm,
                        LEFT_PLATEAU,
                        final - unigram[:, -1],
                        -margin,
                        "lt",
                        evidence="final test loss − the unigram loss on the same batches, nats",
                    )
                    out.row(
                        "below-line-reaches-entropy-rate",
                        f"{tag}/{t}",
                        Sample(d, drift=run.drift(arm, "test_loss", minus="test_loss@bayes")),
                        arms=[arm],
                        context={"p": p, "q": q, "tying": t},
                        label=f"(p, q) = ({p:g}, {q:g}), {t}: final test loss − Bayes loss on the same batches ≈ 0",
                    )
            if informative and regime == "p+q>1" and {"tied", "untied"} <= set(escapes):
                a, b = escapes["tied"], escapes["untied"]
                out.row(
                    "tied-leaves-plateau-later",
                    tag,
                    Sample(a.steps, censored=a.censored, resolution=a.resolution),
                    Sample(b.steps, censored=b.censored, resolution=b.resolution),
                    arms=[self.train_arm(True, p, q), self.train_arm(False, p, q)],
                    context={"p": p, "q": q},
                    label=f"(p, q) = ({p:g}, {q:g}): plateau-escape step, tied − untied > 0",
                )
            cells[tag] = row
        out.values["training"] = cells
        # The stuck-at-the-horizon table, tied vs untied (a measurement: where each arm is when the run stops).
        ties = list(map(_tying, cfg.tying))
        lines = [
            "| (p, q) | regime | H(π) − rate | " + " | ".join(f"stuck at the end, {t}" for t in ties) + " |",
            "|" + "---|" * (3 + len(ties)),
        ]
        for r in cells.values():
            fr = [("—" if r[t]["stuck_fraction"] is None else f"{r[t]['stuck_fraction']:.2f}") for t in ties]
            lines.append(
                f"| ({r['p']:g}, {r['q']:g}) | {r['regime']} | {r['H_pi'] - r['entropy_rate']:.4f} | "
                + " | ".join(fr)
                + " |"
            )
        out.values["stuck_table"] = "\n".join(lines)

    # ------------------------------------------------------------------------------------------
    def notes(self, cfg: MarkovTyingConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        ls = cfg.landscape
        notes = []
        for tag, row in measured.values["landscape"].items():
            for t in map(_tying, cfg.tying):
                if t in row and row[t]["eig_min"]:
                    notes.append(
                        f"θ_π at {tag}, {t}: λ_min ∈ [{min(row[t]['eig_min']):.3g}, {max(row[t]['eig_min']):.3g}], "
                        f"λ_max ∈ [{min(row[t]['eig_max']):.3g}, {max(row[t]['eig_max']):.3g}] over d = {ls.dims} "
                        f"and points {ls.others}; closed-form c = π0π1(p+q-1) = {row['curvature_c']:.4f}."
                    )
        thr = 1 - cfg.claims.escape_fraction
        cells = measured.values["training"]
        for r in cells.values():
            parts = []
            for t in map(_tying, cfg.tying):
                u = np.array(r[t]["u"])
                left = [e for e in r[t]["plateau_escape_step"] if e is not None]
                parts.append(
                    f"{t} "
                    + (
                        "not informative"
                        if r[t]["stuck_fraction"] is None
                        else f"{int(np.sum(u >= thr))}/{len(u)} on the plateau at step {cfg.train.steps} "
                        f"(u = {u.mean():.2f} ± {u.std():.2f}); "
                        + (f"left it at steps {left}" if left else "none left it")
                    )
                )
            notes.append(
                f"Training at (p, q) = ({r['p']:g}, {r['q']:g}), {r['regime']}, H(π) − rate = "
                f"{r['H_pi'] - r['entropy_rate']:.4f} nats: " + "; ".join(parts) + "."
            )
        later = next((g for g in groups if g.id == "tied-leaves-plateau-later"), None)
        if later is not None and later.rows:
            notes.append(
                "A member that never left the plateau is censored at the last evaluation (a lower bound of its "
                "escape step), and escape steps are known to one evaluation interval: the direction is decided by "
                f"an exact sign test over the {cfg.members} paired members, which needs at least 6 members at 95 % "
                "(3/3 gives p = 0.25). A 6000-step run sees every tied member of "
                "(0.5, 0.8) leave the plateau, so 'tied stays at H(π)' is not what the runs show; 'tied leaves later' is."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    # ------------------------------------------------------------------------------------------
    figures = (
        Curves(
            "theta_pi_hessian.png",
            lambda cfg, m: [
                _landscape_panel(cfg, m["landscape"][chain_tag(p, q)], p, q) for p, q in cfg.landscape.chains
            ],
            title="θ_π: tied = (almost) PSD Hessian (local min) vs untied = negative eigenvalue (saddle)",
            size=(5.2, 4.0),
            legend=7,
        ),
        Curves(
            "test_loss_grid.png",
            lambda cfg, m: [_tying_panel(cfg, p, q) for p, q in cfg.grid],
            title="Test loss, tied vs untied (mean, band: min–max over members)",
            size=(4.6, 3.4),
            legend=6,
            columns=3,
        ),
    )

    def plot(self, cfg: MarkovTyingConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The grid of limits (its own figure), then the declared landscape and test-loss curves."""
        return [self._plot_grid(cfg, analysis, figdir), *super().plot(cfg, run, analysis, figdir)]

    @staticmethod
    def _plot_grid(cfg: MarkovTyingConfig, analysis: Analysis, figdir: Path) -> Path:
        from tdlab.report.figures import plt, pq_plane, save_figure

        cells = analysis.measurements["training"]
        fig, axes = plt.subplots(1, len(cfg.tying), figsize=(4.8 * len(cfg.tying), 4.2), squeeze=False)
        for ax, tied in zip(axes[0], cfg.tying, strict=True):
            t = _tying(tied)
            for r in cells.values():
                f = r[t]["stuck_fraction"]
                color = "lightgray" if f is None else plt.cm.Reds(0.15 + 0.85 * f)
                ax.scatter(r["p"], r["q"], s=900, color=color, edgecolor="k", marker="s")
                ax.text(r["p"], r["q"], "—" if f is None else f"{f:.2f}", ha="center", va="center", fontsize=9)
            xs = np.linspace(0, 1, 2)
            ax.plot(xs, 1 - xs, "k--", lw=1, label="p + q = 1")
            pq_plane(ax)
            ax.set_title(f"{t}: fraction on the H(π) plateau at the last step")
            ax.legend(fontsize=7, loc="lower left")
        fig.suptitle(
            f"Small init (σ = {cfg.model.init_std}), {cfg.train.steps} steps, d = {cfg.model.d}, {cfg.members} members per cell"
        )
        return save_figure(fig, figdir / "stuck_fraction_grid.png")
