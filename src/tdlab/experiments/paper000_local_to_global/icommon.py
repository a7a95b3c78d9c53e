"""``markov-icommon``: seed 000 (Local to Global), Sec. 4's region I_common and Sec. 3's "one additional
bias step".

Two statements of the seed, checked where the seed makes them:

1. **I_common** (Sec. 4, after Thm. 2), ``I_common = {(e, w) : w < 0, |e| > sqrt(w^2 - log(-w) + E_sad)}``,
   the region of initialisations the seed says leads to the global minimum irrespective of the switching;
   App. A.3.2 tests one point of I_* on the full model at one (p, q) with p + q > 1. Here: initial
   points are *sampled* in I_common (:func:`tdlab.theory.markov_regions.sample_icommon`, one per
   member, the same points in every cell — the region is data-agnostic), mapped into the full Sec. 2 transformer by App. D's canonical
   parameterisation (:func:`tdlab.models.init.canonical_init_`) and trained (AdamW, Table 2) on a grid of (p, q) on both
   sides of p + q = 1; each cell's final test loss is read against the entropy rate (the global minimum,
   Thm. 1(i) / Thm. 4(iii)).
2. **"One additional step is usually sufficient"** (Sec. 3 after Eq. 3; App. A.1 after Eq. 9): the
   theory analyses the profile loss ``L(θ) = L(θ, b*(θ))``; the seed says that in practice this means
   running gradient descent on the bias for one more step per iteration. Checked on the canonical (e, w)
   model in closed form: from initial points uniform in a box, with a stale bias ``b0 = 0``, gradient
   descent with one extra bias step per iteration is compared with gradient descent on the profile loss
   from the same point and step size, by the basin each ends in (global / local minimum,
   :func:`tdlab.theory.markov_regions.limit_kind`). No model is trained; the descents run a stated
   number of steps. Plain joint descent (no extra step) is measured beside it. The full-model
   counterpart lives in ``markov-rank``.

Both are the seed's statements in the seed's models. Its readings of the seed and its claims (with the sanity
checks of the sampler, the integrator and the untrained start) are declared in the seed's ``experiments.yaml``
(``tdlab explain markov-icommon``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.claims.calibration import planted_pair
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper000_local_to_global.common.cells import Cells
from tdlab.experiments.paper000_local_to_global.common.plateau import LEFT_PLATEAU
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.init import canonical_init_, proposed_point
from tdlab.report.standard_figures import Curves, Line, Panel
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import MarkovChain, entropy_rate, marginal_entropy
from tdlab.theory.markov_landscape import ENERGY_SADDLE, CriticalKind, energy, run_flow
from tdlab.theory.markov_regions import (
    bias_step_agreement,
    bias_step_basins,
    icommon_boundary,
    in_icommon,
    limit_kind,
    sample_icommon,
)
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer

_POINTS_STREAM = "icommon-point"  # per-member stream of the sampled (e, w)
_INIT_ARM = "init-points"  # metrics arm holding the sampled points
GLOBAL = int(CriticalKind.GLOBAL_MIN)


class RegionConfig(Config):
    """Where in I_common the initial points are drawn (our choice; the seed gives no distribution)."""

    e_max: float = Field(2.0, gt=0.0, le=100.0)  # |e| <= e_max: contrast |D| <= ~13 at the start
    w_lo: float = Field(-1.5, ge=-100.0, lt=0.0)  # w >= w_lo
    w_hi: float = Field(-0.05, lt=0.0)  # w <= w_hi < 0 (I_common has w < 0)
    # E(e, w) - E_sad > energy_margin: a band inside the region's edge, where the full model (not the
    # canonical flow) could part from the theory.
    energy_margin: float = Field(0.1, ge=0.0, le=100.0)

    @model_validator(mode="after")
    def _check(self) -> RegionConfig:
        if not self.w_lo < self.w_hi:
            raise ValueError(f"region.w_lo ({self.w_lo}) must be below region.w_hi ({self.w_hi})")
        return self


class BiasStepConfig(Config):
    """The canonical check of "one additional [bias] step is usually sufficient" (Sec. 3)."""

    points: int = Field(1000, ge=10, le=1_000_000)  # initial points, uniform in the box below
    e_max: float = Field(2.0, gt=0.0, le=100.0)  # box |e| <= e_max
    w_max: float = Field(2.0, gt=0.0, le=100.0)  # box |w| <= w_max (both basins, both signs of w)
    b0: float = Field(0.0, ge=-100.0, le=100.0)  # stale start of the bias: the standard init's b ~ N(0, 0.02^2)
    lr: float = Field(0.25, gt=0.0, le=10.0)  # GD step size (our choice; the seed states none)
    steps: int = Field(1600, ge=1, le=10_000_000)  # lr * steps = 400 time units of the flow
    atol: float = Field(1e-2, gt=0.0, lt=1.0)  # end point within atol of a critical set (Thm. 1)
    flow_points: int = Field(64, ge=1, le=100_000)  # I_common points for the canonical-flow sanity check
    flow_time: float = Field(5000.0, gt=0.0, le=1e9)  # its horizon


class ICommonClaimConfig(Config):
    """Scientific tolerances, set before any run."""

    # Members' mean gap between the final test loss and the Bayes predictor's loss on the same batches
    # (markov-init's and markov-bridge's tolerance).
    tol_nats: float = Field(0.01, gt=0.0, le=1.0)
    # "usually sufficient": at least this fraction of initial points end in the basin the profile
    # analysis predicts (our reading of "usually"; Wilson interval over the points). 1 - agree_min is
    # also the share of descent end points that may lie away from every critical set (DESCENT_SETTLED).
    agree_min: float = Field(0.95, gt=0.0, le=1.0)
    # markov-init's plateau-escape level, H(π) − escape_fraction · (H(π) − entropy rate): a member below
    # it has left the unigram stage (the stage the reaching claim needs before it can fail).
    escape_fraction: float = Field(0.25, gt=0.0, lt=1.0)


def _default_grid() -> list[tuple[float, float]]:
    # markov-bridge's quick cells: two on each side of p + q = 1, H(pi) - entropy rate >= 0.06 nats in
    # each, so "at the entropy rate" and "at H(pi)" are 6 tolerances apart.
    return [(0.2, 0.3), (0.1, 0.4), (0.5, 0.8), (0.7, 0.9)]


class MarkovICommonConfig(ExperimentConfig):
    members: int = Field(4, ge=1, le=4096)  # one sampled I_common point per member
    grid: Cells = Field(default_factory=_default_grid)  # (p, q) cells
    region: RegionConfig = RegionConfig()
    bias_step: BiasStepConfig = BiasStepConfig()
    model: GPTConfig = GPTConfig(arch="sec2", d=8)  # Sec. 2 model, d = 8 (App. A.3); canonical init on top
    train: TrainConfig = TrainConfig()  # Table 2: AdamW (0.9, 0.95), lr 1e-3, cosine, wd 1e-3, batch 16
    claims: ICommonClaimConfig = ICommonClaimConfig()
    cpu_threads: int | None = Field(1, ge=1, le=1024)  # d = 8: one thread (as markov-rank, markov-bridge)

    @model_validator(mode="after")
    def _check(self) -> MarkovICommonConfig:
        if any(abs(p + q - 1.0) < 1e-9 for p, q in self.grid):
            raise ValueError("grid: every cell needs p + q != 1 (Thms. 1, 2 and 8 assume it)")
        m = self.model
        if m.arch != "sec2" or m.layers != 1 or m.heads != 1 or not m.tie_weights:
            raise ValueError(
                "model must be the Sec. 2 single-layer model: arch 'sec2', layers 1, heads 1, tie_weights true"
            )
        if m.positions != "absolute" or m.init != "standard":
            raise ValueError(
                "model.positions must be 'absolute' and model.init 'standard' (the canonical init is set on top)"
            )
        return self

    def arm_model(self) -> GPTConfig:
        return self.model.updated({"max_len": self.train.seq_len})


def cell_arm(p: float, q: float) -> str:
    """Arm name of one (p, q) cell: ``p0.5_q0.8``."""
    return f"p{p:g}_q{q:g}"


def initial_points(seeds: list[int], region: RegionConfig) -> torch.Tensor:
    """One point of I_common per member seed (:func:`sample_icommon`, stream ``icommon-point``):
    ``(len(seeds), 2)`` float64 ``(e, w)``; member ``i``'s point depends on ``seeds[i]`` alone."""
    gens = generators(seeds, _POINTS_STREAM)
    return sample_icommon(
        gens, 1, e_max=region.e_max, w_range=(region.w_lo, region.w_hi), energy_margin=region.energy_margin
    )[:, 0]


