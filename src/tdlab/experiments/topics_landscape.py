"""``topics-landscape``: seed 004 (Li, Li, Risteski), Figs. 7, 8, App. F.5 — no training.

The exact finite-T loss ``L(α, β)`` of the one-layer model with one-hot embeddings, W^V frozen, and
attention of Assumption 2 (same word β, same topic α, other topic 1), under Assumption 1, evaluated
from the case terms of App. F.3 / F.4 *before* their asymptotic step
(:mod:`tdlab.theory.topics_landscape`), on a log grid of α, β ∈ [1e-4, 1e7], T = 100, v = 300,
τ ∈ {20, 40, 60, 80} (App. F.5), masking p_m = 0.15, p_c = p_r = 0.1 (§6.1; App. F.5 states none).

* Fig. 8 — the **block** map: uniform blocks with **W_diff = 0** and the constant of q (F.21), the map
  the proof of Thm. 3 uses, *not exactly* Thm. 2's W^{V*}. Claims: L depends on (α, β) only through
  γ = ((v − 1)α + β)/v (Remark 5; max relative deviation ≤ 1e-9 between the (α, β) case terms and
  the γ form); γ* > 1 (Remark 4); γ* increasing in τ; γ* inside Thm. 3's (λ1(τ − 1), λ2 T).
* Fig. 7 — the **diagonal** map D^V (Def. 2). Claims: β* increasing in τ, α*/β* < λ5, β* inside
  Thm. 5's (λ3 τ, λ4 T), min L below L(1, 1) (uniform attention).

Seed ambiguities, recorded (also in the config comments and the analysis notes):

* Thm. 3's λ1 differs between statement (0.577) and proof (c_5 = 0.371 at the paper's masking);
  Thm. 5's λ4 divides by (√(v−1) − 2 + (1−p_c)p_m) in the statement and multiplies in the proof.
  Both are evaluated. The *headline* groups use the proof's constants (what F.28 / F.4's case
  analysis actually derives); the as-stated versions are separate groups, and the notes say which
  of the two the landscape is consistent with.
* Thms. 3, 5 are asymptotic (T → ∞, τ = o(T), Assumption 3); here T = 100 and τ/T up to 0.8, as
  App. F.5 plots them. The interval claims test the theorems' bounds at the finite setting.
* The diagonal loss is flat in α once (v − 1)α ≪ β; its minimiser over the box sits at the grid's
  lower α edge, so α* is the box's, not the theorem's: α*/β* < λ5 then holds by a wide margin.

Orderings are deterministic (one evaluation per τ), so "increasing" is a ``value`` row on
log10(x*(τ_{k+1}) / x*(τ_k)) ≥ ``order_margin_log10`` (not a member ``compare``, which needs a
seed-to-seed spread). γ* and (α*, β*) are the continuous minimisers (golden section on a fine γ
grid; L-BFGS-B from the grid argmin), so ties of the grid's resolution do not decide a claim; the
grid argmins are reported beside them and a sanity group checks the refined minimum is below the
grid's. A Monte Carlo sanity group checks the closed forms against sampled documents at small
(T, v, τ) — one estimate per member (independent seeds).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.report.figures import plt, save_figure
from tdlab.runs import Run
from tdlab.seeding import generators, member_seeds
from tdlab.theory import topics_landscape as tl
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import FitResult

__all__ = ["TopicsLandscapeConfig", "TopicsLandscape", "tau_arm", "MC_ARM"]

MC_ARM = "monte-carlo"


def tau_arm(tau: int) -> str:
    """Arm name of one τ, e.g. ``tau20``."""
    return f"tau{tau}"


class TopicsLandscapeConfig(ExperimentConfig):
    # The landscape is a closed form (no seed); members only replicate the Monte Carlo sanity check.
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
    grid_n: int = Field(200, ge=8, le=2000)  # points per axis (issue 13: quick 60, paper 200)
    gamma_n: int = Field(4001, ge=101, le=200_000)  # fine 1-D γ grid for γ* (then golden section)
    # Remark 5: max |L(α, β) − L_γ(γ(α, β))| / L over the grid; floating-point rounding is ~1e-16
    remark5_tol: float = Field(1e-9, gt=0.0, le=1e-3)
    # "increasing in τ": log10(x*(τ_{k+1}) / x*(τ_k)) must exceed this (the refined minimisers are
    # fixed to ~1e-6 in log10 (L is flat to float rounding that close to its minimum), so this is far
    # above their error and well below the observed steps, ≥ 0.019 at the paper's settings)
    order_margin_log10: float = Field(1e-3, gt=0.0, le=1.0)
    # Monte Carlo sanity (closed form vs sampled documents, masks and the model's loss), small setting
    mc_T: int = Field(3, ge=2, le=50)
    mc_v: int = Field(2, ge=1, le=50)
    mc_tau: int = Field(2, ge=1, le=49)
    mc_N: int = Field(40_000, ge=100, le=1_000_000)  # words per document (Assumption 1 is N → ∞; bias ~1/(N p_2))
    mc_docs: int = Field(400, ge=2, le=100_000)  # 1.6e7 words: standard error ≈ 0.2 % per member
    mc_points: tuple[tuple[float, float], ...] = ((1.0, 1.0), (0.2, 30.0), (5.0, 3.0))  # (α, β)
    mc_tol: float = Field(0.01, gt=0.0, le=1.0)  # relative |MC − closed form| / closed form (issue 13: 1 %)
    # torch intra-op threads while evaluating (CPU). The grid's elementwise ops cross torch's parallel
    # threshold at 200 × 200; on the shared 2-core machine two threads' OpenMP spin-waits made the paper
    # grid (4 τ × 2 maps) take 6.9 s instead of 0.03 s with one thread (measured). null: leave as is.
    threads: int | None = Field(1, ge=1, le=256)

    @field_validator("taus")
    @classmethod
    def _taus(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:
            raise ValueError("taus must list at least one τ")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"taus must be strictly increasing, got {list(v)}")
        return v

    @field_validator("mc_points")
    @classmethod
    def _points(cls, v: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        if not v or any(a <= 0 or b <= 0 for a, b in v):
            raise ValueError("mc_points must be a non-empty list of [alpha, beta] pairs, both > 0")
        return v

    @model_validator(mode="after")
    def _ranges(self) -> TopicsLandscapeConfig:
        if any(not (1 <= t < self.T) for t in self.taus):
            raise ValueError(f"taus: every τ must satisfy 1 ≤ τ < T = {self.T}, got {list(self.taus)}")
        if not (1 <= self.mc_tau < self.mc_T):
            raise ValueError(f"mc_tau: must satisfy 1 ≤ mc_tau < mc_T = {self.mc_T}, got {self.mc_tau}")
        if self.p_c + self.p_r > 1.0:
            raise ValueError(f"p_c + p_r: must be at most 1 (keep + replace probabilities), got {self.p_c + self.p_r:g}")
        if not self.grid_lo < self.grid_hi:
            raise ValueError(f"grid_lo: must be below grid_hi, got {self.grid_lo:g} ≥ {self.grid_hi:g}")
        return self

    @property
    def masking(self) -> tl.Masking:
        return tl.Masking(self.p_m, self.p_c, self.p_r)


@register
class TopicsLandscape(Experiment):
    name = "topics-landscape"
    paper = "004 Topic structure (Li, Li, Risteski)"
    figure = "Figs. 7, 8 (App. F.5; Thms. 3, 5, Remark 5)"
    description = (
        "No training: the exact finite-T squared loss L(α, β) of the one-layer model with one-hot embeddings, "
        "W^V frozen and Assumption-2 attention (same word β, same topic α, other 1), from App. F.3/F.4's case "
        "terms before the asymptotic step, on a log grid α, β ∈ [1e-4, 1e7], T = 100, v = 300, τ ∈ {20, 40, 60, 80}. "
        "Fig. 8, block W^V (W_diff = 0, the proof's map): L depends on γ = ((v−1)α + β)/v only (Remark 5); γ* > 1, "
        "increasing in τ, inside Thm. 3's (λ1(τ−1), λ2 T), λ1 as in the proof and as stated. Fig. 7, diagonal D^V: "
        "β* increasing in τ, α*/β* < λ5, β* inside Thm. 5's (λ3 τ, λ4 T) (λ4 as in the proof and as stated), "
        "min L below uniform attention L(1, 1)."
    )
    Config = TopicsLandscapeConfig
    profiles = {
        "quick": {"grid_n": 60, "members": 2},  # issue 13: 60 × 60
        "paper": {"grid_n": 200, "members": 4},  # 200 × 200
    }

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
            gam = tl.gamma_of(grid.view(1, -1), grid.view(-1, 1), cfg.v)
            block_gamma = tl.block_loss_gamma(gam, cfg.T, cfg.v, tau, m)
            curve_g = tl.log_grid(cfg.grid_lo, cfg.grid_hi, cfg.gamma_n)
            curve = tl.block_loss_gamma(curve_g, cfg.T, cfg.v, tau, m)
            g_star, g_loss = tl.gamma_star(cfg.T, cfg.v, tau, m, lo=cfg.grid_lo, hi=cfg.grid_hi, n=cfg.gamma_n)
            k = int(torch.argmin(diag))
            a_star, b_star, d_loss = tl.diagonal_minimum(cfg.T, cfg.v, tau, m, lo=cfg.grid_lo, hi=cfg.grid_hi,
                                                         start=(float(grid[k % cfg.grid_n]), float(grid[k // cfg.grid_n])))
            f = lambda x: torch.tensor(float(x), dtype=torch.float64)  # noqa: E731
            state = {
                "grid": grid, "block": block, "block_via_gamma": block_gamma, "diagonal": diag,
                "gamma_curve_g": curve_g, "gamma_curve": curve,
                "gamma_star": f(g_star), "gamma_star_loss": f(g_loss),
                "diag_alpha_star": f(a_star), "diag_beta_star": f(b_star), "diag_star_loss": f(d_loss),
                "block_uniform": f(tl.block_loss(1.0, 1.0, cfg.T, cfg.v, tau, m)),
                "diag_uniform": f(tl.diagonal_loss(1.0, 1.0, cfg.T, cfg.v, tau, m)),
            }
            rows = [(0, 0, "grid_eval_s", wall), (0, 0, "gamma_star", g_star), (0, 0, "diag_beta_star", b_star),
                    (0, 0, "block_min", float(block.min())), (0, 0, "diag_min", float(diag.min()))]
            ctx.record(arm, FitResult(rows=rows, states=[state]))
        if ctx.done(MC_ARM) is None:
            self._monte_carlo(cfg, ctx)

    def _monte_carlo(self, cfg: TopicsLandscapeConfig, ctx: RunContext) -> None:
        m = cfg.masking
        states, rows = [], []
        for e, seed in enumerate(member_seeds(cfg.seed, cfg.members)):
            g = generators([seed], "monte-carlo")[0]
            res = tl.monte_carlo_losses(cfg.mc_points, cfg.mc_T, cfg.mc_v, cfg.mc_tau, cfg.mc_N, cfg.mc_docs, g, m)
            est, se, exact = [], [], []
            for kind in ("block", "diagonal"):
                fn = tl.block_loss if kind == "block" else tl.diagonal_loss
                est += res[kind][0].tolist()
                se += res[kind][1].tolist()
                exact += [float(fn(a, b, cfg.mc_T, cfg.mc_v, cfg.mc_tau, m)) for a, b in cfg.mc_points]
            states.append({"estimate": torch.tensor(est, dtype=torch.float64), "se": torch.tensor(se, dtype=torch.float64),
                           "closed_form": torch.tensor(exact, dtype=torch.float64)})
            rows += [(i, e, "mc_rel_dev", (x - c) / c) for i, (x, c) in enumerate(zip(est, exact))]
        ctx.record(MC_ARM, FitResult(rows=rows, states=states))

    # ---- analyse ----------------------------------------------------------------------------------
    def analyse(self, cfg: TopicsLandscapeConfig, run: Run) -> Analysis:
        """Paper groups (Remark 5; γ* > 1, increasing, in Thm. 3's interval with λ1 from the proof
        (headline) and as stated; β* increasing, α*/β* < λ5, β* in Thm. 5's interval with λ4 from the
        proof (headline) and as stated, min L below L(1, 1)) and sanity groups (Monte Carlo vs closed
        form; block and diagonal agree at uniform attention; refined minima at or below the grid's).
        Every exact computation is one deterministic measurement (``deterministic=True``)."""
        m = cfg.masking
        T, v = cfg.T, cfg.v
        out = Analysis()
        lam = {"l1_statement": tl.lambda1(m, "statement"), "l1_proof": tl.lambda1(m, "proof"), "l2": tl.lambda2(m),
               "l3": tl.lambda3(v, m), "l4_statement": tl.lambda4(v, m, "statement"), "l4_proof": tl.lambda4(v, m, "proof"),
               "l5": tl.lambda5(v, m), "c4": tl.c4(m)}
        out.measurements["lambdas"] = lam
        det = {"deterministic": True, "learning_required": False}
        A = {tau: run.arrays(tau_arm(tau)) for tau in cfg.taus}
        s = lambda x: float(x.reshape(-1)[0])  # noqa: E731  (stored scalars carry a member axis of 1)

        remark5 = out.group("block-gamma-only",
                            f"Remark 5: with block W^V (uniform blocks, W_diff = 0) the loss depends on (α, β) only through "
                            f"γ = ((v−1)α + β)/v; max relative deviation between the (α, β) case terms and the γ form over the "
                            f"{cfg.grid_n}×{cfg.grid_n} grid ≤ {cfg.remark5_tol:g}")
        above1 = out.group("block-gamma-star-above-1",
                           "Remark 4 / Thm. 3: with block W^V the optimal γ exceeds 1 (same-topic attention above "
                           "different-topic attention on average)")
        g_inc = out.group("block-gamma-star-increasing", "Fig. 8: with block W^V the optimal γ grows with τ")
        thm3 = {ver: out.group(gid, f"Thm. 3{txt}: with block W^V the optimal γ lies in (λ1(τ−1), λ2 T), "
                                    f"λ1 = {lam['l1_' + ver]:.4f}{why}, λ2 = {lam['l2']:.1f}")
                for ver, gid, txt, why in (
                    ("proof", "block-gamma-star-in-thm3", " (λ1 as the proof derives it, F.28: c_5; headline)",
                     " — the statement's λ1 differs, see block-gamma-star-in-thm3-as-stated"),
                    ("statement", "block-gamma-star-in-thm3-as-stated", " as stated (λ1 of the statement)",
                     " — not what the proof derives (c_5)"))}
        b_inc = out.group("diag-beta-star-increasing", "Fig. 7 / Thm. 5: with diagonal W^V the optimal β grows with τ")
        ratio = out.group("diag-alpha-over-beta-below-lambda5",
                          f"Thm. 5: with diagonal W^V the optimal α < λ5 β, λ5 = {lam['l5']:.4g}")
        thm5 = {ver: out.group(gid, f"Thm. 5{txt}: with diagonal W^V the optimal β lies in (λ3 τ, λ4 T), "
                                    f"λ3 = {lam['l3']:.4g}, λ4 = {lam['l4_' + ver]:.6g}")
                for ver, gid, txt in (("proof", "diag-beta-star-in-thm5", " (λ4 as the proof derives it, c_7(1/(c_4 p_m p_r) + 1)v; headline)"),
                                      ("statement", "diag-beta-star-in-thm5-as-stated", " as stated (λ4 divides by √(v−1) − 2 + (1−p_c)p_m)"))}
        below = out.group("diag-min-below-uniform",
                          "Fig. 7: with diagonal W^V the minimal loss is below the loss at uniform attention L(1, 1)")
        uniform = out.sanity("uniform-attention-maps-agree",
                             "At α = β = 1 (uniform attention over word keys) the block and diagonal maps predict the same "
                             "(every word of a present topic has the same attention): L_block(1, 1) = L_diag(1, 1) to 1e-12 (relative)")
        refined = out.sanity("refined-minimum-at-most-grid",
                             "The refined minimisers (golden section on γ; L-BFGS-B on (log α, log β)) reach a loss at or "
                             "below the grid's minimum (they refine, not replace, the figure's argmin)")

        gs, bs = {}, {}
        for tau in cfg.taus:
            a = A[tau]
            arm = tau_arm(tau)
            grid = a["grid"][0]
            block, via = a["block"][0], a["block_via_gamma"][0]
            dev = float(((block - via).abs() / via.abs()).max())
            remark5.value(arm, [dev], 0.0, cfg.remark5_tol, "le", **det,
                          statement=f"τ={tau}: max |L(α,β) − L_γ(γ)|/L_γ = {dev:.2e} ≤ {cfg.remark5_tol:g}")
            g = s(a["gamma_star"])
            gs[tau] = g
            above1.value(arm, [g], 1.0, 0.0, "ge", **det, statement=f"τ={tau}: γ* = {g:.4g} > 1")
            for ver, grp in thm3.items():
                lo, hi = tl.thm3_interval(T, tau, m, ver)
                grp.value(f"{arm}/lower", [g], lo, 0.0, "ge", **det, statement=f"τ={tau}: γ* = {g:.4g} > λ1(τ−1) = {lo:.4g}")
                grp.value(f"{arm}/upper", [g], hi, 0.0, "le", **det, statement=f"τ={tau}: γ* = {g:.4g} < λ2 T = {hi:.4g}")
            # diagonal
            diag = a["diagonal"][0]
            k = int(torch.argmin(diag))
            ga, gb = float(grid[k % grid.numel()]), float(grid[k // grid.numel()])
            al, be, dl = s(a["diag_alpha_star"]), s(a["diag_beta_star"]), s(a["diag_star_loss"])
            bs[tau] = be
            ratio.value(arm, [al / be], lam["l5"], 0.0, "le", **det,
                        statement=f"τ={tau}: α*/β* = {al / be:.3g} < λ5 = {lam['l5']:.4g} (α* = {al:.3g} at the box edge "
                                  f"{cfg.grid_lo:g} where the loss is flat in α)" if al <= cfg.grid_lo * (1 + 1e-9) else
                                  f"τ={tau}: α*/β* = {al / be:.3g} < λ5 = {lam['l5']:.4g}")
            for ver, grp in thm5.items():
                lo, hi = tl.thm5_interval(T, v, tau, m, ver)
                grp.value(f"{arm}/lower", [be], lo, 0.0, "ge", **det, statement=f"τ={tau}: β* = {be:.5g} > λ3 τ = {lo:.4g}")
                grp.value(f"{arm}/upper", [be], hi, 0.0, "le", **det, statement=f"τ={tau}: β* = {be:.5g} < λ4 T = {hi:.6g}")
            u_d, u_b = s(a["diag_uniform"]), s(a["block_uniform"])
            dmin = min(dl, float(diag.min()))
            below.value(arm, [dmin], u_d, 0.0, "le", **det,
                        statement=f"τ={tau}: min L = {dmin:.6f} < L(1, 1) = {u_d:.6f}")
            uniform.value(arm, [abs(u_b - u_d) / abs(u_d)], 0.0, 1e-12, "le", **det)
            bmin = float(block.min())
            refined.value(f"{arm}/block", [s(a["gamma_star_loss"]) - bmin], 0.0, 1e-12 * abs(bmin), "le", **det,
                          statement=f"τ={tau}: L(γ*) − min over the grid ≤ 0 (rounding 1e-12 relative)")
            refined.value(f"{arm}/diagonal", [dl - float(diag.min())], 0.0, 1e-12 * abs(dl), "le", **det,
                          statement=f"τ={tau}: L(α*, β*) − min over the grid ≤ 0 (rounding 1e-12 relative)")
            kb = int(torch.argmin(block))
            out.measurements[arm] = {
                "gamma_star": g, "gamma_star_loss": s(a["gamma_star_loss"]),
                "block_grid_argmin": {"alpha": float(grid[kb % grid.numel()]), "beta": float(grid[kb // grid.numel()]),
                                      "gamma": float(tl.gamma_of(grid[kb % grid.numel()], grid[kb // grid.numel()], v)), "loss": bmin},
                "block_uniform_loss": u_b, "remark5_max_rel_dev": dev,
                "thm3_interval_proof": list(tl.thm3_interval(T, tau, m, "proof")),
                "thm3_interval_statement": list(tl.thm3_interval(T, tau, m, "statement")),
                "diag_alpha_star": al, "diag_beta_star": be, "diag_star_loss": dl,
                "diag_grid_argmin": {"alpha": ga, "beta": gb, "loss": float(diag.min())}, "diag_uniform_loss": u_d,
                "thm5_interval_proof": list(tl.thm5_interval(T, v, tau, m, "proof")),
                "thm5_interval_statement": list(tl.thm5_interval(T, v, tau, m, "statement")),
            }
        for t0, t1 in zip(cfg.taus, cfg.taus[1:]):
            row = f"tau{t0}-tau{t1}"
            dg = math.log10(gs[t1] / gs[t0]) if gs[t0] > 0 and gs[t1] > 0 else float("nan")
            g_inc.value(row, [dg], cfg.order_margin_log10, 0.0, "ge", **det,
                        statement=f"γ*(τ={t1}) = {gs[t1]:.4g} > γ*(τ={t0}) = {gs[t0]:.4g}: log10 ratio {dg:.4f} ≥ {cfg.order_margin_log10:g}")
            db = math.log10(bs[t1] / bs[t0]) if bs[t0] > 0 and bs[t1] > 0 else float("nan")
            b_inc.value(row, [db], cfg.order_margin_log10, 0.0, "ge", **det,
                        statement=f"β*(τ={t1}) = {bs[t1]:.5g} > β*(τ={t0}) = {bs[t0]:.5g}: log10 ratio {db:.4f} ≥ {cfg.order_margin_log10:g}")
        if len(cfg.taus) < 2:  # a statement with no row states nothing (gate() drops it)
            out.notes.append("one τ only: the 'increasing in τ' groups have no rows")

        # Monte Carlo sanity: one estimate per member, each with its own standard error.
        mc = run.arrays(MC_ARM)
        mcg = out.sanity("monte-carlo-matches-closed-form",
                         f"Closed-form L(α, β) (F.3/F.4 case terms) = Monte Carlo over sampled documents (§3.1), MLM masks "
                         f"(§3.2) and the model's loss, at T={cfg.mc_T}, v={cfg.mc_v}, τ={cfg.mc_tau}, N={cfg.mc_N}, "
                         f"{cfg.mc_docs} documents per member: |MC − closed form| / closed form ≤ {cfg.mc_tol:g}")
        labels = [f"{kind}/a{a:g}_b{b:g}" for kind in ("block", "diagonal") for a, b in cfg.mc_points]
        est, se, exact = mc["estimate"], mc["se"], mc["closed_form"]
        for i, lab in enumerate(labels):
            c = exact[:, i]
            rel = ((est[:, i] - c) / c).tolist()
            mcg.every(lab, rel, 0.0, cfg.mc_tol, "close", member_se=(se[:, i] / c.abs()).tolist(), learning_required=False)
        out.measurements["monte_carlo"] = {lab: {"closed_form": float(exact[0, i]), "estimates": est[:, i].tolist(),
                                                 "se": se[:, i].tolist()} for i, lab in enumerate(labels)}

        # Notes: the ambiguities and which constant the landscape is consistent with.
        def verdict(g) -> str:
            return g.verdict

        out.notes.append(
            f"Ambiguity (Thm. 3, λ1): statement {lam['l1_statement']:.4f} vs proof c_5 {lam['l1_proof']:.4f}. γ* in "
            f"(λ1(τ−1), λ2 T): with the proof's λ1 {verdict(thm3['proof'])}, with the statement's {verdict(thm3['statement'])}; "
            f"the headline group uses the proof's (what F.28 derives)"
            + ("; both are consistent with the landscape here." if verdict(thm3['proof']) == verdict(thm3['statement']) == "holds"
               else "."))
        out.notes.append(
            f"Ambiguity (Thm. 5, λ4): statement divides by (√(v−1) − 2 + (1−p_c)p_m) → {lam['l4_statement']:.6g}, proof "
            f"multiplies → {lam['l4_proof']:.6g}. β* in (λ3 τ, λ4 T): proof {verdict(thm5['proof'])}, statement "
            f"{verdict(thm5['statement'])}; headline on the proof's.")
        out.notes.append(
            "Fig. 8 uses the block map with W_diff = 0 and q's constant (the map of F.21), not exactly Thm. 2's W^{V*}; "
            "the [MASK]-query term is left out of L, as in F.21; [MASK] keys get no attention (Prop. 2's normalisers); "
            "masking p_m, p_c, p_r from §6.1 (App. F.5 states none); Thms. 3, 5 are asymptotic (T → ∞, τ = o(T)) and are "
            f"tested here at T = {T}, v = {v}, τ/T up to {max(cfg.taus) / T:.2f}.")
        out.notes.append(
            "γ*: " + ", ".join(f"τ={t}: {gs[t]:.4g}" for t in cfg.taus) + "; diagonal β*: "
            + ", ".join(f"τ={t}: {bs[t]:.5g}" for t in cfg.taus)
            + f"; the diagonal loss is flat in α for (v−1)α ≪ β, its minimiser sits at the box edge α = {cfg.grid_lo:g}.")
        out.measurements["grid_eval_s"] = {tau_arm(t): float(r) for t, r in self._walls(run, cfg).items()}
        return out

    @staticmethod
    def _walls(run: Run, cfg: TopicsLandscapeConfig) -> dict[int, float]:
        df = run.metrics()
        sub = df[df["name"] == "grid_eval_s"]
        return {t: float(sub[sub["arm"] == tau_arm(t)]["value"].sum()) for t in cfg.taus}

    # ---- plot -------------------------------------------------------------------------------------
    def plot(self, cfg: TopicsLandscapeConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        m = cfg.masking
        paths = []
        lo, hi = math.log10(cfg.grid_lo), math.log10(cfg.grid_hi)
        ext = (lo, hi, lo, hi)
        n = len(cfg.taus)
        for kind, fname, title in (
            ("diagonal", "fig7_diagonal.png", f"Fig. 7 — diagonal W^V: L(α, β), T={cfg.T}, v={cfg.v} (darker = lower)"),
            ("block", "fig8_block.png", f"Fig. 8 — block W^V (W_diff = 0, the map of F.21): L(α, β), T={cfg.T}, v={cfg.v}"),
        ):
            fig, axes = plt.subplots(1, n, figsize=(5.0 * n, 4.4), squeeze=False, layout="constrained")
            for ax, tau in zip(axes[0], cfg.taus):
                a = run.arrays(tau_arm(tau))
                L = a[kind][0].numpy()
                im = ax.imshow(L, origin="lower", extent=ext, aspect="auto", cmap="viridis")
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
                xs = np.linspace(lo, hi, 200)
                if kind == "block":
                    g = float(a["gamma_star"].reshape(-1)[0])
                    for gam, style, lab in ((g, "-", f"γ* = {g:.3g}"),
                                            (tl.lambda1(m, "proof") * (tau - 1), ":", "γ = λ1(τ−1), proof"),
                                            (tl.lambda1(m, "statement") * (tau - 1), "--", "γ = λ1(τ−1), statement"),
                                            (tl.lambda2(m) * cfg.T, "-.", "γ = λ2 T")):
                        # the line γ = const, parametrised so both asymptotes are drawn: α = t vγ/(v−1), β = (1−t) vγ
                        tt = 1.0 / (1.0 + np.exp(-np.linspace(-40, 40, 801)))
                        al_, be_ = tt * cfg.v * gam / (cfg.v - 1), (1 - tt) * cfg.v * gam
                        ok = (al_ > 0) & (be_ > 0)
                        ax.plot(np.log10(al_[ok]), np.log10(be_[ok]), style, color="w" if style == "-" else "orange", lw=1.2, label=lab)
                else:
                    al = float(a["diag_alpha_star"].reshape(-1)[0])
                    be = float(a["diag_beta_star"].reshape(-1)[0])
                    ax.plot([math.log10(al)], [math.log10(be)], "*", color="w", ms=12, mec="k", label=f"(α*, β*) β*={be:.3g}")
                    for ver, style in (("proof", ":"), ("statement", "--")):
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
            g, c = a["gamma_curve_g"][0].numpy(), a["gamma_curve"][0].numpy()
            line, = ax.plot(g, c, label=f"τ = {tau}")
            gs = float(a["gamma_star"].reshape(-1)[0])
            ax.axvline(gs, color=line.get_color(), lw=0.8, ls="--")
        ax.set(xscale="log", xlabel="γ = ((v−1)α + β)/v", ylabel="L (block W^V)", title="Block W^V: L depends on γ only (Remark 5); dashed: γ*")
        ax.legend(fontsize=8)
        paths.append(save_figure(fig, figdir / "block_gamma_curve.png"))
        return paths
