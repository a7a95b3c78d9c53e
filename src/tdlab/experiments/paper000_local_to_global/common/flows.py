"""The canonical model's gradient-flow experiment and its readings (markov-landscape's, which
markov-landscape-3d extends): basin flows from Gaussian inits, accurate display trajectories and their
energy drift (Lemma 1 / Lemma 14), the settled-flow stage (Thm. 1 / Thm. 10)."""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from typing import Annotated, Any, TypeVar

import numpy as np
import torch
from pydantic import Field, field_validator

from tdlab.claims import ClaimSpec, GroupResult, Measurements, Sample, Stage
from tdlab.experiments.base import Experiment, ExperimentConfig
from tdlab.run_context import RunContext
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import ChainConfig
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK
from tdlab.train.trainer import FitResult

F64 = torch.float64
Sigmas = Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=1)]  # positive, at least one


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


def chain_arm(p: float, q: float) -> str:
    """Arm name of a chain, e.g. ``p0.2_q0.3``."""
    return f"p{p:g}_q{q:g}"


def save_times(t_end: float, k: int) -> torch.Tensor:
    """``(k,)`` save times of a display trajectory: 0, then log-spaced from 0.01 to ``t_end``."""
    return torch.cat([torch.zeros(1, dtype=F64), torch.logspace(-2, math.log10(t_end), k - 1, dtype=F64)])


class FlowConfig(ExperimentConfig):
    """Fields of both landscape experiments (2-parameter and 3-parameter flows)."""

    members: int = Field(2, ge=1, le=64)  # independent seeds; every draw is per member
    chains: Annotated[list[ChainConfig], Field(min_length=1)] = Field(default_factory=_default_chains)
    sigmas: Sigmas = [0.02, 0.05, 0.1]  # standard Gaussian init scales near 0 (Thm. 2: σ² ≪ 1/√2)
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
        for c in v:
            if abs(c.p + c.q - 1.0) < 1e-9:
                raise ValueError(f"chain (p={c.p}, q={c.q}): Thms. 1/2/8/10 assume p + q != 1")
        if len({chain_arm(c.p, c.q) for c in v}) != len(v):
            raise ValueError("chains must not repeat")
        return v


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


def planted_proportion(fraction: float, n: int) -> Sample:
    """``n`` planted 0/1 indicators of which ``round(fraction · n)`` are 1 (a proportion row's shape)."""
    k = min(n, max(0, round(fraction * n)))
    return Sample([1.0] * k + [0.0] * (n - k), proportion=True)


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
    @abstractmethod
    def _chain_note(cfg: FlowConfigT, m: dict[str, Any]) -> str:
        """What the note of one chain says before its unsettled endpoints, from its measurements ``m``."""

    def notes(self, cfg: FlowConfigT, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        """One note per chain: :meth:`_chain_note`, then the share of endpoints not at a critical set at t_end."""
        notes = []
        for c in cfg.chains:
            arm = chain_arm(c.p, c.q)
            m = measured.values[arm]
            notes.append(
                f"{arm} (p+q={c.p + c.q:g}): {self._chain_note(cfg, m)}; endpoints not at a critical set at "
                f"t={cfg.t_end:g}: {', '.join(f'{100 * u:.2f}%' for u in m['unsettled_fraction'])}."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    @staticmethod
    def _draws(seed: int) -> dict[str, torch.Generator]:
        keys = ("random", "gaussian", "traj", "wide")
        return dict(zip(keys, (generators([seed], k)[0] for k in keys), strict=True))

    @staticmethod
    def _energy(out: Measurements, cfg: FlowConfig, arm: str, ctx: dict, drift: list[float], trajectories: int) -> None:
        """Record the ``energy-conserved`` row of ``arm`` (chain ``ctx``) from each member's largest drift over
        its ``trajectories`` display trajectories."""
        out.row(
            "energy-conserved",
            arm,
            energy_sample(drift),
            arms=[arm],
            context=ctx,
            label=f"p={ctx['p']}, q={ctx['q']}: max relative energy drift over {trajectories} trajectories/member "
            f"≤ {cfg.energy_tol:g}",
        )

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
