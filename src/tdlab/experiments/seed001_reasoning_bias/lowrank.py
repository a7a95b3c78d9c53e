"""``anchors-lowrank``: seed 001 App. C, Fig. 13 — singular values of every weight matrix of the
``anchors-bias`` transformers (trained here, or ``--set from_run=RUN_DIR``; :class:`ProbeSource`).

Per γ, at the end of training: ``s_i/s_1`` of ``W^emb`` (``wte``), ``W^pos`` (``wpe``), every layer's
``W^Q, W^K, W^V, W^O, W^f1, W^f2`` and the output layer (``lm_head``), each matrix as a whole (the
embedding tables include the rows of tokens the data never show), and its effective rank (erank = exp of the
entropy of the normalised singular values). The rows read trained parameters.

How it reads the seed where App. C is terse (which rows are the seed's setting, the whole matrices; the task's
key position and set sizes) and the claims, with the paper's words, hypotheses and thresholds, are declared in
the seed's ``experiments.yaml`` (``tdlab explain anchors-lowrank`` prints both).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

from tdlab.claims import GroupResult, Measurements
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.seed001_reasoning_bias.common.gamma_sweep import AnchorsGammaSweep, ProbeConfig, ProbeSource
from tdlab.experiments.seed001_reasoning_bias.common.training import (
    PAPER_LR_TRANSFORMER,
    GammaArms,
    parameter_reading,
)
from tdlab.probes.spectrum import spectra
from tdlab.run_view import RunView


class AnchorsLowrankConfig(ProbeConfig):
    pass


def weight_matrices(arrays: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """``{paper name: (E, m, n)}`` of the matrices of Fig. 13, read from stored GPT arrays."""
    out = {"W^emb": arrays["wte"], "W^pos": arrays["wpe"]}
    for layer in range(layers):
        for k in ("Q", "K", "V", "O"):
            out[f"W^{k} (layer {layer + 1})"] = arrays[f"blocks.{layer}.attn.W_{k}.weight"]
        out[f"W^f1 (layer {layer + 1})"] = arrays[f"blocks.{layer}.mlp.W_1.weight"]
        out[f"W^f2 (layer {layer + 1})"] = arrays[f"blocks.{layer}.mlp.W_2.weight"]
    if "lm_head" in arrays:
        out["W^out"] = arrays["lm_head"]
    return out


def _slug(name: str) -> str:
    """A row id for a matrix name: ``"W^Q (layer 2)"`` -> ``"W_Q.layer2"``."""
    return name.replace("^", "_").replace(" (layer ", ".layer").replace(")", "")


@register
class AnchorsLowrank(ProbeSource, AnchorsGammaSweep[AnchorsLowrankConfig]):
    Config = AnchorsLowrankConfig
    # atlas: the γ-sweep's axes (inherited): the low-rank readings are of the trained parameters; the epoch budget decides how far training got (snapshots rescaled to fit every budget)

    def measure(self, cfg: AnchorsLowrankConfig, run: RunView) -> Measurements:
        m = {g: spectra(weight_matrices(run.arrays(GammaArms.arm(g)), cfg.model.layers)) for g in cfg.gammas}
        out = Measurements({GammaArms.arm(g): v for g, v in m.items()})
        end = cfg.schedule.epochs
        r = parameter_reading(end, end, cfg.train.lr, PAPER_LR_TRANSFORMER)
        ordered = sorted(cfg.gammas, reverse=True)  # smallest init first
        for name in next(iter(m.values())):
            for hi, lo in itertools.pairwise(ordered):
                out.row(
                    "fig13-low-rank-at-small-init",
                    f"{_slug(name)}/{hi:g}-below-{lo:g}",
                    m[hi][name]["erank"],
                    m[lo][name]["erank"],
                    arms=[GammaArms.arm(hi), GammaArms.arm(lo)],
                    provenance=r.provenance,
                    context={"matrix": name, "gamma": hi, "reference_gamma": lo, "epoch": end},
                    label=f"{name}: erank at γ = {hi:g} minus at γ = {lo:g} < 0; {r.label}",
                )
        return out

    def notes(self, cfg: AnchorsLowrankConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        m = {g: measured.values[GammaArms.arm(g)] for g in cfg.gammas}
        ordered = sorted(cfg.gammas, reverse=True)
        notes = [
            f"{name}: erank "
            + ", ".join(f"γ = {g:g} {np.mean(m[g][name]['erank']):.2f}" for g in ordered)
            + " (seed means)."
            for name in next(iter(m.values()))
        ]
        return self.probe_notes(cfg, measured, groups, notes)

    def plot(self, cfg: AnchorsLowrankConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        m = {g: analysis.measurements[GammaArms.arm(g)] for g in cfg.gammas}
        names = list(next(iter(m.values())))
        cols = 5
        rows = -(-len(names) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.8 * rows), squeeze=False)
        colors = {
            g: c
            for g, c in zip(
                sorted(cfg.gammas), ("tab:red", "tab:green", "tab:blue", "tab:purple", "tab:gray"), strict=False
            )
        }
        for k, name in enumerate(names):
            ax = axes[k // cols][k % cols]
            for g in sorted(cfg.gammas):
                sv = np.array(m[g][name]["sv"])  # (E, r)
                ax.plot(np.arange(1, sv.shape[1] + 1), sv.mean(0), color=colors.get(g, "k"), lw=1.2, label=f"γ = {g:g}")
                ax.fill_between(
                    np.arange(1, sv.shape[1] + 1), sv.min(0), sv.max(0), color=colors.get(g, "k"), alpha=0.2
                )
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
