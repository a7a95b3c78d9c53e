"""``markov-landscape-3d``: seed 000 (Local to Global), Fig. 2, Fig. 5 (Thm. 10, Lemma 14, App. H).

The gradient flow of the (e, w, a) model with the attention scalar a (App. A.2, Eq. 45), integrated
from small Gaussian inits ``N(0, σ² I₃)`` near the origin, endpoints classified with Thm. 10's critical
sets (:func:`classify_critical`). The origin lies on Θ_min when p + q > 1 (the local-minimum plane
attracts small inits: loss H(π)) and on Θ_max when p + q < 1 (it repels them: they end on Θ_*, loss =
the entropy rate) — Fig. 5's "the local minima are repellers for p + q < 1, while attracting for
p + q > 1" and Fig. 2's "contrasting behavior for Gaussian initialization around origin".

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-landscape-3d``): one row per (chain, σ), and a sanity check of the energy Eq. (10) along the near-origin
(Fig. 5) and wider (Fig. 2) display trajectories (Lemma 14).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from tdlab.claims import Measurements, Sample
from tdlab.claims.declare import Calibration, Threshold
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.paper000_local_to_global.common.flows import (
    F64,
    KIND_COLOR,
    FlowConfig,
    FlowExperiment,
    basin_flow,
    chain_arm,
    gaussian_inits,
    planted_proportion,
    save_times,
    trajectory,
)
from tdlab.run_view import RunView
from tdlab.tasks.markov import entropy_rate, marginal_entropy
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK


class Landscape3Config(FlowConfig):
    traj_scale: float = Field(0.1, gt=0.0)  # Fig. 5: trajectories near the origin
    wide_scale: float = Field(0.5, gt=0.0)  # Fig. 2: trajectories from a wider init (at 1.0 some rows are stiff)
    wide_t_end: float = Field(10.0, gt=0.0)  # stiff near Θ_* at large |e|: kept short
    limit_atol: float = Field(1e-3, gt=0.0)
    # expected fraction at the predicted set is 1; 1 - min_fraction is the tolerance (endpoints not yet converged
    # at t_end) and the share of unsettled endpoints a member may have before the rows are not evaluable
    min_fraction: float = Field(0.99, gt=0.0, le=1.0)
    loss_tol: float = Field(1e-4, gt=0.0)  # |L(endpoint) - predicted entropy| in nats for an endpoint "at" the target

    @property
    def settle_tolerance(self) -> float:
        return 1.0 - self.min_fraction


def _limit_tolerance(cfg: Landscape3Config, row: Any) -> float:
    return cfg.settle_tolerance


def _near_origin_plant(cfg: Landscape3Config, context: Any) -> tuple[Sample, Sample]:
    """At the run's members × n_gaussian points: every endpoint on the set (and at the loss) the origin's class
    names, against the other behaviour the seed contrasts it with (an origin that attracts where it repels, or
    the reverse): every endpoint on the other set, none at the target."""
    n = cfg.members * cfg.n_gaussian
    return planted_proportion(1.0, n), planted_proportion(0.0, n)


def _near_origin_threshold(what: str) -> Threshold:
    return Threshold(
        "ours",
        f"1 − min_fraction = 0.01 of the endpoints {what}: room for flows not yet within limit_atol of a critical set "
        "at t_end",
        Calibration(
            "planted",
            "every endpoint where the origin's class sends it holds; every endpoint where the other side's behaviour "
            "(attracting vs repelling, Fig. 5) would send it fails, at the run's members × n_gaussian points",
            plant=_near_origin_plant,
            test="tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases",
        ),
    )


@register
class MarkovLandscape3D(FlowExperiment[Landscape3Config]):
    Config = Landscape3Config

    def _member_state(self, cfg: Landscape3Config, p: float, q: float, seed: int) -> tuple[dict, list]:
        g = self._draws(seed)
        th_g = gaussian_inits(cfg, g["gaussian"], 3)
        fin_g, info = basin_flow(th_g.reshape(-1, 3), p, q, cfg)
        near = trajectory(
            cfg.traj_scale * torch.randn((cfg.n_traj, 3), dtype=F64, generator=g["traj"]), p, q, cfg, cfg.traj_t_end
        )
        wide = trajectory(
            cfg.wide_scale * torch.randn((cfg.n_traj, 3), dtype=F64, generator=g["wide"]), p, q, cfg, cfg.wide_t_end
        )
        state = {
            "gauss_theta0": th_g,
            "gauss_final": fin_g.reshape(th_g.shape),
            "traj": near,
            "wide": wide,
            "traj_t": save_times(cfg.traj_t_end, cfg.traj_points),
            "wide_t": save_times(cfg.wide_t_end, cfg.traj_points),
        }
        return state, info

    @staticmethod
    def expected_kind(p: float, q: float) -> CK:
        """Where small inits go, from Thm. 10: the origin's critical set (Θ_min attracts; from Θ_max the
        flow leaves towards Θ_*)."""
        origin = ml.classify_critical(torch.zeros(3, dtype=F64), p, q)
        return CK.LOCAL_MIN if int(origin) == int(CK.LOCAL_MIN) else CK.GLOBAL_MIN

    def measure(self, cfg: Landscape3Config, run: RunView) -> Measurements:
        """Per chain: the largest energy drift (near-origin and wide trajectories); per σ the indicators
        "the endpoint is on the expected set" and "its loss is the target's" (pooled over members); each
        member's share of unsettled endpoints (the stage)."""
        out = Measurements()
        for c in cfg.chains:
            p, q = c.p, c.q
            arm = chain_arm(p, q)
            A = run.arrays(arm)
            kind = self.expected_kind(p, q)
            target = marginal_entropy(p, q) if kind == CK.LOCAL_MIN else entropy_rate(p, q)
            tname = "H(π) (unigram)" if kind == CK.LOCAL_MIN else "the entropy rate (bigram)"
            origin = "attracts (Θ_min)" if kind == CK.LOCAL_MIN else "repels (Θ_max)"
            side = ">" if p + q > 1 else "<"
            ctx = {"p": p, "q": q}
            meas: dict[str, Any] = {
                "p_plus_q": p + q,
                "expected_kind": kind.name,
                "target_loss": target,
                "entropy_rate": entropy_rate(p, q),
                "marginal_entropy": marginal_entropy(p, q),
                "origin": origin,
            }
            drift = [
                float(torch.maximum(ml.max_energy_drift(A["traj"][m]).max(), ml.max_energy_drift(A["wide"][m]).max()))
                for m in range(cfg.members)
            ]
            meas["energy_max_rel_drift"] = drift
            self._energy(out, cfg, arm, ctx, drift, 2 * cfg.n_traj)
            meas["gaussian"] = {}
            codes: list[list[torch.Tensor]] = [[] for _ in range(cfg.members)]
            for i, s in enumerate(cfg.sigmas):
                fr, gap, points, at_loss, counts = [], [], [], [], np.zeros(len(CK))
                for m in range(cfg.members):
                    fin = A["gauss_final"][m][i]
                    k = ml.classify_critical(fin, p, q, atol=cfg.limit_atol)
                    codes[m].append(k)
                    counts += np.bincount(k.numpy(), minlength=len(CK))
                    hit = (k == int(kind)).double()
                    fr.append(float(hit.mean()))
                    points.extend(hit.tolist())
                    gaps = (ml.loss(fin, p, q) - target).abs()
                    gap.append(float(gaps.max()))
                    at_loss.extend((gaps <= cfg.loss_tol).double().tolist())
                meas["gaussian"][f"sigma={s:g}"] = {
                    "fraction_at_expected": fr,
                    "max_loss_gap": gap,
                    "endpoint_counts": {CK(k).name: int(v) for k, v in enumerate(counts) if v},
                }
                sctx = {**ctx, "sigma": s}
                out.row(
                    "small-init-limit",
                    f"{arm}/sigma{s:g}",
                    Sample(points, proportion=True),
                    arms=[arm],
                    context=sctx,
                    label=f"p={p}, q={q} (p+q {side} 1), σ={s:g}: the origin's plane {origin}; fraction of {len(points)} "
                    f"endpoints on {kind.name.lower()} ≥ {cfg.min_fraction:g}",
                )
                out.row(
                    "small-init-final-loss",
                    f"{arm}/sigma{s:g}",
                    Sample(at_loss, proportion=True),
                    arms=[arm],
                    context=sctx,
                    label=f"p={p}, q={q}, σ={s:g}: fraction of {len(at_loss)} endpoints whose loss is "
                    f"{tname} = {target:.4f} within {cfg.loss_tol:g} ≥ {cfg.min_fraction:g}",
                )
            meas["unsettled_fraction"] = self._stage(out, arm, [torch.cat(k) for k in codes], cfg.settle_tolerance)
            out.values[arm] = meas
        return out

    @staticmethod
    def _chain_note(cfg: Landscape3Config, m: dict[str, Any]) -> str:
        per_sigma = "; ".join(
            f"σ={s:g}: {np.mean(g['fraction_at_expected']):.4f} at {m['expected_kind'].lower()}, max loss gap "
            f"{np.nanmax(g['max_loss_gap']):.1e}"
            for s, g in ((s, m["gaussian"][f"sigma={s:g}"]) for s in cfg.sigmas)
        )
        return f"origin {m['origin']}; energy drift ≤ {max(m['energy_max_rel_drift']):.2e}; {per_sigma}"

    def plot(self, cfg: Landscape3Config, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        n = len(cfg.chains)
        names = ("e", "w", "a")
        pairs = ((0, 1), (0, 2), (1, 2))
        paths = []
        for key, scale, fname, title in (
            ("traj", cfg.traj_scale, "fig5_near_origin.png", "Fig. 5 — near the origin"),
            ("wide", cfg.wide_scale, "fig2_flow_3d.png", "Fig. 2 — (e, w, a) flow"),
        ):
            fig, axes = plt.subplots(n, 3, figsize=(15, 4.4 * n), squeeze=False)
            for row, c in zip(axes, cfg.chains, strict=True):
                p, q = c.p, c.q
                A = run.arrays(chain_arm(p, q))
                for m in range(min(cfg.members, 2)):
                    codes = ml.classify_critical(A[key][m][-1], p, q, atol=max(cfg.limit_atol, 1e-2)).numpy()
                    tr = A[key][m].numpy()
                    for ax, (i, j) in zip(row, pairs, strict=True):
                        for k in range(tr.shape[1]):
                            col = KIND_COLOR[int(codes[k])]
                            ax.plot(tr[:, k, i], tr[:, k, j], color=col, lw=1)
                            ax.plot(tr[0, k, i], tr[0, k, j], "o", color=col, ms=3)
                for ax, (i, j) in zip(row, pairs, strict=True):
                    if (i, j) == (0, 1):
                        ax.axvline(0, color="0.6", lw=0.8)
                        ax.axhline(ml.SADDLE_W, color="gold", lw=0.8, ls="--")
                    ax.set(xlabel=names[i], ylabel=names[j], title=f"p={p}, q={q}: ({names[i]}, {names[j]}) projection")
                row[0].plot([], [], color=KIND_COLOR[int(CK.LOCAL_MIN)], label="→ local min (e = 0)")
                row[0].plot([], [], color=KIND_COLOR[int(CK.GLOBAL_MIN)], label="→ global min")
                row[0].plot([], [], color=KIND_COLOR[int(CK.NONE)], label="not yet at a critical set")
                row[0].legend(fontsize=7)
            t_end = cfg.traj_t_end if key == "traj" else cfg.wide_t_end
            fig.suptitle(f"{title}: GF paths from N(0, {scale:g}² I₃), t ≤ {t_end:g}")
            paths.append(save_figure(fig, figdir / fname))
        return paths
