"""``topics-landscape``: seed 004 (Li, Li, Risteski), Figs. 7, 8, App. F.5 — no training.

The exact finite-T loss ``L(α, β)`` of the one-layer model with one-hot embeddings, W^V frozen, and
attention of Assumption 2 (same word β, same topic α, other topic 1), under Assumption 1, evaluated
from the case terms of App. F.3 / F.4 *before* their asymptotic step
(:mod:`tdlab.theory.topics_landscape`), on a log grid of α, β ∈ [1e-4, 1e7], T = 100, v = 300,
τ ∈ {20, 40, 60, 80} (App. F.5), masking p_m = 0.15, p_c = p_r = 0.1.

* Fig. 8 — the **block** map: uniform blocks with **W_diff = 0** and the constant of q (F.21). Read off
  it: the minimiser γ* of γ = ((v − 1)α + β)/v (Remark 5) per τ, and Monte Carlo losses (sampled
  documents, masks and the model's loss) at pairs of (α, β) with equal γ, one estimate per member
  (independent seeds), the same documents for every point of a member.
* Fig. 7 — the **diagonal** map D^V (Def. 2). Read off it: the minimiser (α*, β*) per τ and the minimal
  loss against L(1, 1) (uniform attention).

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-landscape``).

Every exact computation is one deterministic measurement. γ* and (α*, β*) are the continuous minimisers
(golden section on a fine γ grid; Nelder–Mead from the grid argmin); each is known only as well as the
loss is flat around it, so every row on a minimiser carries that *resolution*: the log10 half-width over
which L stays within ``flat_rel`` (relative) of its minimum. The grid argmins are reported beside them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.claims import ClaimSpec, GroupResult, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Calibration, Hypothesis, Threshold
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.seeding import generators, member_seeds
from tdlab.theory import topics_landscape as tl
from tdlab.theory.topics_landscape import assumption4
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import FitResult

MC_ARM = "monte-carlo"
# the two readings of λ1 / λ4 (the theorems' proof, their statement)
VERSIONS: tuple[Literal["proof", "statement"], ...] = ("proof", "statement")


def tau_arm(tau: int) -> str:
    """Arm name of one τ, e.g. ``tau20``."""
    return f"tau{tau}"


Positive = Annotated[float, Field(gt=0.0)]
AlphaBeta = tuple[Positive, Positive]


class TopicsLandscapeConfig(ExperimentConfig):
    # The landscape is a closed form (no seed); members replicate the Monte Carlo checks.
    members: int = Field(2, ge=1, le=64)
    T: int = Field(100, ge=2, le=100_000)  # App. F.5: T = 100 (the Wikipedia setting of §6)
    v: int = Field(300, ge=2, le=100_000)  # App. F.5: v = 300 (Tv = 30000, the BERT vocabulary)
    taus: tuple[int, ...] = (20, 40, 60, 80)  # App. F.5, Figs. 7/8 left to right
    # App. F.5 does not state the masking; §6.1's BERT values (Devlin et al.)
    p_m: float = Field(0.15, gt=0.0, lt=1.0)
    p_c: float = Field(0.1, gt=0.0, lt=1.0)
    p_r: float = Field(0.1, gt=0.0, lt=1.0)
    grid_lo: float = Field(1e-4, gt=0.0)  # Figs. 7/8: α, β ∈ [1e-4, 1e7], log axes
    grid_hi: float = Field(1e7, gt=0.0)
    grid_n: int = Field(200, ge=8, le=2000)  # points per axis (quick 60, paper 200)
    gamma_n: int = Field(4001, ge=101, le=200_000)  # fine 1-D γ grid for γ* (then golden section)
    # Sanity: max |L(α, β) − L_γ(γ(α, β))| / L over the grid between the two derivations of the block map;
    # floating-point rounding is ~1e-16
    remark5_tol: float = Field(1e-9, gt=0.0, le=1e-3)
    # "increasing in τ": log10(x*(τ_{k+1}) / x*(τ_k)) must exceed this (well below the observed steps, ≥ 0.019
    # at the paper's settings; each minimiser's resolution is added on top by the judge)
    order_margin_log10: float = Field(1e-3, gt=0.0, le=1.0)
    # A minimiser is known to the log10 half-width where L stays within this relative rise of its minimum
    # (the refined-minimum sanity check's rounding allowance)
    flat_rel: float = Field(1e-12, gt=0.0, le=1e-3)
    # Monte Carlo (closed form vs sampled documents, masks and the model's loss), small setting
    mc_T: int = Field(3, ge=2, le=50)
    mc_v: int = Field(2, ge=1, le=50)
    mc_tau: int = Field(2, ge=1, le=49)
    mc_N: int = Field(40_000, ge=100, le=1_000_000)  # words per document (Assumption 1 is N → ∞; bias ~1/(N p_2))
    mc_docs: int = Field(400, ge=2, le=100_000)  # 1.6e7 words: standard error ≈ 0.2 % per member
    mc_points: Annotated[tuple[AlphaBeta, ...], Field(min_length=1)] = ((1.0, 1.0), (0.2, 30.0), (5.0, 3.0))  # (α, β)
    mc_tol: float = Field(0.01, gt=0.0, le=1.0)  # relative |MC − closed form| / closed form (1 %)
    # Remark 5 by Monte Carlo: at each γ, (α, β) = (γ, γ) against a same-word-heavy and a same-topic-heavy
    # pair with the same γ (the lighter weight remark5_eps · γ); the same documents for every point
    remark5_gammas: Annotated[tuple[Positive, ...], Field(min_length=1)] = (0.5, 3.0, 20.0)
    remark5_eps: float = Field(0.1, gt=0.0, lt=1.0)
    # torch intra-op threads while evaluating (CPU). The grid's elementwise ops cross torch's parallel
    # threshold at 200 × 200; on the shared 2-core machine two threads' OpenMP spin-waits made the paper
    # grid (4 τ × 2 maps) take 6.9 s instead of 0.03 s with one thread (measured). null: leave as is.
    threads: int | None = Field(1, ge=1, le=256)

    @field_validator("taus")
    @classmethod
    def _taus(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:
            raise ValueError("taus must list at least one τ")
        if any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError(f"taus must be strictly increasing, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _ranges(self) -> TopicsLandscapeConfig:
        if any(not (1 <= t < self.T) for t in self.taus):
            raise ValueError(f"taus: every τ must satisfy 1 ≤ τ < T = {self.T}, got {list(self.taus)}")
        if not (1 <= self.mc_tau < self.mc_T):
            raise ValueError(f"mc_tau: must satisfy 1 ≤ mc_tau < mc_T = {self.mc_T}, got {self.mc_tau}")
        if self.mc_v < 2:
            raise ValueError("mc_v: Remark 5 compares same-word and same-topic weights; it needs mc_v ≥ 2")
        if self.p_c + self.p_r > 1.0:
            raise ValueError(
                f"p_c + p_r: must be at most 1 (keep + replace probabilities), got {self.p_c + self.p_r:g}"
            )
        if not self.grid_lo < self.grid_hi:
            raise ValueError(f"grid_lo: must be below grid_hi, got {self.grid_lo:g} ≥ {self.grid_hi:g}")
        return self

    @property
    def masking(self) -> tl.Masking:
        return tl.Masking(self.p_m, self.p_c, self.p_r)


def _lam(cfg: TopicsLandscapeConfig) -> dict[str, float]:
    m, v = cfg.masking, cfg.v
    return {
        "l1_statement": tl.lambda1(m, "statement"),
        "l1_proof": tl.lambda1(m, "proof"),
        "l2": tl.lambda2(m),
        "l3": tl.lambda3(v, m),
        "l4_statement": tl.lambda4(v, m, "statement"),
        "l4_proof": tl.lambda4(v, m, "proof"),
        "l5": tl.lambda5(v, m),
        "c4": tl.c4(m),
    }


def thm_interval(
    cfg: TopicsLandscapeConfig, kind: str, ver: Literal["statement", "proof"], tau: int
) -> tuple[float, float]:
    """Thm. 3's (λ1(τ − 1), λ2 T) (``kind="thm3"``) or Thm. 5's (λ3 τ, λ4 T), with λ1 / λ4 of ``ver``."""
    if kind == "thm3":
        return tl.thm3_interval(cfg.T, tau, cfg.masking, ver)
    return tl.thm5_interval(cfg.T, cfg.v, tau, cfg.masking, ver)


def log_margin(x: float, lo: float, hi: float) -> float:
    """How far inside (lo, hi) ``x`` lies, in log10 units: ``min(log10 x − log10 lo, log10 hi − log10 x)``
    (negative outside; a bound ≤ 0 counts as met from its side)."""
    below = math.log10(x) - math.log10(lo) if lo > 0 else math.inf
    return min(below, math.log10(hi) - math.log10(x))


# ---- what the paper says: the theorems' hypotheses, how their limits are judged, the thresholds ---------------


ASSUMPTION_4 = Hypothesis(
    "Assumption 4 (Thms. 3, 5): p_m < 1/2, p_c = p_r ∈ (0, 1/2)", lambda cfg: assumption4(cfg.p_m, cfg.p_c, cfg.p_r)
)
ASSUMPTION_3_V = Hypothesis(
    "Assumption 3, no sparsely supported topics (Thms. 3, 5): v > (1/(1 − (1 − p_c)p_m) + 1)² + 1",
    lambda cfg: tl.assumption3_v(cfg.v, cfg.p_m, cfg.p_c),
)
# Remark 4 speaks of "the lower bound" of Thm. 3 as stated (λ1 = 0.577 at §6.1's masking; the proof's c_5 =
# 0.371 would need a larger τ): the statement's λ1 is the paper's words. A row without its τ is not met.
REMARK_4 = Hypothesis(
    "Remark 4: τ, T such that Thm. 3's lower bound λ1(τ − 1) exceeds 1 (λ1 as stated)",
    lambda cfg, row: "tau" in row.context and tl.lambda1(cfg.masking, "statement") * (row.context["tau"] - 1) > 1,
    on="row",
)
# Thm. 3 and Remark 4 are T → ∞ statements; App. F.5 claims at its finite T only "a variant" of Thm. 3's
# constraint (the corner-shaped region whose lower bounds grow with τ: block-gamma-star-increasing).
THM3_LIMIT = (
    "Thm. 3 (and Remark 4, which follows from it) hold as T → ∞, τ → ∞, τ = o(T) (Assumption 3). Judged on the "
    "exact finite-T loss at App. F.5's setting (F.3's case terms before the asymptotic step: the theory of the "
    "finite setting itself); the o(1) terms the theorem drops are not measured there, so its conclusion is applied "
    "with no allowance for them: a threshold of ours, uncalibrated, that can hold and never fail"
)
THM3_AT_FINITE_T = Threshold(
    "ours",
    "Thm. 3's conclusion applied at App. F.5's finite T with zero slack for the o(1) terms it drops (F.5: only 'a "
    "variant of this constraint visibly holds in the non-asymptotic setting')",
)
FIG7_QUOTE = (
    "Theorem 5 predicts that the loss is lowest when β is within an interval (boundaries controlled by τ and T), "
    "and α is less than a constant multiple of β. Both constraints are visible in the non-asymptotic setting"
)


def _growth_plant(cfg: TopicsLandscapeConfig, context: Mapping[str, Any]) -> tuple[Sample, Sample]:
    """Planted orderings at the run's shape (one exact value per row, as measured): a minimiser that grows as the
    theorems' lower bounds do -- λ3 τ (Thm. 5) grows as τ, λ1(τ − 1) (Thm. 3) faster, so log10(τ_{k+1}/τ_k), the
    weakest over the configured τ, satisfies "grows with τ" -- and one that does not move with τ (0), the
    alternative. ``order_margin_log10`` must tell them apart."""
    steps = [math.log10(b / a) for a, b in itertools.pairwise(cfg.taus)] or [math.log10(2.0)]
    sat, vio = planted_pair(min(steps), 0.0, 0.0, 1)
    return dataclasses.replace(sat, deterministic=True), dataclasses.replace(vio, deterministic=True)


GROWTH = Threshold(
    "ours",
    "order_margin_log10 = 1e-3: the log10 step of the minimiser between consecutive τ must exceed it (the paper "
    "states a direction; the margin is ours, well below the steps the bounds predict, ≥ 0.12)",
    Calibration(
        "planted",
        "a minimiser growing as the theorems' lower bounds (log10(τ_{k+1}/τ_k), the weakest step of the configured τ) "
        "holds; one that does not move with τ fails; one exact value each, as the rows",
        plant=_growth_plant,
        test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
    ),
)


def _interval_spec(kind: str, ver: str) -> ClaimSpec:
    thm, x, bounds = ("Thm. 3", "γ*", "(λ1(τ−1), λ2 T)") if kind == "thm3" else ("Thm. 5", "β*", "(λ3 τ, λ4 T)")
    how = {
        ("thm3", "proof"): "λ1 as the proof derives it (F.28: c_5); the statement's λ1 is the -as-stated group",
        ("thm3", "statement"): "λ1 as stated, not what the proof derives (c_5)",
        (
            "thm5",
            "proof",
        ): "λ4 as the proof derives it, c_7(1/(c_4 p_m p_r) + 1)v; the statement's is the -as-stated group",
        ("thm5", "statement"): "λ4 as stated: divides by √(v−1) − 2 + (1−p_c)p_m",
    }[(kind, ver)]
    gid = {"thm3": "block-gamma-star-in-thm3", "thm5": "diag-beta-star-in-thm5"}[kind] + (
        "" if ver == "proof" else "-as-stated"
    )
    what = "with block W^V the optimal γ" if kind == "thm3" else "with diagonal W^V the optimal β"
    if kind == "thm3":
        said: dict[str, Any] = {
            "quote": "Then, the optimal (α, β) satisfy (v − 1)/v α + 1/v β ∈ (λ1(τ − 1), λ2 T)",
            "where": "Thm. 3 (§5.3); App. F.5 ('a variant of this constraint visibly holds in the non-asymptotic "
            "setting')",
            "form": "limit",
            "limit": THM3_LIMIT,
            "threshold": THM3_AT_FINITE_T,
        }
    else:  # App. F.5 states Thm. 5's constraints at its finite setting: a statement at those settings
        said = {
            "quote": FIG7_QUOTE,
            "where": "App. F.5 (Fig. 7); Thm. 5 (App. F.4): λ3 τ < β < λ4 T",
            "form": "settings",
            "threshold": Threshold(
                "paper", f"Thm. 5's interval (λ3 τ, λ4 T), {how.split(';')[0]}; no margin (log-margin ≥ 0)"
            ),
        }
    return ClaimSpec(
        gid,
        f"{thm}{' (headline)' if ver == 'proof' else ' as stated'}: {what} lies in {bounds} ({how}; Figs. 7, 8)",
        hypotheses=(ASSUMPTION_4, ASSUMPTION_3_V),
        all_rows=True,
        **said,
        test="value",
        relation="ge",
        quantity=f"min(log10 {x} − log10 lower, log10 upper − log10 {x}) at τ: how far inside "
        f"the interval {x} (the refined minimiser, known to the loss's flatness around it) lies",
        expected=0.0,
        tolerance=0.0,
        horizon="static",
        learning_required=False,
    )


_CLAIMS_3 = tuple(_interval_spec("thm3", ver) for ver in VERSIONS)


def _diag_alpha_over_beta_below_lambda5_expected(cfg: Any, row: Any) -> float:
    return tl.lambda5(cfg.v, cfg.masking)


_CLAIMS_6 = tuple(_interval_spec("thm5", ver) for ver in VERSIONS)


@register
class TopicsLandscape(Experiment):
    Config = TopicsLandscapeConfig

    # ---- run --------------------------------------------------------------------------------------
    def run(self, cfg: TopicsLandscapeConfig, ctx: RunContext) -> None:
        with cpu_threads(cfg.threads, ctx.device):
            self._run(cfg, ctx)

    def _run(self, cfg: TopicsLandscapeConfig, ctx: RunContext) -> None:
        m = cfg.masking
        grid = tl.log_grid(cfg.grid_lo, cfg.grid_hi, cfg.grid_n)
        for tau in cfg.taus:
            arm = tau_arm(tau)
            if ctx.done(arm) is not None:
                continue
            t0 = time.perf_counter()
            block = tl.landscape("block", grid, grid, cfg.T, cfg.v, tau, m)
            diag = tl.landscape("diagonal", grid, grid, cfg.T, cfg.v, tau, m)
            wall = time.perf_counter() - t0
            r = tl.landscape_minimisers(grid, diag, cfg.T, cfg.v, tau, m, cfg.grid_lo, cfg.grid_hi, cfg.gamma_n)
            f = lambda x: torch.tensor(float(x), dtype=torch.float64)  # noqa: E731
            # the maps and curves as they are, the scalars (minimisers, their losses, L(1, 1)) as float64 tensors
            read = {k: x if isinstance(x, torch.Tensor) else f(x) for k, x in r.items()}
            state = {
                "grid": grid,
                "block": block,
                "block_via_gamma": read.pop("block_via_gamma"),
                "diagonal": diag,
                **read,
            }
            g_star, b_star = float(r["gamma_star"]), float(r["diag_beta_star"])
            rows = [
                (0, 0, "grid_eval_s", wall),
                (0, 0, "gamma_star", g_star),
                (0, 0, "diag_beta_star", b_star),
                (0, 0, "block_min", float(block.min())),
                (0, 0, "diag_min", float(diag.min())),
            ]
            ctx.record(arm, FitResult(rows=rows, states=[state]))
        if ctx.done(MC_ARM) is None:
            self._monte_carlo(cfg, ctx)

    @staticmethod
    def remark5_points(cfg: TopicsLandscapeConfig) -> list[tuple[float, float]]:
        """Every γ's three equal-γ points (:func:`~tdlab.theory.topics_landscape.equal_gamma_points`), γ-major."""
        return [p for g in cfg.remark5_gammas for p in tl.equal_gamma_points(g, cfg.mc_v, cfg.remark5_eps)]

    def _monte_carlo(self, cfg: TopicsLandscapeConfig, ctx: RunContext) -> None:
        """Per member (its own seed): the closed-form check at ``mc_points`` and Remark 5's equal-γ points, all
        on one set of documents and masks."""
        m = cfg.masking
        points = [*cfg.mc_points, *self.remark5_points(cfg)]
        n = len(cfg.mc_points)
        states, rows = [], []
        for e, seed in enumerate(member_seeds(cfg.seed, cfg.members)):
            g = generators([seed], "monte-carlo")[0]
            res = tl.monte_carlo_losses(points, cfg.mc_T, cfg.mc_v, cfg.mc_tau, cfg.mc_N, cfg.mc_docs, g, m)
            est, se, exact = [], [], []
            for kind in ("block", "diagonal"):
                fn = tl.block_loss if kind == "block" else tl.diagonal_loss
                est += res[kind][0][:n].tolist()
                se += res[kind][1][:n].tolist()
                exact += [float(fn(a, b, cfg.mc_T, cfg.mc_v, cfg.mc_tau, m)) for a, b in cfg.mc_points]
            t64 = lambda x: torch.tensor(np.asarray(x), dtype=torch.float64)  # noqa: E731
            states.append(
                {
                    "estimate": t64(est),
                    "se": t64(se),
                    "closed_form": t64(exact),
                    "remark5_block": t64(res["block"][0][n:]).view(-1, 3),
                    "remark5_diagonal": t64(res["diagonal"][0][n:]).view(-1, 3),
                }
            )
            rows += [(i, e, "mc_rel_dev", (x - c) / c) for i, (x, c) in enumerate(zip(est, exact, strict=True))]
        ctx.record(MC_ARM, FitResult(rows=rows, states=states))

    # ---- measure ----------------------------------------------------------------------------------
    def measure(self, cfg: TopicsLandscapeConfig, run: RunView) -> Measurements:
        """Every τ's minimisers (each with the resolution its flat neighbourhood allows), the interval and
        ordering rows, Remark 5 by Monte Carlo at equal γ, and the sanity rows. Exact computations are one
        deterministic value each."""
        m, T, v = cfg.masking, cfg.T, cfg.v
        lam = _lam(cfg)
        out = Measurements({"lambdas": lam})
        s = lambda x: float(x.reshape(-1)[0])  # noqa: E731  (stored scalars carry a member axis of 1)
        lg = {}  # τ -> (log10 γ*, its half-width), (log10 β*, its half-width)
        for tau in cfg.taus:
            a, arm = run.arrays(tau_arm(tau)), tau_arm(tau)
            ctx = {"tau": tau}
            grid, block, via, diag = a["grid"][0], a["block"][0], a["block_via_gamma"][0], a["diagonal"][0]
            dev = float(((block - via).abs() / via.abs()).max())
            out.row(
                "block-map-case-terms-match-gamma-form",
                arm,
                Sample((dev,), deterministic=True),
                context=ctx,
                label=f"τ={tau}: max |L(α,β) − L_γ(γ)|/L_γ = {dev:.2e}",
            )
            g, g_loss = s(a["gamma_star"]), s(a["gamma_star_loss"])
            # tl.flat_halfwidth calls each lambda below before it returns, within this iteration: B023 does not apply
            dg = tl.flat_halfwidth(lambda x: float(tl.block_loss_gamma(x, T, v, tau, m)), g, cfg.flat_rel)  # noqa: B023
            g_res = 2 * g * (10**dg - 1)
            out.row(
                "block-gamma-star-above-1",
                arm,
                Sample((g,), resolution=g_res, deterministic=True),
                context=ctx,
                label=f"τ={tau}: γ* = {g:.4g} > 1",
            )
            al, be, dl = s(a["diag_alpha_star"]), s(a["diag_beta_star"]), s(a["diag_star_loss"])
            db = tl.flat_halfwidth(lambda x: float(tl.diagonal_loss(al, x, T, v, tau, m)), be, cfg.flat_rel)  # noqa: B023
            da = tl.flat_halfwidth(lambda x: float(tl.diagonal_loss(x, be, T, v, tau, m)), al, cfg.flat_rel)  # noqa: B023
            for kind, x, half, name in (
                ("thm3", g, dg, "block-gamma-star-in-thm3"),
                ("thm5", be, db, "diag-beta-star-in-thm5"),
            ):
                for ver in VERSIONS:
                    lo, hi = thm_interval(cfg, kind, ver, tau)
                    out.row(
                        f"{name}{'' if ver == 'proof' else '-as-stated'}",
                        arm,
                        Sample((log_margin(x, lo, hi),), resolution=2 * half, deterministic=True),
                        context=ctx,
                        label=f"τ={tau}: {x:.5g} in ({lo:.4g}, {hi:.6g})",
                    )
            edge = al <= cfg.grid_lo * (1 + 1e-9)
            ratio = al / be
            # At the box edge α*/β* is an upper bound: it decides "below λ5" when it is below, and nothing
            # otherwise (censored: the judge leaves an all-censored row unresolved).
            out.row(
                "diag-alpha-over-beta-below-lambda5",
                arm,
                Sample(
                    (ratio,),
                    resolution=0.0 if edge else 2 * ratio * (10 ** (da + db) - 1),
                    censored=(edge and ratio > lam["l5"],),
                    censor="below",
                    deterministic=True,
                ),
                context=ctx,
                label=f"τ={tau}: α*/β* = {ratio:.3g}"
                + (
                    f" (α* at the box edge {cfg.grid_lo:g}, where the loss is flat in α: an upper bound)"
                    if edge
                    else ""
                ),
            )
            u_d, u_b = s(a["diag_uniform"]), s(a["block_uniform"])
            dmin = min(dl, float(diag.min()))
            out.row(
                "diag-min-below-uniform",
                arm,
                Sample((dmin - u_d,), deterministic=True),
                context=ctx,
                label=f"τ={tau}: min L = {dmin:.6f} vs L(1, 1) = {u_d:.6f}",
            )
            out.row(
                "uniform-attention-maps-agree",
                arm,
                Sample((abs(u_b - u_d) / abs(u_d),), deterministic=True),
                context=ctx,
            )
            bmin, gmin = float(block.min()), float(diag.min())
            out.row(
                "refined-minimum-at-most-grid",
                f"{arm}/block",
                Sample(((g_loss - bmin) / abs(bmin),), deterministic=True),
                context=ctx,
                label=f"τ={tau}: (L(γ*) − grid minimum)/|grid minimum| ≤ rounding",
            )
            out.row(
                "refined-minimum-at-most-grid",
                f"{arm}/diagonal",
                Sample(((dl - gmin) / abs(gmin),), deterministic=True),
                context=ctx,
                label=f"τ={tau}: (L(α*, β*) − grid minimum)/|grid minimum| ≤ rounding",
            )
            lg[tau] = ((math.log10(g) if g > 0 else math.nan, dg), (math.log10(be) if be > 0 else math.nan, db))
            kb, n = int(torch.argmin(block)), grid.numel()
            kd = int(torch.argmin(diag))
            out.values[arm] = {
                "gamma_star": g,
                "gamma_star_loss": g_loss,
                "gamma_star_log10_halfwidth": dg,
                "block_grid_argmin": {
                    "alpha": float(grid[kb % n]),
                    "beta": float(grid[kb // n]),
                    "gamma": float(tl.gamma_of(grid[kb % n], grid[kb // n], v)),
                    "loss": bmin,
                },
                "block_uniform_loss": u_b,
                "remark5_max_rel_dev": dev,
                "thm3_interval_proof": list(tl.thm3_interval(T, tau, m, "proof")),
                "thm3_interval_statement": list(tl.thm3_interval(T, tau, m, "statement")),
                "diag_alpha_star": al,
                "diag_alpha_star_at_box_edge": edge,
                "diag_beta_star": be,
                "diag_beta_star_log10_halfwidth": db,
                "diag_alpha_star_log10_halfwidth": da,
                "diag_star_loss": dl,
                "diag_grid_argmin": {"alpha": float(grid[kd % n]), "beta": float(grid[kd // n]), "loss": gmin},
                "diag_uniform_loss": u_d,
                "thm5_interval_proof": list(tl.thm5_interval(T, v, tau, m, "proof")),
                "thm5_interval_statement": list(tl.thm5_interval(T, v, tau, m, "statement")),
            }
        for t0, t1 in itertools.pairwise(cfg.taus):
            row, pair = f"tau{t0}-tau{t1}", {"taus": f"{t0}-{t1}"}
            for gid, j, sym in (("block-gamma-star-increasing", 0, "γ*"), ("diag-beta-star-increasing", 1, "β*")):
                (l0, d0), (l1, d1) = lg[t0][j], lg[t1][j]
                out.row(
                    gid,
                    row,
                    Sample((l1 - l0,), resolution=2 * (d0 + d1), deterministic=True),
                    context=pair,
                    label=f"log10 {sym}(τ={t1}) − log10 {sym}(τ={t0}) = {l1 - l0:.4f}",
                )
        self._measure_monte_carlo(cfg, run, out)
        out.values["grid_eval_s"] = {
            tau_arm(t): float(np.nansum(run.final(tau_arm(t), "grid_eval_s"))) for t in cfg.taus
        }
        return out

    def _measure_monte_carlo(self, cfg: TopicsLandscapeConfig, run: RunView, out: Measurements) -> None:
        mc = run.arrays(MC_ARM)
        labels = [f"{kind}/a{a:g}_b{b:g}" for kind in ("block", "diagonal") for a, b in cfg.mc_points]
        est, se, exact = mc["estimate"], mc["se"], mc["closed_form"]
        for i, lab in enumerate(labels):
            c = exact[:, i]
            rel_se = (se[:, i] / c.abs()).numpy()
            out.row(
                "monte-carlo-matches-closed-form",
                lab,
                Sample(
                    ((est[:, i] - c) / c).numpy(),
                    deterministic=True,
                    mc_se=float(np.sqrt(np.sum(rel_se**2))) / len(rel_se),
                ),
                context={"point": lab},
            )
        out.values["monte_carlo"] = {
            lab: {"closed_form": float(exact[0, i]), "estimates": est[:, i].tolist(), "se": se[:, i].tolist()}
            for i, lab in enumerate(labels)
        }
        block, diag = mc["remark5_block"], mc["remark5_diagonal"]  # (E, n_gamma, 3)
        remark5 = {}
        for j, gam in enumerate(cfg.remark5_gammas):
            pts = tl.equal_gamma_points(gam, cfg.mc_v, cfg.remark5_eps)
            for k, what in ((1, "same-word heavy"), (2, "same-topic heavy")):
                a, b = pts[k]
                rel = (block[:, j, k] / block[:, j, 0] - 1).numpy()
                contrast = (diag[:, j, k] / diag[:, j, 0] - 1).numpy()
                key = f"gamma{gam:g}/a{a:.3g}_b{b:.3g}"
                out.row(
                    "block-gamma-only",
                    key,
                    Sample(rel),
                    context={"gamma": gam, "alpha": a, "beta": b, "T": cfg.mc_T, "v": cfg.mc_v, "tau": cfg.mc_tau},
                    label=f"γ = {gam:g}, {what} (α, β) = ({a:.3g}, {b:.3g}) vs ({gam:g}, {gam:g}): L_block ratio − 1 ≈ 0",
                )
                remark5[key] = {"block_rel_diff": rel.tolist(), "diagonal_rel_diff": contrast.tolist()}
        out.values["remark5_monte_carlo"] = remark5

    def notes(self, cfg: TopicsLandscapeConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        by = {g.id: g.verdict for g in groups}

        def inside(gid: str) -> str:
            """Where the minimiser lies against a theorem's interval (its rows' log-margins), beside the verdict:
            Thm. 3's groups cannot fail at finite T (an uncalibrated threshold), so the verdict alone hides a miss."""
            out = [r.context.get("tau") for r in measured.rows.get(gid, []) if r.measured.values[0] < 0]
            where = "inside at every τ" if not out else f"outside at τ = {', '.join(map(str, out))}"
            return f"{by[gid]} ({where})"

        t3p, t3s = inside("block-gamma-star-in-thm3"), inside("block-gamma-star-in-thm3-as-stated")
        t5p, t5s = by["diag-beta-star-in-thm5"], by["diag-beta-star-in-thm5-as-stated"]
        T, v = cfg.T, cfg.v
        vals = {t: measured.values[tau_arm(t)] for t in cfg.taus}
        edge = [t for t in cfg.taus if vals[t]["diag_alpha_star_at_box_edge"]]
        inner = [t for t in cfg.taus if t not in edge]
        where = []
        if edge:
            where.append(
                f"at τ = {', '.join(map(str, edge))} α* sits at the box edge α = {cfg.grid_lo:g} (the loss is "
                "flat in α for (v−1)α ≪ β): α*/β* is an upper bound there"
            )
        if inner:
            where.append(
                f"at τ = {', '.join(map(str, inner))} α* is interior: "
                + ", ".join(f"{vals[t]['diag_alpha_star']:.3g}" for t in inner)
            )
        r5 = measured.values["remark5_monte_carlo"]
        worst = max(abs(x) for r in r5.values() for x in r["block_rel_diff"])
        contrast = min(abs(x) for r in r5.values() for x in r["diagonal_rel_diff"])
        return [
            *super().notes(cfg, measured, groups),
            "Ambiguity (Thm. 3, λ1): the statement's (lambdas: l1_statement) vs the proof's c_5 (l1_proof). γ* in "
            f"(λ1(τ−1), λ2 T): with the proof's λ1 {t3p}, with the statement's {t3s}; the headline groups use the "
            "proof's (what F.28 derives)"
            + ("; both are consistent with the landscape here." if t3p == t3s == "holds (inside at every τ)" else ".")
            + " Thm. 3 is a T → ∞ statement judged at finite T: a miss is not resolved, never a failure.",
            "Ambiguity (Thm. 5, λ4): the statement divides by (√(v−1) − 2 + (1−p_c)p_m) (lambdas: l4_statement), the "
            f"proof multiplies (l4_proof). β* in (λ3 τ, λ4 T): proof {t5p}, statement {t5s}; headline on the proof's.",
            f"Thms. 3, 5 are asymptotic (T → ∞, τ = o(T)) and are tested here at T = {T}, v = {v}, τ/T up to {max(cfg.taus) / T:.2f}.",
            "γ*: "
            + ", ".join(f"τ={t}: {vals[t]['gamma_star']:.4g}" for t in cfg.taus)
            + "; diagonal β*: "
            + ", ".join(f"τ={t}: {vals[t]['diag_beta_star']:.5g}" for t in cfg.taus)
            + "; "
            + "; ".join(where)
            + ".",
            f"Remark 5 by Monte Carlo (T={cfg.mc_T}, v={cfg.mc_v}, τ={cfg.mc_tau}, N={cfg.mc_N}, {cfg.mc_docs} documents "
            f"per member): the block map's loss moves by at most {worst:.2g} (relative) between (α, β) pairs of equal γ, "
            f"while the diagonal map's moves by at least {contrast:.2g} at the same points (the test can tell).",
        ]

    # ---- plot -------------------------------------------------------------------------------------
    def plot(self, cfg: TopicsLandscapeConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        m = cfg.masking
        paths = []
        lo, hi = math.log10(cfg.grid_lo), math.log10(cfg.grid_hi)
        ext = (lo, hi, lo, hi)
        n = len(cfg.taus)
        for kind, fname, title in (
            ("diagonal", "fig7_diagonal.png", f"Fig. 7 — diagonal W^V: L(α, β), T={cfg.T}, v={cfg.v} (darker = lower)"),
            (
                "block",
                "fig8_block.png",
                f"Fig. 8 — block W^V (W_diff = 0, the map of F.21): L(α, β), T={cfg.T}, v={cfg.v}",
            ),
        ):
            fig, axes = plt.subplots(1, n, figsize=(5.0 * n, 4.4), squeeze=False, layout="constrained")
            for ax, tau in zip(axes[0], cfg.taus, strict=True):
                a = run.arrays(tau_arm(tau))
                L = a[kind][0].numpy()
                im = ax.imshow(L, origin="lower", extent=ext, aspect="auto", cmap="viridis")
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
                xs = np.linspace(lo, hi, 200)
                if kind == "block":
                    g = float(a["gamma_star"].reshape(-1)[0])
                    for gam, style, lab in (
                        (g, "-", f"γ* = {g:.3g}"),
                        (tl.lambda1(m, "proof") * (tau - 1), ":", "γ = λ1(τ−1), proof"),
                        (tl.lambda1(m, "statement") * (tau - 1), "--", "γ = λ1(τ−1), statement"),
                        (tl.lambda2(m) * cfg.T, "-.", "γ = λ2 T"),
                    ):
                        # the line γ = const, parametrised so both asymptotes are drawn: α = t vγ/(v−1), β = (1−t) vγ
                        tt = 1.0 / (1.0 + np.exp(-np.linspace(-40, 40, 801)))
                        al_, be_ = tt * cfg.v * gam / (cfg.v - 1), (1 - tt) * cfg.v * gam
                        ok = (al_ > 0) & (be_ > 0)
                        ax.plot(
                            np.log10(al_[ok]),
                            np.log10(be_[ok]),
                            style,
                            color="w" if style == "-" else "orange",
                            lw=1.2,
                            label=lab,
                        )
                else:
                    al = float(a["diag_alpha_star"].reshape(-1)[0])
                    be = float(a["diag_beta_star"].reshape(-1)[0])
                    ax.plot(
                        [math.log10(al)],
                        [math.log10(be)],
                        "*",
                        color="w",
                        ms=12,
                        mec="k",
                        label=f"(α*, β*) β*={be:.3g}",
                    )
                    for ver, style in zip(VERSIONS, (":", "--"), strict=True):
                        b_lo, b_hi = tl.thm5_interval(cfg.T, cfg.v, tau, m, ver)
                        for b in (b_lo, b_hi):
                            if b > 0:
                                ax.axhline(math.log10(b), ls=style, color="orange", lw=1.0)
                        ax.plot([], [], style, color="orange", label=f"λ3τ, λ4T ({ver})")
                    ax.plot(xs, xs - math.log10(tl.lambda5(cfg.v, m)), "-.", color="r", lw=1.0, label="α = λ5 β")
                ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="log10 α", ylabel="log10 β", title=f"τ = {tau}")
                ax.legend(fontsize=6, loc="lower right")
            fig.suptitle(title)
            paths.append(save_figure(fig, figdir / fname))
        # L(γ) for the block map, one curve per τ, with γ* and Thm. 3's bounds
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for tau in cfg.taus:
            a = run.arrays(tau_arm(tau))
            gammas, curve = a["gamma_curve_g"][0].numpy(), a["gamma_curve"][0].numpy()
            (line,) = ax.plot(gammas, curve, label=f"τ = {tau}")
            gs = float(a["gamma_star"].reshape(-1)[0])
            ax.axvline(gs, color=line.get_color(), lw=0.8, ls="--")
        ax.set(
            xscale="log",
            xlabel="γ = ((v−1)α + β)/v",
            ylabel="L (block W^V)",
            title="Block W^V: L depends on γ only (Remark 5); dashed: γ*",
        )
        ax.legend(fontsize=8)
        paths.append(save_figure(fig, figdir / "block_gamma_curve.png"))
        return paths
