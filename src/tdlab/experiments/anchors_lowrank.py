"""``anchors-lowrank``: seed 001 App. C, Fig. 13 — singular values of every weight matrix of the
``anchors-bias`` transformers (trained here, or ``--set from_run=RUN_DIR``; :class:`ProbeSource`).

Per γ, at the end of training: ``s_i/s_1`` of ``W^emb`` (``wte``), ``W^pos`` (``wpe``), every layer's
``W^Q, W^K, W^V, W^O, W^f1, W^f2`` and the output layer (``lm_head``), each matrix as a whole (the
embedding tables include the rows of tokens the data never show: the seed's figure is of the full
matrices). The seed: "as the initialization scale decreases, the parameter matrices exhibit a
pronounced low-rank structure". Claim, per matrix: ``erank(γ=0.8) < erank(γ=0.5) < erank(γ=0.3)``
(paired over seeds; erank = exp of the entropy of the normalised singular values), one row per matrix
and neighbouring pair of γ, so a failure names its matrix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tdlab.experiments.anchors_bias import AnchorsBias
from tdlab.experiments.anchors_embedding import ProbeConfig, ProbeSource, _quick
from tdlab.experiments.anchors_training import GammaArms
from tdlab.experiments.base import Analysis, register
from tdlab.probes.embedding import erank
from tdlab.report.figures import plt, save_figure
from tdlab.runs import Run

__all__ = ["AnchorsLowrankConfig", "AnchorsLowrank", "weight_matrices", "spectra"]


class AnchorsLowrankConfig(ProbeConfig):
    pass


def weight_matrices(arrays: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """``{paper name: (E, m, n)}`` of the matrices of Fig. 13, read from stored GPT arrays."""
    out = {"W^emb": arrays["wte"], "W^pos": arrays["wpe"]}
    for l in range(layers):
        for k in ("Q", "K", "V", "O"):
            out[f"W^{k} (layer {l + 1})"] = arrays[f"blocks.{l}.attn.W_{k}.weight"]
        out[f"W^f1 (layer {l + 1})"] = arrays[f"blocks.{l}.mlp.W_1.weight"]
        out[f"W^f2 (layer {l + 1})"] = arrays[f"blocks.{l}.mlp.W_2.weight"]
    if "lm_head" in arrays:
        out["W^out"] = arrays["lm_head"]
    return out


def spectra(mats: dict[str, torch.Tensor]) -> dict[str, dict[str, list]]:
    """Per matrix: ``sv`` (E, r) singular values over the largest, and ``erank`` (E,)."""
    out = {}
    for k, W in mats.items():
        s = torch.linalg.svdvals(W.double())
        out[k] = {"sv": (s / s[:, :1]).tolist(), "erank": erank(W).tolist()}
    return out


def _slug(name: str) -> str:
    """A row id for a matrix name: ``"W^Q (layer 2)"`` -> ``"W_Q.layer2"``."""
    return name.replace("^", "_").replace(" (layer ", ".layer").replace(")", "")


@register
class AnchorsLowrank(ProbeSource, AnchorsBias):
    name = "anchors-lowrank"
    paper = "001 Reasoning bias under small initialisation"
    figure = "Fig. 13 (App. C)"
    description = (
        "Singular values s_i/s_1 of W^emb, W^pos, every layer's W^Q, W^K, W^V, W^O, W^f1, W^f2 and the output layer of "
        "the anchors-bias transformers (trained here or --set from_run=RUN), per γ; claim per matrix: effective rank "
        "falls as γ grows (smaller init, lower rank)."
    )
    Config = AnchorsLowrankConfig
    profiles = {
        "quick": _quick({}),  # anchors-bias's quick scale-down
        "paper": {"members": 3, "schedule": {"epochs": 1000, "eval_epochs": 1, "n_eval": 10_000}},
    }

    def measures(self, cfg: AnchorsLowrankConfig, run: Run) -> dict[float, dict[str, dict[str, list]]]:
        return {g: spectra(weight_matrices(run.arrays(GammaArms.arm(g)), cfg.model.layers)) for g in cfg.gammas}

    def analyse(self, cfg: AnchorsLowrankConfig, run: Run) -> Analysis:
        m = self.measures(cfg, run)
        out = Analysis(measurements={f"gamma={g:g}": v for g, v in m.items()})
        ordered = sorted(cfg.gammas, reverse=True)  # smallest init first
        grp = out.group("fig13-low-rank-at-small-init",
                        "Every weight matrix's effective rank is lower the smaller the initialisation: "
                        "erank(γ = 0.8) < erank(γ = 0.5) < erank(γ = 0.3) (Fig. 13)")
        names = list(next(iter(m.values())))
        for name in names:
            for hi, lo in zip(ordered, ordered[1:]):
                grp.compare(f"{_slug(name)}/{hi:g}-below-{lo:g}", m[hi][name]["erank"], m[lo][name]["erank"], "lt", paired=True,
                            arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
                            statement=f"{name}: erank at γ = {hi:g} minus at γ = {lo:g} < 0")
        for name in names:
            out.notes.append(f"{name}: erank " + ", ".join(f"γ = {g:g} {np.mean(m[g][name]['erank']):.2f}" for g in ordered)
                             + " (seed means).")
        return out

    def plot(self, cfg: AnchorsLowrankConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        m = {g: analysis.measurements[f"gamma={g:g}"] for g in cfg.gammas}
        names = list(next(iter(m.values())))
        cols = 5
        rows = -(-len(names) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.8 * rows), squeeze=False)
        colors = {g: c for g, c in zip(sorted(cfg.gammas), ("tab:red", "tab:green", "tab:blue", "tab:purple", "tab:gray"))}
        for k, name in enumerate(names):
            ax = axes[k // cols][k % cols]
            for g in sorted(cfg.gammas):
                sv = np.array(m[g][name]["sv"])  # (E, r)
                ax.plot(np.arange(1, sv.shape[1] + 1), sv.mean(0), color=colors.get(g, "k"), lw=1.2, label=f"γ = {g:g}")
                ax.fill_between(np.arange(1, sv.shape[1] + 1), sv.min(0), sv.max(0), color=colors.get(g, "k"), alpha=0.2)
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("i")
            if k % cols == 0:
                ax.set_ylabel("s_i / s_1")
        for k in range(len(names), rows * cols):
            axes[k // cols][k % cols].axis("off")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"Fig. 13 — singular values at the end of training (mean over {cfg.members} seeds, band min–max)")
        return [save_figure(fig, figdir / "fig13_singular_values.png")]
