"""``markov-landscape``: seed 000 (Local to Global), Fig. 1 (a)-(d), Thms. 1, 2, 8 and Lemma 1.

No transformer is trained: the gradient flow of the canonical low-rank model's exact population loss
(:mod:`tdlab.theory.markov_landscape`, Eq. 3) is integrated from random initial points, for each chain
(defaults ``(p, q) = (0.2, 0.3)``, ``p + q < 1``, Fig. 1 (a)/(b), and ``(0.5, 0.8)``, ``p + q > 1``,
Fig. 1 (c)/(d)). Per member (seed):

* a few display trajectories from ``N(0, traj_scale² I)``, integrated accurately (Dormand-Prince,
  ``rtol = traj_rtol``), along which the energy Eq. (4) is followed (Lemma 1: constant along the exact
  flow, so along a numerical trajectory a check of the integrator);
* ``n_random`` initial points ``θ₀ ~ N(0, init_scale² I)`` integrated to ``t_end`` (Rosenbrock 2(3)):
  the endpoint's critical set (:func:`classify_critical`, Thm. 1) against the basin Thm. 2 / Thm. 8
  assign to θ₀ (:func:`predict_basin`);
* ``n_gaussian`` small Gaussian inits for each σ in ``sigmas``: the fraction of flow endpoints at the
  local minimum against the App. G quadrature probability :func:`gaussian_basin_probability`
  (≈ 1 for p + q > 1, Thm. 2; ≈ 0 for p + q < 1, Thm. 8).

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-landscape``).

``markov-landscape-3d`` (:mod:`.landscape_3d`) shares the configuration, the flows and the run here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from tdlab.claims import Measurements, Sample
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
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK


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


def _agreement_tolerance(cfg: LandscapeConfig, row: Any) -> float:
    return cfg.settle_tolerance


def quadrature_local_min(cfg: LandscapeConfig, row: Any) -> float:
    """App. G: the Gaussian measure of Thm. 2 / Thm. 8's local-minimum basin for the row's σ and chain."""
    c = row.context
    return float(ml.gaussian_basin_probability(float(c["sigma"]), float(c["p"]), float(c["q"]))[CK.LOCAL_MIN])


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


# ----------------------------------------------------------------------------------------------
# Flows


@register
class MarkovLandscape(FlowExperiment[LandscapeConfig]):
    Config = LandscapeConfig

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
            drift = [float(ml.max_energy_drift(A["traj"][m]).max()) for m in range(cfg.members)]
            meas["energy_max_rel_drift"] = drift
            self._energy(out, cfg, arm, ctx, drift, cfg.n_traj)
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

    @staticmethod
    def _chain_note(cfg: LandscapeConfig, m: dict[str, Any]) -> str:
        gauss = "; ".join(
            f"σ={s:g}: local-min fraction {np.mean(m['gaussian'][f'sigma={s:g}']['local_min_fraction']):.4f} "
            f"(quadrature {m['gaussian'][f'sigma={s:g}']['quadrature_local_min']:.4f})"
            for s in cfg.sigmas
        )
        return (
            f"energy drift ≤ {max(m['energy_max_rel_drift']):.2e}; basin agreement "
            f"{', '.join(f'{100 * a:.2f}%' for a in m['basin_agreement'])} ({m['basin_disagreements']} disagreements of "
            f"{cfg.members * cfg.n_random}); {gauss}"
        )

    def plot(self, cfg: LandscapeConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        n = len(cfg.chains)
        fig, axes = plt.subplots(n, 3, figsize=(16, 4.8 * n), squeeze=False)
        elim, wlim = 2.5, (-2.5, 2.5)
        E_, W_ = np.meshgrid(np.linspace(-elim, elim, 301), np.linspace(*wlim, 301), indexing="ij")
        grid = torch.from_numpy(np.stack([E_, W_], -1))

        def frame(ax: Any, title: str) -> None:  # the (e, w) panels' axes, title and legend
            ax.set(xlim=wlim, ylim=(-elim, elim), xlabel="w", ylabel="e", title=title)
            ax.title.set_fontsize(9)
            ax.legend(fontsize=7, loc="upper left")

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
            frame(ax, f"({'c' if big else 'a'}) p={p}, q={q}: energy, critical sets, −∇L, GF paths")
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
            frame(ax, f"({'d' if big else 'b'}) basins: red I_min, green I_*; dots θ₀ by flow limit")
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
