"""``anchors-embedding``: seed 001 §4.3, Figs. 4, 9, 11 — the embedding space of the ``anchors-bias``
transformers (trained here, or ``--set from_run=RUN_DIR``; :class:`ProbeSource`).

Measured (the small-init arm γ = 0.8 unless said):

* Fig. 4A — cosine matrices of memory and reasoning anchors at ``fig4a_epochs`` (the seed: 200, 900 of
  1000), read as Fig. 3A's (:mod:`~tdlab.experiments.paper001_reasoning_bias.common.cosines`): the memory
  anchors' mean off-diagonal cosine, against the reasoning anchors', and the reasoning anchors' Spearman
  ρ with ``|s_i − s_j|``. An epoch the source run did not keep is a row with no measurement.
* Fig. 4B / 11 — PCA of the key and reasoning-anchor embeddings (end); key NN-order (share of keys
  whose cosine-nearest key is ``z ± 1``; chance ≈ 2/N_Z) at every γ.
* Fig. 4C / 9 — Eq. 14's vectors ``w̃_i^s = e^{−(i−s)²/12} − 1/d_m + ε``, ``ε ~ N(0, d_m^{−2γ})``, one
  draw per member: the measured reasoning cosines (end) are compared with Eq. 14's by their mean absolute
  error over all pairs; the error per ``|s_i − s_j|`` is reported, and the exact ``P^s`` cosines (Eq. 8/22
  on the task's population) beside them.

Every row reads trained parameters.

Declared in the seed's ``experiments.yaml`` (``tdlab explain anchors-embedding``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.config import Config
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.paper001_reasoning_bias.common.cosines import anchor_cosine_rows
from tdlab.experiments.paper001_reasoning_bias.common.gamma_sweep import AnchorsGammaSweep, ProbeConfig, ProbeSource
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    PAPER_LR_TRANSFORMER,
    GammaArms,
    anchor_cosine_grid,
    cosine_heatmap,
    has_state,
    parameter_reading,
)
from tdlab.probes.embedding import (
    anchor_cosine_readings,
    cosine_agreement,
    cosine_matrix,
    eq14_member_cosines,
    nn_order,
    pca,
)
from tdlab.run_view import RunView
from tdlab.theory.anchors import eq14_vectors, reasoning_theory_cosines, sigma_p

FIG4A_EPOCHS = (200, 900)  # the seed's Fig. 4A snapshots (of 1000 epochs); Figs. 4B–C, 9, 11 read the end


class EmbeddingClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run."""

    mem_cos_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 4A: memory anchors' mean off-diagonal cos >= 0.8
    rsn_rho_max: float = Field(-0.8, ge=-1.0, le=1.0)  # (t) 4A: reasoning ρ <= -0.8
    key_nn_min: float = Field(0.5, ge=0.0, le=1.0)  # (t) 4B: key NN-order >= 0.5 (chance ≈ 2/N_Z)
    eq14_cos_err_max: float = Field(0.1, ge=0.0, le=2.0)  # (t) 4C: mean |cos − cos_Eq14| <= 0.1
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)


class AnchorsEmbeddingConfig(ProbeConfig):
    # Fig. 4A's epochs (the seed: 200 and 900 of 1000): each one of snapshot_epochs (kept by the γ-sweep) or the end.
    fig4a_epochs: list[int] = [200, 900]
    emb_claims: EmbeddingClaims = EmbeddingClaims()

    @model_validator(mode="after")
    def _fig4a(self) -> AnchorsEmbeddingConfig:
        bad = [e for e in self.fig4a_epochs if e not in self.snapshot_epochs and e != self.schedule.epochs]
        if bad:
            raise ValueError(
                f"fig4a_epochs {bad} must be among snapshot_epochs={self.snapshot_epochs} or the last "
                f"epoch schedule.epochs={self.schedule.epochs}"
            )
        if self.emb_claims.small_gamma not in self.gammas:
            raise ValueError(
                f"emb_claims.small_gamma={self.emb_claims.small_gamma} must be one of gammas={self.gammas}"
            )
        return self