# ----------------------------------------------------------------------------------------------
# The stage and the claims


DESCENT_SETTLED = Stage(
    "descent-settled",
    "the profile descent's and the one-extra-step descent's end points lie within atol of a critical "
    "set (Thm. 1), but for at most 1 − agree_min of the points: the descents ran long enough to name a basin",
)


def _agree_tolerance(cfg: MarkovICommonConfig, row: Any) -> float:
    return 1.0 - cfg.claims.agree_min


def _between_minima(cfg: MarkovICommonConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted end states of a cell at the run's members: at the Bayes loss (gap 0, members spread a fifth of
    the tolerance) and at the local minimum's (gap H(π) − entropy rate of the context's (p, q), ≥ 0.06 nats
    in every default cell)."""
    p, q = float(context["p"]), float(context["q"])
    gap = marginal_entropy(p, q) - entropy_rate(p, q)
    return planted_pair(0.0, gap, cfg.claims.tol_nats / 5, cfg.members)


def _cell_panel(p: float, q: float) -> Panel:
    """One trained cell's test loss against H(π) and the entropy rate."""
    rate, h_pi = entropy_rate(p, q), marginal_entropy(p, q)
    return Panel(
        f"p={p:g}, q={q:g} (p+q={p + q:.1f})",
        [Line(cell_arm(p, q), label="I_common init")],
        reference={f"H(π) = {h_pi:.3f}": h_pi, f"entropy rate = {rate:.3f}": rate},
        ylim=(rate - 0.03, max(np.log(2), h_pi) + 0.1),
    )


