"""``anchors-embedding``: seed 001 §4.3, Figs. 4, 9, 11 — the transformer's embedding space after the
γ-sweep of ``anchors-bias``.

Also the probe source the three probe experiments share (:class:`ProbeConfig`, :class:`ProbeSource`):
``--set from_run=RUN_DIR`` reads a finished ``anchors-bias`` run (its config must match this one's
task, model, γ values, members, seed, optimisation and schedule, else one error names the fields) and
copies its ``gamma=<γ>`` arrays and metrics into this run, so the analysis reads this run alone; without
it the experiment trains the same γ-sweep itself (``AnchorsBias.run``: parameters kept at init, at
``snapshot_epochs`` and at the end).

Measured (the small-init arm γ = 0.8 unless said):

* Fig. 4A — cosine matrices of memory and reasoning anchors at ``fig4a_epochs`` (the seed: 200, 900 of
  1000; quick: 2, 11 of 12): as Fig. 3A, mean off-diagonal memory cosine ``>= 0.8`` (t) and above the
  reasoning anchors'; reasoning ``ρ <= −0.8`` (t). An epoch the source run did not keep is
  ``not evaluable`` with that reason.
* Fig. 4B / 11 — PCA of the key and reasoning-anchor embeddings (end); key NN-order (share of keys
  whose cosine-nearest key is ``z ± 1``; chance ≈ 2/N_Z) ``>= 0.5`` (t) and above γ = 0.3 and 0.5 (paired).
* Fig. 4C / 9 — Eq. 14's vectors ``w̃_i^s = e^{−(i−s)²/12} − 1/d_m + ε``, ``ε ~ N(0, d_m^{−2γ})``, one
  draw per member: Spearman of the measured reasoning cosines (end) with theirs over all pairs ``>= 0.8``
  (t); the absolute error per ``|s_i − s_j|`` is reported (the seed: it grows with distance). The exact
  ``P^s`` cosines (Eq. 8/22 on the task's population) are overlaid and their Spearman reported: Eq. 14's
  width 12 (σ = √6) does not follow from Thm. 1's ``σ_P = std(Z + ΣA)`` (≈ 29 at the seed's task).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.config import Config
from tdlab.experiments.anchors_bias import AnchorsBias, AnchorsBiasConfig
from tdlab.experiments.anchors_mlp import _heat, pair_spearman, reasoning_theory_cosines
from tdlab.experiments.anchors_training import GammaArms
from tdlab.experiments.base import Analysis, RunContext, init_arm, register, snapshot_arm
from tdlab.models.gpt import GPT
from tdlab.probes.embedding import cosine_matrix, distance_spearman, nn_order, offdiag_mean, pca
from tdlab.report.figures import plt, save_figure
from tdlab.runs import Run, RunDirError
from tdlab.seeding import generators
from tdlab.theory.anchors import eq14_vectors, sigma_p
from tdlab.train.data import DATASET

__all__ = ["SOURCE_KEYS", "ProbeConfig", "ProbeSource", "EmbeddingClaims", "AnchorsEmbeddingConfig", "AnchorsEmbedding",
           "eq14_member_cosines", "error_by_distance"]

# Config keys an anchors-bias source run must share with the probe experiment reading it.
SOURCE_KEYS: tuple[str, ...] = ("seed", "members", "task", "model", "gammas", "train", "schedule")


class ProbeConfig(AnchorsBiasConfig):
    """An ``anchors-bias`` γ-sweep to probe: trained here, or read from ``from_run``."""

    # A finished anchors-bias run directory to read instead of training (its config must match: SOURCE_KEYS).
    from_run: str | None = Field(None, min_length=1, max_length=4096)
    n_probe: int = Field(1000, ge=1, le=1_000_000)  # training sequences per member fed through the model

    @model_validator(mode="after")
    def _source(self) -> ProbeConfig:
        if self.from_run is None:
            return self
        try:
            conf = Run(Path(self.from_run)).config
        except RunDirError as exc:
            raise ValueError(f"from_run: {exc}") from None
        if conf.get("experiment") != "anchors-bias":
            raise ValueError(f"from_run: {self.from_run} is a {conf.get('experiment')!r} run, need an anchors-bias run")
        theirs = conf.get("config", {})
        ours = self.model_dump(mode="json")
        bad = [k for k in SOURCE_KEYS if theirs.get(k) != ours.get(k)]
        if bad:
            raise ValueError(f"from_run: the source run's {', '.join(bad)} differ from this config's; run with the "
                             f"source's profile and --set values (its config.yaml) so the probes read the same setting")
        return self


class ProbeSource:
    """Train (or copy from ``from_run``) the γ-sweep and read its members back as models and data."""

    def run(self, cfg: ProbeConfig, ctx: RunContext) -> None:
        if cfg.from_run is not None:
            ctx.copy_arms(Path(cfg.from_run), [GammaArms.arm(g) for g in cfg.gammas])
            return
        AnchorsBias.run(self, cfg, ctx)  # the very γ-sweep of anchors-bias, snapshots at cfg.snapshot_epochs

    # ---- reading back ----------------------------------------------------------------------------
    @staticmethod
    def state_arm(cfg: ProbeConfig, gamma: float, when: str | int) -> str:
        """The stored arm of γ at ``when``: ``"end"``, ``"init"`` or an epoch (a trainer snapshot)."""
        arm = GammaArms.arm(gamma)
        if when == "end":
            return arm
        if when == "init":
            return init_arm(arm)
        return snapshot_arm(arm, int(when) * cfg.steps_per_epoch)

    @staticmethod
    def has_state(run: Run, arm: str) -> bool:
        return (run.path / "arrays" / f"{arm.replace('/', '__')}.safetensors").is_file()

    @staticmethod
    def model(cfg: ProbeConfig, arrays: dict[str, torch.Tensor]) -> GPT:
        """The ensemble (one member per stored member) holding ``arrays`` (``(E, ...)`` each)."""
        E = next(iter(arrays.values())).shape[0]
        m = GPT(cfg.model_for_task(), list(range(E)))  # the draw is overwritten
        m.load_state_dict(arrays)
        return m.eval()

    def probe_sequences(self, cfg: ProbeConfig) -> dict[str, torch.Tensor]:
        """The first ``n_probe`` training sequences of each seed index (members of every γ train on them):
        ``{tokens (n, B, L), label, key_pos, kind (n, B)}`` rebuilt from the data seeds (as ``anchor_splits``)."""
        task, arms = self.task(cfg), self.gamma_arms(cfg)
        out: dict[str, list[torch.Tensor]] = {"tokens": [], "label": [], "key_pos": [], "kind": []}
        b = min(cfg.n_probe, cfg.task.n_train)
        for g in generators(list(arms.seeds[: arms.n]), DATASET):
            d = task.dataset(g, cfg.task.n_train, "train")  # anchor_splits' first draw from this generator
            for k in out:
                out[k].append(d[k][:b])
        return {k: torch.stack(v) for k, v in out.items()}


# ------------------------------------------------------------------------------------------------
# Measures


def eq14_member_cosines(ids: list[int], d_m: int, gamma: float, seeds: list[int], kind: str = "rsn") -> torch.Tensor:
    """Cosines of Eq. 14's vectors for tokens ``ids``, one noise draw ``ε ~ N(0, d_m^{-2γ})`` per member
    seed: ``(E, n, n)`` float64."""
    out = []
    for g in generators(seeds, "eq14-noise"):
        out.append(cosine_matrix(eq14_vectors(ids, d_m, kind, d_m ** -gamma, g)))
    return torch.stack(out)


def error_by_distance(measured: torch.Tensor, theory: torch.Tensor) -> dict[int, list[float]]:
    """Mean ``|measured − theory|`` over pairs ``i < j`` at each distance ``|i − j|``, per member.

    Args:
        measured, theory: ``(E, n, n)`` cosine matrices (``theory`` may be ``(n, n)``).
    Returns:
        ``{Δ: [per member]}`` for ``Δ = 1..n-1``.
    """
    n = measured.shape[-1]
    err = (measured - theory).abs()
    out = {}
    for d in range(1, n):
        i = torch.arange(n - d)
        out[d] = err[..., i, i + d].mean(-1).tolist()
    return out


class EmbeddingClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run (issue 15)."""

    mem_cos_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 4A: memory anchors' mean off-diagonal cos >= 0.8
    rsn_rho_max: float = Field(-0.8, ge=-1.0, le=1.0)  # (t) 4A: reasoning ρ <= -0.8
    key_nn_min: float = Field(0.5, ge=0.0, le=1.0)  # (t) 4B: key NN-order >= 0.5 (chance ≈ 2/N_Z)
    eq14_spearman_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) 4C: Spearman(measured, Eq. 14 cos) >= 0.8
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)


