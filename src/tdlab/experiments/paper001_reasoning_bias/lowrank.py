"""``anchors-lowrank``: seed 001 App. C, Fig. 13 — singular values of every weight matrix of the
``anchors-bias`` transformers (trained here, or ``--set from_run=RUN_DIR``; :class:`ProbeSource`).

Per γ, at the end of training: ``s_i/s_1`` of ``W^emb`` (``wte``), ``W^pos`` (``wpe``), every layer's
``W^Q, W^K, W^V, W^O, W^f1, W^f2`` and the output layer (``lm_head``), each matrix as a whole (the
embedding tables include the rows of tokens the data never show), and its effective rank (erank = exp of the
entropy of the normalised singular values). The rows read trained parameters.

Declared in the seed's ``experiments.yaml`` (``tdlab explain anchors-lowrank``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tdlab.claims import GroupResult, Measurements
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.paper001_reasoning_bias.common.gamma_sweep import AnchorsGammaSweep, ProbeConfig, ProbeSource
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    PAPER_LR_TRANSFORMER,
    GammaArms,
    parameter_reading,
)
from tdlab.probes.spectrum import gpt_weight_matrices, spectra
from tdlab.report.standard_figures import Curves, Panel, Series, draw_figures
from tdlab.run_view import RunView


class AnchorsLowrankConfig(ProbeConfig):
    pass


def _slug(name: str) -> str:
    """A row id for a matrix name: ``"W^Q (layer 2)"`` -> ``"W_Q.layer2"``."""
    return name.replace("^", "_").replace(" (layer ", ".layer").replace(")", "")


FIG13_COLUMNS = 5
GAMMA_COLORS = ("tab:red", "tab:green", "tab:blue", "tab:purple", "tab:gray")  # by increasing γ


def _fig13_panels(cfg: AnchorsLowrankConfig, m: Mapping[str, Any]) -> list[Panel]:
    """Fig. 13: a panel per matrix, ``s_i/s_1`` of each γ over ``i`` (log scale), the members' mean and band."""
    gammas = sorted(cfg.gammas)
    colors = dict(zip(gammas, GAMMA_COLORS, strict=False))
    names = list(m[GammaArms.arm(gammas[0])])
    panels = []
    for k, name in enumerate(names):
        series = []
        for g in gammas:
            sv = np.array(m[GammaArms.arm(g)][name]["sv"])  # (E, r)
            series.append(Series(range(1, sv.shape[1] + 1), sv, f"γ = {g:g}", color=colors.get(g, "k")))
        panels.append(Panel(name, series=series, yscale="log", ylabel="s_i / s_1" if k % FIG13_COLUMNS == 0 else ""))
    return panels


@register
class AnchorsLowrank(ProbeSource, AnchorsGammaSweep[AnchorsLowrankConfig]):
    Config = AnchorsLowrankConfig
    # atlas: the γ-sweep's axes (inherited): the low-rank readings are of the trained parameters; the epoch budget decides how far training got (snapshots rescaled to fit every budget)

    def measure(self, cfg: AnchorsLowrankConfig, run: RunView) -> Measurements:
        m = {g: spectra(gpt_weight_matrices(run.arrays(GammaArms.arm(g)), cfg.model.layers)) for g in cfg.gammas}
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

    figures = (
        Curves(
            "fig13_singular_values.png",
            _fig13_panels,
            title=lambda cfg: (
                f"Fig. 13 — singular values at the end of training (mean over {cfg.members} seeds, band min–max)"
            ),
            xlabel="i",
            size=(3.3, 2.8),
            legend=6,
            columns=FIG13_COLUMNS,
        ),
    )

    def plot(self, cfg: AnchorsLowrankConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """Fig. 13 alone: not the γ-sweep's Fig. 2A and Fig. 8 (the source run's figures)."""
        return draw_figures(self.figures, cfg, run, analysis.measurements, figdir)
