"""``markov-landscape``: seed 000 (Local to Global), Fig. 1 (a)-(d), Thms. 1, 2, 8 and Lemma 1.

No transformer is trained: the gradient flow of the canonical low-rank model's exact population loss
(:mod:`tdlab.theory.markov_landscape`, Eq. 3) is integrated from random initial points, for each chain
(defaults ``(p, q) = (0.2, 0.3)``, ``p + q < 1``, Fig. 1 (a)/(b), and ``(0.5, 0.8)``, ``p + q > 1``,
Fig. 1 (c)/(d)). Per member (seed):

* a few display trajectories from ``N(0, traj_scale² I)``, integrated accurately (Dormand-Prince,
  ``rtol = traj_rtol``): the energy Eq. (4) must stay constant along each (Lemma 1) — a property of the
  exact flow, so along a numerical trajectory it checks the integrator: a sanity check on the largest
  drift over every trajectory (one exact value);
* ``n_random`` initial points ``θ₀ ~ N(0, init_scale² I)`` integrated to ``t_end`` (Rosenbrock 2(3)):
  the endpoint's critical set (:func:`classify_critical`, Thm. 1) must be the basin Thm. 2 / Thm. 8
  assign to θ₀ (:func:`predict_basin`) — the theorems hold for every θ₀ off a null set;
* ``n_gaussian`` small Gaussian inits for each σ in ``sigmas``: the fraction of flow endpoints at the
  local minimum must equal the App. G quadrature probability :func:`gaussian_basin_probability`
  (≈ 1 for p + q > 1, Thm. 2; ≈ 0 for p + q < 1, Thm. 8).

Every row is in the seed's setting (Thms. 2 and 8 are stated for every (p, q) off p + q = 1 and every
θ₀; App. G's probability for every σ), but for the small-init statement, whose "σ² ≪ 1/√2" we read as
σ² ≤ 0.1/√2: a row at a larger σ is ours. The statements are for every chain: a group holds only when
every chain's row does. The horizon is ``static``: nothing is trained, the flow is a
deterministic function of θ₀ integrated to a stated time ``t_end`` that stands in for its limit. That
stand-in is gated, not assumed: an endpoint not yet within ``limit_atol`` of a critical set at
``t_end`` has not reached its limit, and a member with more such endpoints than the claims' tolerance
allows leaves the rows not evaluable (:data:`FLOW_SETTLED`), never failing. The basin fractions are
proportions of random draws (each flow deterministic), decided on Wilson's interval over the pooled
``members × n`` points.

``markov-landscape-3d`` (:mod:`.landscape_3d`) shares the configuration, the flows and the run here.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from pydantic import Field, field_validator

from tdlab.claims import ClaimSpec, GroupResult, Measurements, Sample, Stage
from tdlab.claims.declare import Calibration, Threshold
from tdlab.experiments.axes import AtlasAxes, AtlasAxis
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.experiments.manifest import Setting
from tdlab.experiments.seed000_local_to_global.hypotheses import OFF_LINE_ROW, SMALL_SIGMA_ROW
from tdlab.experiments.view import RunView
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import ChainConfig
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK
from tdlab.train.trainer import FitResult

__all__ = [
    "FLOW_SETTLED",
    "KIND_COLOR",
    "SEED_CHAINS",
    "FlowConfig",
    "FlowExperiment",
    "LandscapeConfig",
    "MarkovLandscape",
    "chain_arm",
    "energy_claim",
    "energy_sample",
    "max_energy_drift",
    "planted_proportion",
    "save_times",
    "settled_bound",
]

F64 = torch.float64
KIND_COLOR = {
    int(CK.NONE): "0.5",
    int(CK.GLOBAL_MIN): "tab:green",
    int(CK.LOCAL_MIN): "tab:red",
    int(CK.SADDLE): "gold",
    int(CK.LOCAL_MAX): "tab:purple",
    int(CK.STATIONARY): "tab:brown",
}


def _default_chains() -> list[ChainConfig]:
    return [ChainConfig(p=0.2, q=0.3), ChainConfig(p=0.5, q=0.8)]  # Fig. 1 (a)/(b): p+q<1; (c)/(d): p+q>1


# Figs. 1, 2 and 5 name no (p, q), only the side of p + q = 1 each panel shows; the seed's own chains on either
# side, App. A.3.1's (0.2, 0.3) and Fig. 4's (0.5, 0.8), stand for them (the theorems cover any chain off the line).
SEED_CHAINS = Setting(
    [{"p": 0.2, "q": 0.3}, {"p": 0.5, "q": 0.8}],
    "Fig. 1 (a)/(b): p + q < 1, (c)/(d): p + q > 1 (likewise Figs. 2, 5); the values: App. A.3.1 and Fig. 4",
    "the figures state only the side of p + q = 1; the seed's two chains, one on each side, stand for them",
)


def chain_arm(p: float, q: float) -> str:
    """Arm name of a chain, e.g. ``p0.2_q0.3``."""
    return f"p{p:g}_q{q:g}"


def max_energy_drift(traj: torch.Tensor) -> torch.Tensor:
    """Per trajectory, ``max_t |E(t) - E(0)| / max(1, |E(0)|)`` of a ``(K, n, dim)`` trajectory
    (Eq. 4 / Eq. 10). Returns ``(n,)``; NaN for a trajectory on the plane ``w = 0``."""
    E = ml.energy(traj)
    return ((E - E[0]).abs() / E[0].abs().clamp_min(1.0)).amax(dim=0)


def save_times(t_end: float, k: int) -> torch.Tensor:
    """``(k,)`` save times of a display trajectory: 0, then log-spaced from 0.01 to ``t_end``."""
    return torch.cat([torch.zeros(1, dtype=F64), torch.logspace(-2, math.log10(t_end), k - 1, dtype=F64)])


class FlowConfig(ExperimentConfig):
    """Fields of both landscape experiments (2-parameter and 3-parameter flows)."""

    members: int = Field(2, ge=1, le=64)  # independent seeds; every draw is per member
    chains: list[ChainConfig] = Field(default_factory=_default_chains)
    sigmas: list[float] = [0.02, 0.05, 0.1]  # standard Gaussian init scales near 0 (Thm. 2: σ² ≪ 1/√2)
    n_gaussian: int = Field(500, ge=10, le=100_000)  # draws per sigma per member
    t_end: float = Field(2000.0, gt=0.0)  # horizon of the basin flows (Rosenbrock 2(3)), standing in for t → ∞
    n_traj: int = Field(8, ge=1, le=200)  # display trajectories per member (Dormand-Prince, rtol traj_rtol)
    traj_t_end: float = Field(50.0, gt=0.0)
    traj_points: int = Field(150, ge=10, le=2000)
    traj_rtol: float = Field(1e-10, gt=0.0, le=1e-6)  # Dormand-Prince tolerance of the display trajectories
    traj_max_iters: int = Field(5_000, ge=100)
    # sanity (integrator accuracy): max |E(t) - E(0)| / max(1, |E(0)|) along a Dormand-Prince trajectory at traj_rtol
    energy_tol: float = Field(1e-6, gt=0.0)

    @field_validator("chains")
    @classmethod
    def _chains(cls, v: list[ChainConfig]) -> list[ChainConfig]:
        if not v:
            raise ValueError("chains must list at least one chain")
        for c in v:
            if abs(c.p + c.q - 1.0) < 1e-9:
                raise ValueError(f"chain (p={c.p}, q={c.q}): Thms. 1/2/8/10 assume p + q != 1")
        if len({chain_arm(c.p, c.q) for c in v}) != len(v):
            raise ValueError("chains must not repeat")
        return v

    @field_validator("sigmas")
    @classmethod
    def _sigmas(cls, v: list[float]) -> list[float]:
        if not v or any(s <= 0 for s in v):
            raise ValueError("sigmas must be a non-empty list of positive numbers")
        return v


class LandscapeConfig(FlowConfig):
    init_scale: float = Field(1.0, gt=0.0)  # θ₀ ~ N(0, s² I) for the basin-agreement claim
    n_random: int = Field(1000, ge=10, le=100_000)  # per member
    traj_scale: float = Field(1.0, gt=0.0)
    limit_atol: float = Field(1e-4, gt=0.0)  # classify_critical tolerance for flow endpoints
    # Thms. 2/8 predict agreement for every θ₀ off a null set (expected 1); 1 - min_agreement is the tolerance on
    # the fraction for endpoints not yet within limit_atol at t_end (numerical, not the theorems'), and the
    # share of such endpoints a member may have before the rows are not evaluable (FLOW_SETTLED)
    min_agreement: float = Field(0.99, gt=0.0, le=1.0)
    prob_tol: float = Field(0.02, gt=0.0, le=1.0)  # claim: |flow fraction - quadrature| (absolute)

    @property
    def settle_tolerance(self) -> float:
        return 1.0 - self.min_agreement


# ----------------------------------------------------------------------------------------------
# The stage and the claims


FLOW_SETTLED = Stage(
    "flow-settled",
    "the member's flow endpoints at t_end lie within limit_atol of a critical set (Thm. 1 / Thm. 10), "
    "but for at most the claim's tolerance of them: the flow to t_end stands for its limit",
)


def settled_bound(tolerance: float, n: int) -> float:
    """The stage bound on a member's share of unsettled endpoints: ``tolerance`` plus half a point (a
    count of ``n`` points passes when at most ``tolerance · n`` of them are unsettled)."""
    return tolerance + 0.5 / n


def energy_claim(statement: str, quantity: str) -> ClaimSpec:
    """Energy conservation along the exact flow (Lemma 1 / Lemma 14), which along a numerical trajectory
    checks the integrator: a sanity check on every trajectory, so its measurement is the largest drift
    over all of them, one exact value (:func:`energy_sample`) ≤ ``energy_tol``."""
    return ClaimSpec(
        "energy-conserved",
        statement,
        kind="sanity",
        test="value",
        relation="le",
        quantity=quantity,
        expected=0.0,
        tolerance="energy_tol",
        horizon="static",
    )


def energy_sample(per_member: list[float]) -> Sample:
    """The energy row's measurement: the largest drift over every member's trajectories, an exact value
    (a statement about each stored trajectory, not an estimate over seeds); NaN when any is NaN."""
    worst = max(per_member) if all(np.isfinite(per_member)) else float("nan")
    return Sample([worst], deterministic=True)


def _agreement_tolerance(cfg: LandscapeConfig, row: Any) -> float:
    return cfg.settle_tolerance


def quadrature_local_min(cfg: LandscapeConfig, row: Any) -> float:
    """App. G: the Gaussian measure of Thm. 2 / Thm. 8's local-minimum basin for the row's σ and chain."""
    c = row.context
    return float(ml.gaussian_basin_probability(float(c["sigma"]), float(c["p"]), float(c["q"]))[CK.LOCAL_MIN])


def planted_proportion(fraction: float, n: int) -> Sample:
    """``n`` planted 0/1 indicators of which ``round(fraction · n)`` are 1 (a proportion row's shape)."""
    k = min(n, max(0, round(fraction * n)))
    return Sample([1.0] * k + [0.0] * (n - k), proportion=True)


def _other_side(p: float, q: float) -> tuple[float, float]:
    """The chain (1 − p, 1 − q): its switching factor 2 − (p + q) is on the other side of p + q = 1."""
    return 1.0 - p, 1.0 - q


def _basins_plant(cfg: LandscapeConfig, context: Any) -> tuple[Sample, Sample]:
    """At the run's members × n_random points: every flow in the basin its theorem names (Thm. 2 / Thm. 8: every
    θ₀ off a null set), against flows that follow the other side's theorem, which agree with this side's only
    where both name a global minimum (the two local-minimum basins are disjoint): 1 − P₂ − P₈ of N(0, s² I),
    0.27 at s = 1 (App. G quadrature)."""
    p, q = float(context["p"]), float(context["q"])
    s, n = cfg.init_scale, cfg.members * cfg.n_random
    local = [float(ml.gaussian_basin_probability(s, *pq)[CK.LOCAL_MIN]) for pq in ((p, q), _other_side(p, q))]
    return planted_proportion(1.0, n), planted_proportion(1.0 - sum(local), n)


def _gaussian_plant(cfg: LandscapeConfig, context: Any) -> tuple[Sample, Sample]:
    """At the run's members × n_gaussian points: the local-minimum fraction App. G gives the row's chain and σ,
    against the one it gives a chain on the other side of p + q = 1 (Thm. 2's behaviour for Thm. 8's chain,
    or the reverse)."""
    p, q, sigma = float(context["p"]), float(context["q"]), float(context["sigma"])
    n = cfg.members * cfg.n_gaussian
    here = float(ml.gaussian_basin_probability(sigma, p, q)[CK.LOCAL_MIN])
    there = float(ml.gaussian_basin_probability(sigma, *_other_side(p, q))[CK.LOCAL_MIN])
    return planted_proportion(here, n), planted_proportion(there, n)


CLAIMS = (
    ClaimSpec(
        "basins-match-theorem",
        "The gradient-flow limit of θ₀ lies in the critical set that Thm. 2 (p+q>1) / Thm. 8 (p+q<1) predicts for θ₀ "
        "(Fig. 1 (b), (d))",
        quote="Then for all initializations θ_0 ∈ R^2, the gradient flow converges to a critical point of the loss L. "
        "[...] In particular, θ_lim is a (i) a local minimum if θ_0 ∈ I_min [...] (iv) and a global minimum if "
        "θ_0 ∈ I_*",
        where="Thm. 2 (Sec. 4, p + q > 1) and Thm. 8 (App. G.2, p + q < 1); Fig. 1 (b), (d)",
        # A theorem for every (p, q) off the line and every θ₀: each chain that ran decides, all of them must hold.
        form="settings",
        hypotheses=(OFF_LINE_ROW,),
        all_rows=True,
        threshold=Threshold(
            "ours",
            "1 − min_agreement = 0.01 of the points: room for flows not yet within limit_atol of a critical set at "
            "t_end (the theorems: every θ₀ off a null set agrees)",
            Calibration(
                "planted",
                "every point in its theorem's basin holds; flows following the other side's theorem (agreeing only "
                "where both name a global minimum, 27% of N(0, I)) fail, at the run's members × n_random points",
                plant=_basins_plant,
                test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
            ),
        ),
        test="value",
        relation="ge",
        quantity="fraction of θ₀ ~ N(0, init_scale² I) (members × n_random, Wilson "
        "interval) whose flow endpoint at t_end (classify_critical at limit_atol) is the set predict_basin names",
        expected=1.0,
        tolerance=_agreement_tolerance,
        horizon="static",
        stage=FLOW_SETTLED,
        example={"p": 0.2, "q": 0.3},
    ),
    ClaimSpec(
        "small-gaussian-init",
        "From a small Gaussian init θ₀ ~ N(0, σ² I) the flow ends at the local minimum (loss H(π)) for p+q>1 (Thm. 2) and "
        "at a global minimum (loss = entropy rate) for p+q<1 (Thm. 8), with the App. G probability",
        quote="Consequently, when p + q > 1, if we use the standard initialization θ_0 ∼ N(0, σ^2 I_2) with σ^2 ≪ 1/√2, "
        "θ_lim will be a local minimum with high probability. If p + q < 1, under the same initialization scheme, "
        "θ_lim will be a global minimum with high probability.",
        where="Sec. 4 after Thm. 2; Thm. 8 ('Consequently'); App. G.1 ('Gaussian initialization')",
        form="settings",
        hypotheses=(OFF_LINE_ROW, SMALL_SIGMA_ROW),
        all_rows=True,
        threshold=Threshold(
            "ours",
            "prob_tol = 0.02 (absolute) around App. G's quadrature probability of the local-minimum basin",
            Calibration(
                "planted",
                "endpoints at the local minimum in App. G's proportion for the row's chain and σ hold; in the proportion "
                "it gives a chain on the other side of p + q = 1 (1 vs 0 at σ = 0.02) fail, at the run's members × "
                "n_gaussian points",
                plant=_gaussian_plant,
                test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
            ),
        ),
        test="value",
        relation="close",
        quantity="fraction of flow endpoints from N(0, σ² I) (members × n_gaussian, Wilson "
        "interval) at the local minimum, against App. G's quadrature probability of its basin",
        expected=quadrature_local_min,
        tolerance="prob_tol",
        horizon="static",
        stage=FLOW_SETTLED,
        example={"p": 0.5, "q": 0.8, "sigma": 0.02},
    ),
    energy_claim(
        "The energy E = e² − (w² + sign(w) log|w|) (Eq. 4) is constant along every gradient-flow trajectory (Lemma 1); "
        "along a numerical trajectory this checks the integrator",
        "the largest max_t |E(t) − E(0)| / max(1, |E(0)|) over every member's Dormand–Prince display trajectories",
    ),
)


# ----------------------------------------------------------------------------------------------
# Flows


def trajectory(theta0: torch.Tensor, p: float, q: float, cfg: FlowConfig, t_end: float) -> torch.Tensor:
    """``(traj_points, n, dim)`` accurate display trajectories (Dormand-Prince at ``traj_rtol``). Rows that
    exhaust the step budget hold NaN at later save times: their energy drift is NaN, which fails."""
    te = save_times(t_end, cfg.traj_points)
    return ml.run_flow(
        theta0,
        p,
        q,
        te,
        method="dopri5",
        rtol=cfg.traj_rtol,
        atol=1e-2 * cfg.traj_rtol,
        g_tol=0.0,
        max_iters=cfg.traj_max_iters,
    ).trajectory


def basin_flow(theta0: torch.Tensor, p: float, q: float, cfg: FlowConfig) -> tuple[torch.Tensor, list]:
    """Endpoints ``(n, dim)`` of the flows from ``theta0`` at ``t_end`` and the integrator's facts."""
    t0 = time.perf_counter()
    res = ml.run_flow(theta0, p, q, [cfg.t_end])
    info = [
        ("flow_wall_s", time.perf_counter() - t0),
        ("unfinished", float((~res.finished).sum())),
        ("max_steps", float(res.n_steps.max())),
        ("max_final_grad_norm", float(torch.nan_to_num(res.final_grad_norm, nan=math.inf).max())),
    ]
    return res.final, info


def gaussian_inits(cfg: FlowConfig, gen: torch.Generator, dim: int) -> torch.Tensor:
    """``(S, n_gaussian, dim)`` draws ``σ_s · z`` for each σ in ``sigmas``."""
    S = len(cfg.sigmas)
    z = torch.randn((S, cfg.n_gaussian, dim), dtype=F64, generator=gen)
    return torch.tensor(cfg.sigmas, dtype=F64).view(S, 1, 1) * z


FlowConfigT = TypeVar("FlowConfigT", bound=FlowConfig)


class FlowExperiment(Experiment[FlowConfigT]):
    """Both landscape experiments: per chain one arm whose members' flows are stored as arrays."""

    paper = "000 Local to Global"

    @abstractmethod
    def _member_state(self, cfg: FlowConfigT, p: float, q: float, seed: int) -> tuple[dict, list]:
        """One member's flows for chain (p, q): the arrays to store and the metric rows."""

    def run(self, cfg: FlowConfigT, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        for c in cfg.chains:
            arm = chain_arm(c.p, c.q)
            if ctx.done(arm) is not None:
                continue
            states, rows = [], []
            for m, s in enumerate(seeds):
                state, info = self._member_state(cfg, c.p, c.q, s)
                states.append(state)
                rows += [(i, m, name, v) for i, (name, v) in enumerate(info)]
            ctx.record(arm, FitResult(rows=rows, states=states))

    @staticmethod
    def _draws(seed: int) -> dict[str, torch.Generator]:
        keys = ("random", "gaussian", "traj", "wide")
        return dict(zip(keys, (generators([seed], k)[0] for k in keys), strict=True))

    @staticmethod
    def _stage(out: Measurements, arm: str, codes: list[torch.Tensor], tolerance: float) -> list[float]:
        """Record :data:`FLOW_SETTLED` for ``arm`` from each member's endpoint codes (all its flows);
        returns the members' unsettled shares."""
        unsettled = [float((c == int(CK.NONE)).double().mean()) for c in codes]
        n = min(int(c.numel()) for c in codes)
        out.stage(
            arm,
            FLOW_SETTLED,
            unsettled,
            settled_bound(tolerance, n),
            "lt",
            evidence="share of endpoints not within limit_atol of a critical set at t_end",
        )
        return unsettled


@register
class MarkovLandscape(FlowExperiment[LandscapeConfig]):
    name = "markov-landscape"
    figure = "Fig. 1 (a)-(d) (Thms. 1, 2, 8, Lemma 1)"
    description = (
        "Gradient flow of the canonical (e, w) model on the exact Markov-chain loss, for p+q<1 and "
        "p+q>1: energy contours, critical loci, flow field, trajectories and basins (Fig. 1). Claims: "
        "flow limits of N(0, I) inits agree with the basins of Thm. 2 / Thm. 8; small Gaussian inits reach "
        "the local minimum with the App. G quadrature probability (≈1 for p+q>1, ≈0 for p+q<1). Sanity: "
        "energy conserved along trajectories (Lemma 1)."
    )
    Config = LandscapeConfig
    claims = CLAIMS
    # Nothing else the seed states maps to a field: the flows' horizon, tolerances and draws are ours.
    manifest: ClassVar[dict[str, Setting]] = {"chains": SEED_CHAINS}
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {"members": 2, "n_random": 1000, "n_gaussian": 500, "n_traj": 8},
        "paper": {"members": 5, "n_random": 2000, "n_gaussian": 2000, "n_traj": 12},  # 10^4 random inits
    }
    # atlas: the basin flows run to t_end standing in for t → ∞; too short a flow time misclassifies endpoints
    atlas_axes = AtlasAxes(
        axes=(AtlasAxis("t_end", (250.0, 500.0, 2000.0, 8000.0), quick=(500.0, 2000.0), label="t_end"),),
        why="The basin-probability claims classify gradient-flow endpoints at t_end as a stand-in for t → ∞: the flow time is the budget of this closed-form experiment.",
    )

    def _member_state(self, cfg: LandscapeConfig, p: float, q: float, seed: int) -> tuple[dict, list]:
        g = self._draws(seed)
        th_r = cfg.init_scale * torch.randn((cfg.n_random, 2), dtype=F64, generator=g["random"])
        fin_r, info = basin_flow(th_r, p, q, cfg)
        th_g = gaussian_inits(cfg, g["gaussian"], 2)
        fin_g, info_g = basin_flow(th_g.reshape(-1, 2), p, q, cfg)
        th_t = cfg.traj_scale * torch.randn((cfg.n_traj, 2), dtype=F64, generator=g["traj"])
        state = {
            "random_theta0": th_r,
            "random_final": fin_r,
            "gauss_theta0": th_g,
            "gauss_final": fin_g.reshape(th_g.shape),
            "traj": trajectory(th_t, p, q, cfg, cfg.traj_t_end),
            "traj_t": save_times(cfg.traj_t_end, cfg.traj_points),
        }
        return state, info + [(f"gauss_{k}", v) for k, v in info_g]

    def measure(self, cfg: LandscapeConfig, run: RunView) -> Measurements:
        """Per chain: every member's largest energy drift; the per-point indicators "the endpoint of θ₀ is
        the basin Thm. 2/8 predicts" (pooled over members); per σ the indicators "the endpoint is the local
        minimum"; and each member's share of endpoints not yet at a critical set (the stage)."""
        out = Measurements()
        for c in cfg.chains:
            p, q = c.p, c.q
            arm = chain_arm(p, q)
            A = run.arrays(arm)
            big = p + q > 1
            ctx = {"p": p, "q": q}
            meas: dict[str, Any] = {"p_plus_q": p + q}
            drift = [float(max_energy_drift(A["traj"][m]).max()) for m in range(cfg.members)]
            meas["energy_max_rel_drift"] = drift
            out.row(
                "energy-conserved",
                arm,
                energy_sample(drift),
                arms=[arm],
                context=ctx,
                label=f"p={p}, q={q}: max relative energy drift over {cfg.n_traj} trajectories/member ≤ {cfg.energy_tol:g}",
            )
            agree, hits, counts, codes = [], [], np.zeros(len(CK)), []
            for m in range(cfg.members):
                reached = ml.classify_critical(A["random_final"][m], p, q, atol=cfg.limit_atol)
                ok = (reached == ml.predict_basin(A["random_theta0"][m], p, q)).double()
                agree.append(float(ok.mean()))
                hits.extend(ok.tolist())
                counts += np.bincount(reached.numpy(), minlength=len(CK))
                codes.append(reached)
            meas["basin_agreement"] = agree
            meas["basin_disagreements"] = int(len(hits) - sum(hits))
            meas["random_endpoint_counts"] = {CK(k).name: int(v) for k, v in enumerate(counts) if v}
            out.row(
                "basins-match-theorem",
                arm,
                Sample(hits, proportion=True),
                arms=[arm],
                context=ctx,
                label=f"p={p}, q={q} ({'Thm. 2' if big else 'Thm. 8'}): fraction of {len(hits)} θ₀ "
                f"({cfg.members} × {cfg.n_random}) ending in the predicted critical set ≥ {cfg.min_agreement:g}",
            )
            quad = ml.gaussian_basin_probability(cfg.sigmas, p, q)[CK.LOCAL_MIN]
            meas["gaussian"] = {}
            for i, s in enumerate(cfg.sigmas):
                kinds = [
                    ml.classify_critical(A["gauss_final"][m][i], p, q, atol=cfg.limit_atol) for m in range(cfg.members)
                ]
                local = [(k == int(CK.LOCAL_MIN)).double() for k in kinds]
                for m, k in enumerate(kinds):
                    codes[m] = torch.cat([codes[m], k])
                P = float(quad[i])
                meas["gaussian"][f"sigma={s:g}"] = {
                    "local_min_fraction": [float(x.mean()) for x in local],
                    "global_min_fraction": [float((k == int(CK.GLOBAL_MIN)).double().mean()) for k in kinds],
                    "quadrature_local_min": P,
                }
                points = [v for x in local for v in x.tolist()]
                where = "the local minimum (loss H(π))" if P > 0.5 else "a global minimum (loss = entropy rate)"
                out.row(
                    "small-gaussian-init",
                    f"{arm}/sigma{s:g}",
                    Sample(points, proportion=True),
                    arms=[arm],
                    context={**ctx, "sigma": s},
                    label=f"p={p}, q={q} (p+q {'>' if big else '<'} 1), σ={s:g}: the flow goes to {where}; fraction "
                    f"of {len(points)} endpoints at the local minimum ≈ App. G quadrature {P:.4f}",
                )
            meas["unsettled_fraction"] = self._stage(out, arm, codes, cfg.settle_tolerance)
            out.values[arm] = meas
        return out

    def notes(self, cfg: LandscapeConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        by_id = {g.id: g for g in groups}
        notes = []
        for c in cfg.chains:
            arm = chain_arm(c.p, c.q)
            m = measured.values[arm]
            gauss = "; ".join(
                f"σ={s:g}: local-min fraction {np.mean(m['gaussian'][f'sigma={s:g}']['local_min_fraction']):.4f} "
                f"(quadrature {m['gaussian'][f'sigma={s:g}']['quadrature_local_min']:.4f})"
                for s in cfg.sigmas
            )
            basin = by_id["basins-match-theorem"].row(arm)
            notes.append(
                f"{arm} (p+q={c.p + c.q:g}): energy drift ≤ {max(m['energy_max_rel_drift']):.2e}; basin agreement "
                f"{', '.join(f'{100 * a:.2f}%' for a in m['basin_agreement'])} ({m['basin_disagreements']} disagreements of "
                f"{cfg.members * cfg.n_random}; {basin.verdict}); {gauss}; endpoints not at a critical set at t={cfg.t_end:g}: "
                f"{', '.join(f'{100 * u:.2f}%' for u in m['unsettled_fraction'])}."
            )
        return notes

    def plot(self, cfg: LandscapeConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        n = len(cfg.chains)
        fig, axes = plt.subplots(n, 3, figsize=(16, 4.8 * n), squeeze=False)
        elim, wlim = 2.5, (-2.5, 2.5)
        E_, W_ = np.meshgrid(np.linspace(-elim, elim, 301), np.linspace(*wlim, 301), indexing="ij")
        grid = torch.from_numpy(np.stack([E_, W_], -1))
        for row, c in zip(axes, cfg.chains, strict=True):
            p, q = c.p, c.q
            A = run.arrays(chain_arm(p, q))
            big = p + q > 1
            # (a)/(c): energy contours, critical loci, flow field, trajectories
            ax = row[0]
            ax.contour(W_, E_, ml.energy(grid).numpy(), levels=np.linspace(-3, 6, 19), colors="0.7", linewidths=0.6)
            Eq, Wq = np.meshgrid(np.linspace(-elim, elim, 21), np.linspace(*wlim, 21), indexing="ij")
            gq = -ml.grad_loss(torch.from_numpy(np.stack([Eq, Wq], -1)), p, q).numpy()
            nrm = np.hypot(gq[..., 0], gq[..., 1]) + 1e-12
            ax.quiver(Wq, Eq, gq[..., 1] / nrm, gq[..., 0] / nrm, color="tab:blue", alpha=0.8, scale=28, width=0.0025)
            loci = ml.critical_loci(p, q, w_lim=wlim, e_lim=elim)
            for key, col in (("global_min", "tab:green"), ("local_min", "tab:red"), ("local_max", "tab:purple")):
                for k, seg in enumerate(loci[key]):
                    ax.plot(seg[:, 1], seg[:, 0], color=col, lw=2.5, label=key.replace("_", " ") if k == 0 else None)
            ax.plot([ml.SADDLE_W], [0.0], marker="*", ms=12, color="gold", mec="k", ls="", label="saddle")
            tr = A["traj"][0].numpy()
            for j in range(tr.shape[1]):
                ax.plot(tr[:, j, 1], tr[:, j, 0], color="k", lw=1)
                ax.plot(tr[0, j, 1], tr[0, j, 0], "o", color="k", ms=3)
            ax.set(
                xlim=wlim,
                ylim=(-elim, elim),
                xlabel="w",
                ylabel="e",
                title=f"({'c' if big else 'a'}) p={p}, q={q}: energy, critical sets, −∇L, GF paths",
            )
            ax.title.set_fontsize(9)
            ax.legend(fontsize=7, loc="upper left")
            # (b)/(d): basins of Thm. 2 / Thm. 8 with the flow endpoints of random inits
            ax = row[1]
            codes = ml.predict_basin(grid, p, q).numpy()
            ax.contourf(
                W_,
                E_,
                (codes == int(CK.LOCAL_MIN)).astype(float),
                levels=[-0.5, 0.5, 1.5],
                colors=["#cdeccd", "#f6caca"],
            )
            bb = ml.basin_boundaries(p, q, w_lim=wlim, e_lim=elim)
            for k, seg in enumerate(bb["saddle"]):
                ax.plot(seg[:, 1], seg[:, 0], color="gold", lw=2, label="I_sad" if k == 0 else None)
            for k, seg in enumerate(bb["local_max"]):
                ax.plot(seg[:, 1], seg[:, 0], color="tab:purple", lw=2, label="I_max" if k == 0 else None)
            th0, fin = A["random_theta0"][0], A["random_final"][0]
            reached = ml.classify_critical(fin, p, q, atol=cfg.limit_atol).numpy()
            pred = ml.predict_basin(th0, p, q).numpy()
            start = th0.numpy()
            for kind in (CK.GLOBAL_MIN, CK.LOCAL_MIN):
                sel = reached == int(kind)
                ax.scatter(
                    start[sel, 1], start[sel, 0], s=3, color=KIND_COLOR[int(kind)], label=f"θ₀ → {kind.name.lower()}"
                )
            bad = reached != pred
            ax.scatter(start[bad, 1], start[bad, 0], s=40, marker="x", color="k", label=f"disagree ({int(bad.sum())})")
            ax.set(
                xlim=wlim,
                ylim=(-elim, elim),
                xlabel="w",
                ylabel="e",
                title=f"({'d' if big else 'b'}) basins: red I_min, green I_*; dots θ₀ by flow limit",
            )
            ax.title.set_fontsize(9)
            ax.legend(fontsize=7, loc="upper left")
            # Gaussian init: measured vs quadrature
            ax = row[2]
            ss = np.geomspace(min(cfg.sigmas) / 2, max(3.0, 2 * max(cfg.sigmas)), 60)
            ax.plot(
                ss, ml.gaussian_basin_probability(ss, p, q)[CK.LOCAL_MIN], color="k", label="quadrature P(local min)"
            )
            g = analysis.measurements[chain_arm(p, q)]["gaussian"]
            for s in cfg.sigmas:
                fr = g[f"sigma={s:g}"]["local_min_fraction"]
                ax.errorbar(
                    [s],
                    [np.mean(fr)],
                    yerr=[[np.mean(fr) - min(fr)], [max(fr) - np.mean(fr)]],
                    fmt="o",
                    color="tab:red",
                )
            ax.plot([], [], "o", color="tab:red", label="flow (mean, min–max over members)")
            ax.set(
                xscale="log",
                ylim=(-0.05, 1.05),
                xlabel="σ of N(0, σ² I) init",
                ylabel="fraction → local minimum",
                title=f"p+q {'>' if big else '<'} 1: small init → {'local' if big else 'global'} minimum",
            )
            ax.legend(fontsize=8)
        fig.suptitle("Fig. 1 — gradient flow of the canonical (e, w) model")
        return [save_figure(fig, figdir / "fig1_landscape.png")]