@register
class AnchorsEmbedding(ProbeSource, AnchorsGammaSweep[AnchorsEmbeddingConfig]):
    Config = AnchorsEmbeddingConfig

    def _wte(self, cfg: AnchorsEmbeddingConfig, run: RunView, gamma: float, epoch: int) -> torch.Tensor | None:
        arm = self.state_arm(cfg, gamma, epoch if epoch != cfg.schedule.epochs else "end")
        return run.arrays(arm)["wte"].double() if has_state(run, arm) else None

    def measure(self, cfg: AnchorsEmbeddingConfig, run: RunView) -> Measurements:
        t, c = cfg.task, cfg.emb_claims
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        _, p_cos = reasoning_theory_cosines(task)
        ids = task.token_classes()
        keys, rsn = ids["key"], ids["reasoning"]
        out = Measurements(
            {
                "sigma_p": sigma_p(cfg.task),
                "from_run": str(cfg.from_run) if cfg.from_run else None,
                "snapshots": {},
                "end": {},
            }
        )
        end = cfg.schedule.epochs
        for gi, g in enumerate(cfg.gammas):
            snaps = {}
            for e in cfg.fig4a_epochs:
                W = self._wte(cfg, run, g, e)
                if W is not None:
                    r = anchor_cosine_readings(W, (t.mem_min, t.mem_max), (t.rsn_min, t.rsn_max))
                    snaps[e] = {k: r[k] for k in ("mem_cos", "rsn_cos", "rsn_rho")}
            out.values["snapshots"][GammaArms.arm(g)] = {f"epoch {e}": v for e, v in snaps.items()}
            W = run.arrays(GammaArms.arm(g))["wte"].double()
            rsn_c = cosine_matrix(W[:, t.rsn_min : t.rsn_max + 1])
            eq14 = eq14_member_cosines(rsn, cfg.model.d, g, [arms.seeds[m] for m in arms.members_of(gi)])
            out.values["end"][GammaArms.arm(g)] = {
                "key_nn_order": nn_order(W[:, t.key_min : t.key_max + 1], keys).tolist(),
                "rsn_nn_order": nn_order(W[:, t.rsn_min : t.rsn_max + 1], rsn).tolist(),
                **{f"eq14_{k}": v for k, v in cosine_agreement(rsn_c, eq14).items()},
                **{f"ps_{k}": v for k, v in cosine_agreement(rsn_c, p_cos).items()},
            }
            if g == c.small_gamma:
                self._fig4a_rows(out, cfg, snaps)
        small, arm = c.small_gamma, GammaArms.arm(c.small_gamma)
        at_end = parameter_reading(end, end, cfg.train.lr, PAPER_LR_TRANSFORMER)
        e_s = out.values["end"][arm]
        ctx = {"gamma": small, "epoch": end}
        out.row(
            "fig4b-keys-in-numerical-order",
            f"gamma={small:g}",
            e_s["key_nn_order"],
            arms=[arm],
            provenance=at_end.provenance,
            context=ctx,
            label=f"end: share of keys whose cosine-nearest key is z ± 1 ≥ {c.key_nn_min:g} (t; chance ≈ "
            f"{2 / len(keys):.3f}); {at_end.label}",
        )
        for g in sorted(x for x in cfg.gammas if x < small):
            other = GammaArms.arm(g)
            out.row(
                "fig11-key-order-weaker-at-large-init",
                f"above-{g:g}",
                e_s["key_nn_order"],
                out.values["end"][other]["key_nn_order"],
                arms=[arm, other],
                provenance=at_end.provenance,
                context={**ctx, "reference_gamma": g},
                label=f"end: key NN-order at γ = {small:g} minus at γ = {g:g} > 0; {at_end.label}",
            )
        out.row(
            "fig4c-eq14-cosines",
            f"gamma={small:g}",
            e_s["eq14_abs_err"],
            arms=[arm],
            provenance=at_end.provenance,
            context=ctx,
            label=f"end: mean |cos − cos_Eq14| over reasoning pairs ≤ {c.eq14_cos_err_max:g} (t); {at_end.label}",
        )
        return out

    @staticmethod
    def _fig4a_rows(out: Measurements, cfg: AnchorsEmbeddingConfig, snaps: dict[int, dict[str, list[float]]]) -> None:
        c = cfg.emb_claims
        arm = GammaArms.arm(c.small_gamma)
        for e in cfg.fig4a_epochs:
            r = parameter_reading(e, cfg.schedule.epochs, cfg.train.lr, PAPER_LR_TRANSFORMER, FIG4A_EPOCHS)
            if e in snaps:
                anchor_cosine_rows(out, "fig4a", arm, e, snaps[e], r, c.small_gamma, c.mem_cos_min, c.rsn_rho_max)
                continue
            why = f"epoch {e}: the run keeps no parameters there (not among the source's snapshot_epochs)"
            for claim in ("memory-anchors-aligned", "memory-above-reasoning", "reasoning-anchors-ordered"):
                empty = Sample(())
                out.row(
                    f"fig4a-{claim}",
                    f"epoch{e}",
                    empty,
                    empty if claim == "memory-above-reasoning" else None,
                    arms=[arm],
                    provenance=r.provenance,
                    context={"gamma": c.small_gamma, "epoch": e},
                    label=why,
                )

    def notes(self, cfg: AnchorsEmbeddingConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        m = measured.values
        small = cfg.emb_claims.small_gamma
        e_s = m["end"][GammaArms.arm(small)]
        notes = [
            "γ = {:g}, |measured − Eq. 14| cosine by |s_i − s_j|: {} (seed means; the seed: the error grows with "
            "distance).".format(
                small, ", ".join(f"{d}: {np.mean(v):.3f}" for d, v in e_s["eq14_error_by_distance"].items())
            ),
            f"Eq. 14's width 12 (σ = √6) does not follow from Thm. 1, whose Gaussian has σ_P = std(Z + ΣA) = "
            f"{m['sigma_p']:.1f} on this run's task (≈ 29 at the seed's Z = 21..120). Against the exact P^s cosines the "
            f"mean |Δcos| is {np.mean(e_s['ps_abs_err']):.3f} (Spearman {np.mean(e_s['ps_spearman']):.3f}); against "
            f"Eq. 14's {np.mean(e_s['eq14_abs_err']):.3f} (Spearman {np.mean(e_s['eq14_spearman']):.3f}) (γ = {small:g}, seed "
            f"means): rank correlations near 1 for both, so only the values tell the theories apart. Eq. 14 uses "
            f"i = 1..d_m with d_m = {cfg.model.d} here.",
        ]
        for g in cfg.gammas:
            e = m["end"][GammaArms.arm(g)]
            notes.append(
                f"γ = {g:g} (end): key NN-order {np.mean(e['key_nn_order']):.3f}, reasoning NN-order "
                f"{np.mean(e['rsn_nn_order']):.3f}, mean |Δcos| vs Eq. 14 {np.mean(e['eq14_abs_err']):.3f}, vs P^s "
                f"{np.mean(e['ps_abs_err']):.3f} (seed means)."
            )
        source = [f"Parameters read from the anchors-bias run {cfg.from_run}."] if cfg.from_run else []
        return [*self.probe_notes(cfg, measured, groups, notes), *source]

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsEmbeddingConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        t = cfg.task
        small = cfg.emb_claims.small_gamma
        paths = []
        stored = [(f"epoch {e}", self._wte(cfg, run, small, e)) for e in cfg.fig4a_epochs]
        panels = [(k, W) for k, W in stored if W is not None] or [
            ("end", run.arrays(GammaArms.arm(small))["wte"].double())
        ]
        paths.append(self._fig_cos_pca(cfg, panels, f"Fig. 4A–B — γ = {small:g}", figdir / "fig4ab_embedding.png"))
        for g in (g for g in cfg.gammas if g != small):
            W = run.arrays(GammaArms.arm(g))["wte"].double()
            paths.append(
                self._fig_cos_pca(cfg, [("end", W)], f"Fig. 11 — γ = {g:g}", figdir / f"fig11_embedding_gamma{g:g}.png")
            )
        # Fig. 4C / 9: measured vs Eq. 14 vs P^s cosines
        _, p_cos = reasoning_theory_cosines(self.task(cfg))
        rsn = list(range(t.rsn_min, t.rsn_max + 1))
        arms = self.gamma_arms(cfg)
        gi = cfg.gammas.index(small)
        eq14 = eq14_member_cosines(rsn, cfg.model.d, small, [arms.seeds[m] for m in arms.members_of(gi)]).mean(0)
        meas = cosine_matrix(run.arrays(GammaArms.arm(small))["wte"].double()[:, t.rsn_min : t.rsn_max + 1]).mean(0)
        n = len(rsn)
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        cosine_heatmap(axes[0], eq14, t.rsn_min, "Fig. 4C top — cos of Eq. 14 vectors")
        mid = min(range(n), key=lambda k: abs(rsn[k] - 15))
        axes[1].plot(rsn, meas[mid].numpy(), "o-", label="measured")
        axes[1].plot(rsn, eq14[mid].numpy(), "s--", label="Eq. 14")
        axes[1].plot(rsn, p_cos[mid].numpy(), "^:", label="exact P^s")
        axes[1].set_title(f"Fig. 4C bottom — cos(w^{rsn[mid]}, w^s)", fontsize=9)
        axes[1].set_xlabel("s")
        axes[1].legend(fontsize=8)
        i, j = torch.triu_indices(n, n, 1)
        d = (i - j).abs().numpy()
        axes[2].scatter(eq14[i, j].numpy(), meas[i, j].numpy(), c=d, cmap="viridis", label="vs Eq. 14")
        axes[2].scatter(p_cos[i, j].numpy(), meas[i, j].numpy(), c=d, cmap="viridis", marker="^", label="vs P^s")
        axes[2].plot([-1, 1], [-1, 1], "k:", lw=0.8)
        axes[2].set_xlabel("theory cos")
        axes[2].set_ylabel("measured cos")
        axes[2].set_title("Fig. 9 — all reasoning pairs (colour |s_i − s_j|)", fontsize=9)
        axes[2].legend(fontsize=8)
        fig.suptitle(
            f"γ = {small:g}, end of training, mean over {cfg.members} seeds; σ_P = {sigma_p(cfg.task):.1f} vs Eq. 14's √6"
        )
        paths.append(save_figure(fig, figdir / "fig4c_fig9_eq14.png"))
        # Fig. 4D: PCA of Eq. 14's key and reasoning vectors
        fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
        keys = list(range(t.key_min, t.key_max + 1))
        for ax, (ids, kind) in zip(axes, ((keys, "key"), (rsn, "rsn")), strict=True):
            coords, _, _ = pca(eq14_vectors(ids, cfg.model.d, kind), 2)
            sc = ax.scatter(coords[:, 0].numpy(), coords[:, 1].numpy(), c=ids, cmap="viridis", s=14)
            plt.colorbar(sc, ax=ax, fraction=0.046)
            ax.set_title(
                f"Fig. 4D — PCA of Eq. 14 vectors, {'keys' if kind == 'key' else 'reasoning anchors'}", fontsize=9
            )
        paths.append(save_figure(fig, figdir / "fig4d_eq14_pca.png"))
        return paths

    def _fig_cos_pca(
        self, cfg: AnchorsEmbeddingConfig, panels: list[tuple[str, torch.Tensor]], title: str, path: Path
    ) -> Path:
        from tdlab.report.figures import plt, save_figure

        t = cfg.task
        fig, axes = plt.subplots(2, len(panels) + 1, figsize=(3.6 * (len(panels) + 1), 6.6), squeeze=False)
        anchor_cosine_grid(axes, panels, t)
        W = panels[-1][1]
        for row, (lo, hi, kind) in enumerate(
            ((t.key_min, t.key_max, "keys"), (t.rsn_min, t.rsn_max, "reasoning anchors"))
        ):
            ax = axes[row][-1]
            coords, ev, _ = pca(W[0, lo : hi + 1], 2)  # the first seed (a PCA basis per member)
            sc = ax.scatter(coords[:, 0].numpy(), coords[:, 1].numpy(), c=np.arange(lo, hi + 1), cmap="viridis", s=14)
            plt.colorbar(sc, ax=ax, fraction=0.046)
            ax.set_title(f"PCA {kind} ({panels[-1][0]}, seed 0; {float(ev.sum()):.0%} var.)", fontsize=9)
        fig.suptitle(title)
        return save_figure(fig, path)