@register
class MarkovICommon(Experiment[MarkovICommonConfig]):
    Config = MarkovICommonConfig

    # ------------------------------------------------------------------------------------------
    def run(self, cfg: MarkovICommonConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        theta0 = initial_points(seeds, cfg.region)  # the same points in every cell: I_common is data-agnostic
        ctx.store_rows(
            _INIT_ARM,
            [(0, m, f"theta0/{k}", float(theta0[m, i])) for m in range(len(seeds)) for i, k in enumerate(("e", "w"))],
        )
        mcfg = cfg.arm_model()
        by_seed = {s: theta0[i] for i, s in enumerate(seeds)}

        def build(chunk: list[int]) -> GPT:
            return canonical_init_(GPT(mcfg, chunk), torch.stack([by_seed[s] for s in chunk]))

        with cpu_threads(cfg.cpu_threads, ctx.device):
            ctx.fit_all(
                [
                    Fit(
                        cell_arm(p, q),
                        Trainer(cfg.train, ctx.device, ctx.progress, label=f"I_common ({p:g}, {q:g})"),
                        build,
                        seeds,
                        MarkovChain(p, q),
                    )
                    for p, q in cfg.grid
                ]
            )  # at once, on one-thread lanes
            for ci, (p, q) in enumerate(cfg.grid):
                self._canonical(cfg, ctx, ci, p, q)

    def _canonical(self, cfg: MarkovICommonConfig, ctx: RunContext, ci: int, p: float, q: float) -> None:
        """Closed-form computations of one cell, stored as metrics (member = initial point)."""
        arm = f"canonical/{cell_arm(p, q)}"
        if ctx.writer.arm_rows(arm):
            return  # a resumed run already has them
        bs = cfg.bias_step
        gen = generators([cfg.seed], f"bias-step-{ci}")[0]
        res = bias_step_basins(p, q, bs, gen)
        rows = [
            (0, i, f"basin/{k}", float(res[k][i])) for k in ("theory", "k0", "k1", "profile") for i in range(bs.points)
        ]
        rows += [
            (0, i, f"theta0/{j}", float(res["theta0"][i, c])) for j, c in (("e", 0), ("w", 1)) for i in range(bs.points)
        ]
        # Sanity: the profile flow (Thms. 2/8) from points of I_common ends at a global minimum.
        pts = sample_icommon(
            generators([cfg.seed], f"icommon-flow-{ci}"),
            bs.flow_points,
            e_max=cfg.region.e_max,
            w_range=(cfg.region.w_lo, cfg.region.w_hi),
            energy_margin=cfg.region.energy_margin,
        )[0]
        seeds = member_seeds(cfg.seed, cfg.members)
        pts = torch.cat([initial_points(seeds, cfg.region), pts])  # the trained members' points first
        fin = run_flow(pts, p, q, [bs.flow_time]).final
        rows += [(0, i, "flow/basin", float(c)) for i, c in enumerate(limit_kind(fin, p, q, atol=bs.atol))]
        rows += [(0, i, "flow/in_icommon", float(v)) for i, v in enumerate(in_icommon(pts))]
        ctx.store_rows(arm, rows)

    def trivial_error(self, cfg: MarkovICommonConfig, arm: str) -> float:
        return float(np.log(2))  # the uniform predictor over {0, 1}

    # ------------------------------------------------------------------------------------------
    def measure(self, cfg: MarkovICommonConfig, run: RunView) -> Measurements:
        """Per (p, q) cell: the trained members' final and initial gaps to the Bayes loss on the same
        batches (with the final gap's drift in learning-rate time) and the plateau stage; the canonical
        basins with and without the extra bias step (per-point agreement indicators) and the descent
        stage; the sampled points' membership of I_common and their flows' basins."""
        c = cfg.claims
        out = Measurements()
        init_e = run.curves(_INIT_ARM, "theta0/e")[1][:, 0]
        init_w = run.curves(_INIT_ARM, "theta0/w")[1][:, 0]
        out.values["initial_points"] = {
            "e": init_e.tolist(),
            "w": init_w.tolist(),
            "energy_minus_saddle": (energy(torch.tensor(np.stack([init_e, init_w], -1))) - ENERGY_SADDLE).tolist(),
        }
        cells: dict[str, Any] = {}
        for p, q in cfg.grid:
            arm = cell_arm(p, q)
            rate, h_pi = entropy_rate(p, q), marginal_entropy(p, q)
            side = "p+q<1" if p + q < 1 else "p+q>1"
            ctx = {"p": p, "q": q, "arm": arm}
            cell: dict[str, Any] = {"p": p, "q": q, "p_plus_q": p + q, "entropy_rate": rate, "marginal_entropy": h_pi}
            if run.has(arm, "test_loss") and run.has(arm, "test_loss@bayes"):
                _, values = run.curves(arm, "test_loss")
                _, bayes = run.curves(arm, "test_loss@bayes")
                gap = values - bayes
                # No plateau to leave where the two minima are closer than the tolerance (near p + q = 1).
                level = h_pi - c.escape_fraction * (h_pi - rate) if h_pi - rate > c.tol_nats else math.inf
                out.stage(
                    arm,
                    LEFT_PLATEAU,
                    values[:, -1],
                    level,
                    "lt",
                    evidence="final test loss vs the cell's plateau level",
                )
                cell.update(
                    final_test_loss=values[:, -1].tolist(),
                    final_gap_to_bayes=gap[:, -1].tolist(),
                    initial_gap_to_bayes=gap[:, 0].tolist(),
                    at_rate=int(np.sum(np.abs(gap[:, -1]) <= c.tol_nats)),
                    at_h_pi=int(np.sum(np.abs(values[:, -1] - h_pi) <= c.tol_nats)),
                )
                out.row(
                    "icommon-reaches-entropy-rate",
                    arm,
                    Sample(gap[:, -1], drift=run.drift(arm, "test_loss", minus="test_loss@bayes")),
                    arms=[arm],
                    context=ctx,
                    label=f"({p:g}, {q:g}), {side}: final test loss − Bayes predictor's loss ≈ 0",
                )
                out.row(
                    "starts-above-entropy-rate",
                    arm,
                    Sample([float(np.min(gap[:, 0]))], deterministic=True),
                    arms=[arm],
                    context=ctx,
                    label=f"({p:g}, {q:g}): every member's initial gap to the Bayes predictor ≥ {c.tol_nats:g}",
                )
            can = f"canonical/{arm}"
            if run.has(can, "basin/k1"):
                k0, k1, prof, theory = (
                    run.curves(can, f"basin/{k}")[1][:, 0] for k in ("k0", "k1", "profile", "theory")
                )
                agree1, cell["bias_step"] = bias_step_agreement(k0, k1, prof, theory)
                out.stage(
                    can,
                    DESCENT_SETTLED,
                    [cell["bias_step"]["unsettled_fraction"]],
                    [1.0 - c.agree_min + 0.5 / k1.size],
                    "lt",
                    evidence="share of points whose profile or one-extra-step descent ends away from every critical set",
                )
                out.row(
                    "one-extra-bias-step-suffices",
                    arm,
                    Sample(agree1, proportion=True),
                    arms=[can],
                    context=ctx,
                    label=f"({p:g}, {q:g}), {side}: fraction of {agree1.size} points where descent with one extra bias "
                    f"step ends in the profile descent's basin ≥ {c.agree_min:g} (without it: "
                    f"{cell['bias_step']['agree_k0_with_profile']:.4f})",
                )
                # The flow's points are the arm's first members only (the box points outnumber them): the
                # view lines every metric up over all of the arm's members, NaN where one was not stored.
                fb = run.curves(can, "flow/basin")[1][:, 0]
                inside = run.curves(can, "flow/in_icommon")[1][:, 0]
                stored = ~np.isnan(fb)
                ok = (fb[stored] == GLOBAL) & (inside[stored] == 1.0)
                out.row(
                    "sampled-points-in-icommon",
                    arm,
                    Sample([float(np.sum(~ok))], deterministic=True),
                    context=ctx,
                    label=f"({p:g}, {q:g}): none of {ok.size} sampled I_common points outside the region or flowing "
                    "elsewhere than a global minimum",
                )
                cell["icommon_flow_global_fraction"] = float(ok.mean())
                cell["icommon_points"] = int(ok.size)
            cells[arm] = cell
        out.values["cells"] = cells
        e_prop, w_prop = proposed_point(cfg.model)
        out.values["proposed_point"] = {
            "e": e_prop,
            "w": w_prop,
            "g(w)": float(icommon_boundary(w_prop)) if w_prop < 0 else float("nan"),
            "in_icommon": bool(in_icommon(torch.tensor([e_prop, w_prop]))),
        }
        return out

    def notes(self, cfg: MarkovICommonConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        c = cfg.claims
        prop = measured.values["proposed_point"]
        notes = [
            f"A.3.2's proposed init (e = {cfg.model.init_e:g} per coordinate, W_1 = {cfg.model.init_w1:g}, W_2 = "
            f"{cfg.model.init_w2:g}) is (e, w) = ({prop['e']:.3f}, {prop['w']:g}) in App. D's coordinates (d = {cfg.model.d}): "
            + (
                "inside I_common."
                if prop["in_icommon"]
                else f"outside I_common (|e| < g(w) = {prop['g(w)']:.3f}); for p+q<1 Thm. 8 puts it in I_min (local minimum), for "
                "p+q>1 Thm. 2 in I_*. Its p_n are N(0, σ²), not -(e/2)α, so the mapping is approximate."
            )
        ]
        for cell in measured.values["cells"].values():
            head = f"({cell['p']:g}, {cell['q']:g}), p+q={cell['p_plus_q']:.2f}"
            if "final_gap_to_bayes" in cell:
                n = len(cell["final_gap_to_bayes"])
                notes.append(
                    f"{head}: {cell['at_rate']}/{n} members end within {c.tol_nats:g} nats of the Bayes loss, "
                    f"{cell['at_h_pi']}/{n} at H(π); final gap {np.mean(cell['final_gap_to_bayes']):+.4f} nats "
                    f"(H(π) − rate = {cell['marginal_entropy'] - cell['entropy_rate']:.4f})."
                )
            if "bias_step" in cell:
                b = cell["bias_step"]
                notes.append(
                    f"{head} canonical: basin agreement with profile descent — one extra bias step "
                    f"{b['agree_k1_with_profile']:.4f}, none {b['agree_k0_with_profile']:.4f}: plain "
                    f"descent agrees nearly as often, so this measurement hardly tells one extra step from none; of "
                    f"the {b['k0_disagreements']} points plain descent sends elsewhere, one extra step fixes "
                    f"{b['k0_disagreements_fixed_by_one_step']}; profile descent vs Thm. 2/8 flow basins "
                    f"{b['profile_agrees_with_flow_theory']:.4f}."
                )
        return [*super().notes(cfg, measured, groups), *notes]

    # ------------------------------------------------------------------------------------------
    figures = (
        Curves(
            "icommon_loss.png",
            lambda cfg, m: [_cell_panel(p, q) for p, q in cfg.grid],
            title=lambda cfg: f"Sec. 2 transformer from {cfg.members} points sampled in I_common (mean, band min–max)",
            size=(4.2, 3.6),
            legend=7,
        ),
    )

    def plot(self, cfg: MarkovICommonConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared loss curves, then Sec. 4's region with the members' initial points (its own figure)."""
        from tdlab.report.figures import plt, save_figure

        paths = super().plot(cfg, run, analysis, figdir)
        fig, ax = plt.subplots(figsize=(5.5, 4.5))
        w = np.linspace(min(cfg.region.w_lo, -2.0), -1e-3, 400)
        g = icommon_boundary(torch.tensor(w)).numpy()
        ax.fill_between(w, g, cfg.region.e_max + 0.5, color="C2", alpha=0.15, label="I_common")
        ax.fill_between(w, -g, -(cfg.region.e_max + 0.5), color="C2", alpha=0.15)
        ax.plot(w, g, "C2", lw=1)
        ax.plot(w, -g, "C2", lw=1)
        pts = analysis.measurements.get("initial_points", {})
        if pts.get("e"):
            ax.scatter(pts["w"], pts["e"], color="k", s=18, zorder=3, label="members' initial points")
        ax.set_xlabel("w")
        ax.set_ylabel("e")
        ax.set_ylim(-(cfg.region.e_max + 0.5), cfg.region.e_max + 0.5)
        ax.set_title("Sec. 4: I_common = {w < 0, |e| > g(w)}", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        paths.append(save_figure(fig, figdir / "icommon_points.png"))
        return paths