class AnchorsEmbeddingConfig(ProbeConfig):
    # Fig. 4A's epochs (the seed: 200 and 900 of 1000): each one of snapshot_epochs (kept by the γ-sweep) or the end.
    fig4a_epochs: list[int] = [200, 900]
    emb_claims: EmbeddingClaims = EmbeddingClaims()

    @model_validator(mode="after")
    def _fig4a(self) -> AnchorsEmbeddingConfig:
        bad = [e for e in self.fig4a_epochs if e not in self.snapshot_epochs and e != self.schedule.epochs]
        if bad:
            raise ValueError(f"fig4a_epochs {bad} must be among snapshot_epochs={self.snapshot_epochs} or the last "
                             f"epoch schedule.epochs={self.schedule.epochs}")
        if self.emb_claims.small_gamma not in self.gammas:
            raise ValueError(f"emb_claims.small_gamma={self.emb_claims.small_gamma} must be one of gammas={self.gammas}")
        return self


def _quick(extra: dict) -> dict:
    """anchors-bias's quick profile (the same scale-down, so ``from_run`` of a quick anchors-bias run matches)."""
    import copy

    out = copy.deepcopy(AnchorsBias.profiles["quick"])
    out.update(extra)
    return out


@register
class AnchorsEmbedding(ProbeSource, AnchorsBias):
    name = "anchors-embedding"
    paper = "001 Reasoning bias under small initialisation"
    figure = "Figs. 4, 9, 11 (§4.3, B.7, C)"
    description = (
        "Embedding space of the anchors-bias transformers (γ 0.3, 0.5, 0.8; trained here or --set from_run=RUN): "
        "anchor cosines at snapshots (Fig. 4A), PCA and key nearest-neighbour order (4B, 11), measured reasoning "
        "cosines vs Eq. 14's Gaussian vectors and the exact P^s cosines (4C, 9)."
    )
    Config = AnchorsEmbeddingConfig
    profiles = {
        # anchors-bias's quick scale-down (12 epochs, snapshots 1, 2, 11); Fig. 4A's 200 and 900 of 1000 -> 2 and 11.
        "quick": _quick({"fig4a_epochs": [2, 11]}),
        "paper": {"members": 3, "schedule": {"epochs": 1000, "eval_epochs": 1, "n_eval": 10_000}},
    }

    def _wte(self, cfg, run: Run, gamma: float, when) -> torch.Tensor | None:
        arm = self.state_arm(cfg, gamma, when if when != cfg.schedule.epochs else "end")
        return run.arrays(arm)["wte"].double() if self.has_state(run, arm) else None

    def measures(self, cfg: AnchorsEmbeddingConfig, run: Run) -> dict:
        t = cfg.task
        task = self.task(cfg)
        arms = self.gamma_arms(cfg)
        _, p_cos = reasoning_theory_cosines(task)
        keys = list(range(t.key_min, t.key_max + 1))
        rsn = list(range(t.rsn_min, t.rsn_max + 1))
        out: dict = {"snap": {}, "end": {}}
        for gi, g in enumerate(cfg.gammas):
            snaps = {}
            for e in cfg.fig4a_epochs:
                W = self._wte(cfg, run, g, e)
                if W is None:
                    continue
                mem_c, rsn_c = cosine_matrix(W[:, t.mem_min: t.mem_max + 1]), cosine_matrix(W[:, t.rsn_min: t.rsn_max + 1])
                snaps[e] = {"mem_cos": offdiag_mean(mem_c).tolist(), "rsn_cos": offdiag_mean(rsn_c).tolist(),
                            "rsn_rho": distance_spearman(W[:, t.rsn_min: t.rsn_max + 1], rsn).tolist()}
            out["snap"][g] = snaps
            W = run.arrays(GammaArms.arm(g))["wte"].double()
            rsn_c = cosine_matrix(W[:, t.rsn_min: t.rsn_max + 1])
            seeds = [arms.seeds[m] for m in arms.members_of(gi)]
            eq14 = eq14_member_cosines(rsn, cfg.model.d, g, seeds)
            out["end"][g] = {
                "key_nn_order": nn_order(W[:, t.key_min: t.key_max + 1], keys).tolist(),
                "rsn_nn_order": nn_order(W[:, t.rsn_min: t.rsn_max + 1], rsn).tolist(),
                "eq14_spearman": [float(pair_spearman(rsn_c[m], eq14[m])) for m in range(rsn_c.shape[0])],
                "ps_spearman": pair_spearman(rsn_c, p_cos).tolist(),
                "eq14_error_by_distance": error_by_distance(rsn_c, eq14),
                "ps_error_by_distance": error_by_distance(rsn_c, p_cos),
            }
        return out

    def analyse(self, cfg: AnchorsEmbeddingConfig, run: Run) -> Analysis:
        c = cfg.emb_claims
        m = self.measures(cfg, run)
        out = Analysis(measurements={"snapshots": {f"gamma={g:g}": {f"epoch {e}": v for e, v in s.items()} for g, s in m["snap"].items()},
                                     "end": {f"gamma={g:g}": v for g, v in m["end"].items()}})
        out.measurements["sigma_p"] = sigma_p(cfg.task)
        out.measurements["from_run"] = str(cfg.from_run) if cfg.from_run else None
        small = c.small_gamma
        arm = GammaArms.arm(small)
        aligned = out.group("fig4a-memory-anchors-aligned",
                            f"Transformer, γ = {small:g}: memory anchors' embeddings are highly similar, more than the "
                            "reasoning anchors' (Fig. 4A)")
        ordered = out.group("fig4a-reasoning-anchors-ordered",
                            f"Transformer, γ = {small:g}: the reasoning anchors' cosine falls with |s_i − s_j| (Fig. 4A)")
        for e in cfg.fig4a_epochs:
            s = m["snap"][small].get(e)
            if s is None:
                why = (f"the run keeps no parameters at epoch {e} (not among the source's snapshot_epochs)")
                for grp, row in ((aligned, f"mem-cos/epoch{e}"), (aligned, f"mem-above-rsn/epoch{e}"), (ordered, f"rho/epoch{e}")):
                    grp.value(row, [], 0.0, 0.0, "ge", arms=[arm]).reason = why
                continue
            aligned.value(f"mem-cos/epoch{e}", s["mem_cos"], c.mem_cos_min, 0.0, "ge", arms=[arm],
                          statement=f"epoch {e}: mean off-diagonal cos of memory anchors ≥ {c.mem_cos_min:g} (t)")
            aligned.compare(f"mem-above-rsn/epoch{e}", s["mem_cos"], s["rsn_cos"], "gt", paired=True, arms=[arm],
                            statement=f"epoch {e}: mean off-diagonal cos, memory − reasoning anchors > 0")
            ordered.value(f"rho/epoch{e}", s["rsn_rho"], c.rsn_rho_max, 0.0, "le", arms=[arm],
                          statement=f"epoch {e}: Spearman ρ(cos, |s_i − s_j|) of reasoning anchors ≤ {c.rsn_rho_max:g} (t)")
        end = m["end"]
        n_z = cfg.task.key_max - cfg.task.key_min + 1
        grp = out.group("fig4b-keys-in-numerical-order",
                        f"γ = {small:g}: the key embeddings are in numerical order (Fig. 4B), more than at larger init (Fig. 11)")
        grp.value("key-nn-order", end[small]["key_nn_order"], c.key_nn_min, 0.0, "ge", arms=[arm],
                  statement=f"end: share of keys whose cosine-nearest key is z ± 1 ≥ {c.key_nn_min:g} (t; chance ≈ {2 / n_z:.3f})")
        for g in sorted(x for x in cfg.gammas if x < small):
            grp.compare(f"above-{g:g}", end[small]["key_nn_order"], end[g]["key_nn_order"], "gt", paired=True,
                        arms=[arm, GammaArms.arm(g)], statement=f"end: key NN-order at γ = {small:g} minus at γ = {g:g} > 0")
        grp = out.group("fig4c-eq14-cosines",
                        f"γ = {small:g}: the reasoning anchors' cosines follow those of Eq. 14's vectors (Figs. 4C, 9)")
        grp.value("spearman", end[small]["eq14_spearman"], c.eq14_spearman_min, 0.0, "ge", arms=[arm],
                  statement=f"end: Spearman(measured cos, Eq. 14 cos) over all reasoning pairs ≥ {c.eq14_spearman_min:g} (t)")
        errs = end[small]["eq14_error_by_distance"]
        out.notes.append("γ = {:g}, |measured − Eq. 14| cosine by |s_i − s_j|: {} (seed means; the seed: the error grows "
                         "with distance).".format(small, ", ".join(f"{d}: {np.mean(v):.3f}" for d, v in errs.items())))
        out.notes.append(
            f"Eq. 14's width 12 (σ = √6) does not follow from Thm. 1, whose Gaussian has σ_P = std(Z + ΣA) = "
            f"{sigma_p(cfg.task):.1f} on this run's task (≈ 29 at the seed's Z = 21..120); the exact P^s cosines are "
            f"overlaid: Spearman(measured, P^s cos) = {np.mean(end[small]['ps_spearman']):.3f} vs Eq. 14's "
            f"{np.mean(end[small]['eq14_spearman']):.3f} (γ = {small:g}, seed means). Eq. 14 uses i = 1..d_m with "
            f"d_m = {cfg.model.d} here.")
        for g in cfg.gammas:
            e = end[g]
            out.notes.append(f"γ = {g:g} (end): key NN-order {np.mean(e['key_nn_order']):.3f}, reasoning NN-order "
                             f"{np.mean(e['rsn_nn_order']):.3f}, Spearman vs Eq. 14 {np.mean(e['eq14_spearman']):.3f}, "
                             f"vs P^s {np.mean(e['ps_spearman']):.3f} (seed means).")
        if cfg.from_run:
            out.notes.append(f"Parameters read from the anchors-bias run {cfg.from_run}.")
        return out

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsEmbeddingConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        t = cfg.task
        small = cfg.emb_claims.small_gamma
        paths = []
        panels = [(f"epoch {e}", self._wte(cfg, run, small, e)) for e in cfg.fig4a_epochs]
        panels = [(k, W) for k, W in panels if W is not None] or [("end", run.arrays(GammaArms.arm(small))["wte"].double())]
        paths.append(self._fig_cos_pca(cfg, panels, f"Fig. 4A–B — γ = {small:g}", figdir / "fig4ab_embedding.png"))
        others = [g for g in cfg.gammas if g != small]
        for g in others:
            W = run.arrays(GammaArms.arm(g))["wte"].double()
            paths.append(self._fig_cos_pca(cfg, [("end", W)], f"Fig. 11 — γ = {g:g}", figdir / f"fig11_embedding_gamma{g:g}.png"))
        # Fig. 4C / 9: measured vs Eq. 14 vs P^s cosines
        task = self.task(cfg)
        _, p_cos = reasoning_theory_cosines(task)
        rsn = list(range(t.rsn_min, t.rsn_max + 1))
        arms = self.gamma_arms(cfg)
        gi = cfg.gammas.index(small)
        eq14 = eq14_member_cosines(rsn, cfg.model.d, small, [arms.seeds[m] for m in arms.members_of(gi)]).mean(0)
        meas = cosine_matrix(run.arrays(GammaArms.arm(small))["wte"].double()[:, t.rsn_min: t.rsn_max + 1]).mean(0)
        n = len(rsn)
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        _heat(axes[0], eq14, t.rsn_min, "Fig. 4C top — cos of Eq. 14 vectors")
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
        fig.suptitle(f"γ = {small:g}, end of training, mean over {cfg.members} seeds; σ_P = {sigma_p(cfg.task):.1f} vs Eq. 14's √6")
        paths.append(save_figure(fig, figdir / "fig4c_fig9_eq14.png"))
        # Fig. 4D: PCA of Eq. 14's key and reasoning vectors
        fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
        keys = list(range(t.key_min, t.key_max + 1))
        for ax, (ids, kind) in zip(axes, ((keys, "key"), (rsn, "rsn"))):
            coords, _, _ = pca(eq14_vectors(ids, cfg.model.d, kind), 2)
            sc = ax.scatter(coords[:, 0].numpy(), coords[:, 1].numpy(), c=ids, cmap="viridis", s=14)
            plt.colorbar(sc, ax=ax, fraction=0.046)
            ax.set_title(f"Fig. 4D — PCA of Eq. 14 vectors, {'keys' if kind == 'key' else 'reasoning anchors'}", fontsize=9)
        paths.append(save_figure(fig, figdir / "fig4d_eq14_pca.png"))
        return paths

    def _fig_cos_pca(self, cfg, panels, title: str, path: Path) -> Path:
        t = cfg.task
        fig, axes = plt.subplots(2, len(panels) + 1, figsize=(3.6 * (len(panels) + 1), 6.6), squeeze=False)
        for col, (label, W) in enumerate(panels):
            for row, (lo, hi, kind) in enumerate(((t.mem_min, t.mem_max, "memory"), (t.rsn_min, t.rsn_max, "reasoning"))):
                _heat(axes[row][col], cosine_matrix(W[:, lo: hi + 1]).mean(0), lo, f"{kind}, {label}")
        W = panels[-1][1]
        for row, (lo, hi, kind) in enumerate(((t.key_min, t.key_max, "keys"), (t.rsn_min, t.rsn_max, "reasoning anchors"))):
            ax = axes[row][-1]
            coords, ev, _ = pca(W[0, lo: hi + 1], 2)  # the first seed (a PCA basis per member)
            sc = ax.scatter(coords[:, 0].numpy(), coords[:, 1].numpy(), c=np.arange(lo, hi + 1), cmap="viridis", s=14)
            plt.colorbar(sc, ax=ax, fraction=0.046)
            ax.set_title(f"PCA {kind} ({panels[-1][0]}, seed 0; {float(ev.sum()):.0%} var.)", fontsize=9)
        fig.suptitle(title)
        return save_figure(fig, path)
