"""``topics-real``: seed 004 (Li, Li & Risteski, ICML 2023) on real text, §6.2 (Tables 1 and 5, Fig. 3) with
App. G.3's method; the corpus, encoder and measures are :mod:`~tdlab.experiments.paper004_topics.common.real_text`'s.

Measured per θ and member (a checkpoint is one deterministic model): Table 1's (``single``) and Table 5's
(``multi``) same-topic / different-topic ratios of cosine, dot product and attention, Fig. 3's 9 × 9 cosine map
of 3 words from each of 3 topics, and the same, with its cosine gap's z-score, of the untrained control
(``mlm@init``).

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-real``).

The seed's BERT rows are printed beside ours (reference only, never a pass criterion).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.declare import Threshold
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.paper004_topics.common.real_text import (
    MEASURE_ARMS,
    MEASURES,
    MODES,
    RealTextExperiment,
    TopicsRealConfig,
    theta_key,
)
from tdlab.report.standard_figures import Curves, Panel, Series
from tdlab.run_view import RunView
from tdlab.runs import RunDirError

# The seed's pretrained BERT rows (reference only, never a pass criterion): θ -> (cosine, dot, attention).
TABLE1_BERT = {  # Table 1 ("Bert" rows; one topic per word) and its "Bert (randomly initialized)" rows
    "trained": {0.0005: (1.21, 1.19, 1.32), 0.001: (1.13, 1.15, 1.28), 0.002: (1.11, 1.13, 1.22)},
    "untrained": {
        0.0005: (1.00080, 1.00063, 0.99943),
        0.001: (0.99974, 1.00036, 0.99996),
        0.002: (1.00016, 1.00027, 1.00007),
    },
}
TABLE5_BERT = {  # Table 5 (App. G.3; one or more topics per word), same rows
    "trained": {0.0005: (1.14, 1.04, 1.23), 0.001: (0.97, 1.05, 1.17), 0.002: (0.99, 0.93, 1.13)},
    "untrained": {
        0.0005: (0.99814, 0.99957, 1.00009),
        0.001: (0.99820, 1.00167, 1.00013),
        0.002: (0.99964, 0.99928, 0.99978),
    },
}

DIRECTION = Threshold(
    "paper", "claims.ratio_min = 1: the caption's direction (same-topic above different-topic), no margin"
)


def _ratio_panels(cfg: TopicsRealConfig, m: Mapping[str, Any]) -> list[Panel]:
    """Tables 1 (``single``) and 5 (``multi``): each measure's member-mean ratio per θ, trained (solid) and
    untrained (dotted), beside the seed's BERT (crosses); the legend on the right panel only."""
    table = m.get("ratios", {})
    panels = []
    for k, mode in enumerate(MODES):
        named = k == len(MODES) - 1
        series = []
        for i, name in enumerate(MEASURES):
            for which, ls in (("trained", "-"), ("untrained", ":")):
                ths = list(table.get(which, {}).get(mode, {}))
                ys = [np.mean(table[which][mode][t][name]) if table[which][mode][t][name] else np.nan for t in ths]
                series.append(
                    Series([float(t) for t in ths], ys, f"{which} {name}" if named else "", f"o{ls}", f"C{i}")
                )
        ref = (TABLE1_BERT if mode == "single" else TABLE5_BERT)["trained"]
        for i, name in enumerate(MEASURES):
            series.append(
                Series(list(ref), [r[i] for r in ref.values()], f"seed's BERT {name}" if named else "", "x--", f"C{i}")
            )
        panels.append(
            Panel(
                f"{'Table 1' if mode == 'single' else 'Table 5'} ({mode})",
                reference={"": 1.0},
                series=series,
                xscale="log",
                ylabel=None if k == 0 else "",
            )
        )
    return panels


@register
class TopicsReal(RealTextExperiment[TopicsRealConfig]):
    Config = TopicsRealConfig

    def measure(self, cfg: TopicsRealConfig, run: RunView) -> Measurements:
        """Per θ the trained model's ratios (Tables 1, 5), the control's attention ratio and cosine gap z-score,
        Fig. 3's within − cross cosine; the encoder's stage; the pair counts and the seed's BERT rows."""
        out = self.start(cfg, run)
        c, arms, det = cfg.claims, self.trained_arms(cfg), bool(cfg.model.checkpoint)
        table: dict[str, Any] = {}
        for theta in cfg.thetas:
            th = theta_key(theta)
            prov = self.provenance(cfg, theta)
            for mode in MODES:
                ref = TABLE1_BERT if mode == "single" else TABLE5_BERT
                for which in ("trained", "untrained"):
                    for i, m in enumerate(MEASURES):
                        v = self.values(run, which, f"{mode}/{th}/{m}")
                        table.setdefault(which, {}).setdefault(mode, {}).setdefault(th, {})[m] = v.tolist()
                        r = ref[which].get(theta)
                        refs = f" (seed's BERT at θ = {theta:g}: {r[i]:g})" if r else ""
                        if v.size == 0:
                            continue
                        if which == "trained" and (mode == "single" or m == "attention"):
                            gid = (
                                "table1-same-topic-ratios-above-1"
                                if mode == "single"
                                else "table5-attention-ratio-above-1"
                            )
                            out.row(
                                gid,
                                f"θ={th}/{m}",
                                Sample(v, deterministic=det),
                                arms=arms,
                                provenance=prov,
                                context={"theta": theta, "measure": m, "mode": mode},
                                label=f"trained {m} ratio (same/diff topic, {mode}) at θ = {th} > {c.ratio_min:g}{refs}",
                            )
                        elif which == "untrained" and m == "attention":
                            out.row(
                                "untrained-control-attention-ratio-near-1",
                                f"{mode}/θ={th}",
                                Sample(v, deterministic=det),
                                provenance=prov,
                                context={"theta": theta, "mode": mode},
                                label=f"untrained attention ratio ({mode}) at θ = {th} within 1 ± {c.control_tol:g}{refs}",
                            )
                z = self.values(run, "untrained", f"{mode}/{th}/cos_gap_z")
                if z.size:
                    table.setdefault("untrained", {}).setdefault(mode, {}).setdefault(th, {})["cos_gap_z"] = z.tolist()
                    out.row(
                        "untrained-control-cosine-gap-null",
                        f"{mode}/θ={th}",
                        Sample(z, deterministic=det),
                        provenance=prov,
                        context={"theta": theta, "mode": mode},
                        label=f"untrained cosine gap z-score ({mode}) at θ = {th} within ± {c.control_z:g}",
                    )
                for key in ("words", "same_pairs", "diff_pairs", "set_size"):
                    v = self.values(run, "trained", f"{mode}/{th}/{key}")
                    if v.size:
                        table.setdefault("pairs", {}).setdefault(mode, {}).setdefault(th, {})[key] = int(v[0])
        for which in ("trained", "untrained"):
            within, cross = fig3_within_cross(run, which)
            table.setdefault("fig3", {})[which] = {"within": within.tolist(), "cross": cross.tolist()}
            if which == "trained" and within.size:
                out.row(
                    "fig3-within-topic-cosine-above-cross",
                    "trained",
                    Sample(within - cross, deterministic=det),
                    arms=arms,
                    provenance=self.provenance(cfg),
                    context={"which": which},
                    label="trained: mean within-topic cosine − mean cross-topic cosine (9 x 9 map) > 0",
                )
        out.values["ratios"] = table
        out.values["reference_bert"] = {"table1": _ref_json(TABLE1_BERT), "table5": _ref_json(TABLE5_BERT)}
        words = fig3_word_strings(run)
        if words:
            out.values["fig3_words"] = words
        return out

    def notes(self, cfg: TopicsRealConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        notes = self.common_notes(cfg, measured)
        table = measured.values["ratios"]
        for mode, ref, name in (("single", TABLE1_BERT, "Table 1"), ("multi", TABLE5_BERT, "Table 5")):
            ours = "; ".join(
                f"θ={th}: "
                + ", ".join(
                    f"{m} {np.mean(table['trained'][mode][th][m]):.3f}"
                    for m in MEASURES
                    if table["trained"][mode][th][m]
                )
                for th in table.get("trained", {}).get(mode, {})
            )
            theirs = "; ".join(
                f"θ={t:g}: cosine {r[0]:g}, dot {r[1]:g}, attention {r[2]:g}" for t, r in ref["trained"].items()
            )
            notes.append(
                f"{name} ({mode}), ours (member means): {ours}. Seed's BERT (reference, 100 topics on its "
                f"full Wikipedia, other θ scale): {theirs}."
            )
        words = measured.values.get("fig3_words")
        if words:
            notes.append(
                "Fig. 3 words (3 unambiguous top words of the 3 topics with the clearest top words): "
                + " | ".join(", ".join(g) for g in words)
            )
        # what ran (the corpus, the encoder) leads: every verdict below is on it
        return [notes[0], *super().notes(cfg, measured, groups), *notes[1:]]

    figures = (
        Curves(
            "ratios_vs_theta.png",
            _ratio_panels,
            xlabel="ambiguity threshold θ",
            ylabel="same-topic / different-topic",
            legend=6,
        ),
    )

    def plot(self, cfg: TopicsRealConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """Fig. 3 (9 x 9 cosine maps, trained and untrained member 0), the declared ratios per θ beside the seed's
        BERT, and the per-layer / per-head attention ratio heatmaps."""
        from tdlab.report.figures import plt, save_figure

        paths = []
        words: list[str] = functools.reduce(operator.iadd, fig3_word_strings(run), [])
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
        for ax, which in zip(axes, ("trained", "untrained"), strict=True):
            try:
                cos = run.arrays(f"fig3/{which}")["cos"][0].numpy()
            except (RunDirError, KeyError, OSError, ValueError):
                continue
            im = ax.imshow(cos, cmap="viridis")
            ax.set_xticks(range(len(words)))
            ax.set_yticks(range(len(words)))
            ax.set_xticklabels(words, rotation=60, fontsize=7)
            ax.set_yticklabels(words, fontsize=7)
            ax.set_title(f"{which} (member 0)", fontsize=9)
            fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle("Fig. 3 — input-embedding cosine of 3 words from each of 3 LDA topics", fontsize=10)
        paths.append(save_figure(fig, figdir / "fig3_cosine_map.png"))
        metrics = run.metrics()
        sub = metrics[metrics["arm"] == MEASURE_ARMS["trained"]]
        for mode in MODES:
            ths = [theta_key(t) for t in cfg.thetas]
            fig, axes = plt.subplots(1, len(ths), figsize=(3.6 * len(ths), 3.2), squeeze=False)
            for ax, th in zip(axes[0], ths, strict=True):
                rows = sub[sub["name"].str.startswith(f"{mode}/{th}/attention/L")]
                if rows.empty:
                    continue
                lh = rows["name"].str.extract(r"L(\d+)H(\d+)$").astype(int)
                mean = rows.assign(l=lh[0], h=lh[1]).groupby(["l", "h"])["value"].mean().unstack().to_numpy()
                im = ax.imshow(mean, cmap="coolwarm", vmin=min(0.8, np.nanmin(mean)), vmax=max(1.2, np.nanmax(mean)))
                ax.set_xlabel("head")
                ax.set_ylabel("layer")
                ax.set_title(f"θ = {th}", fontsize=9)
                fig.colorbar(im, ax=ax, fraction=0.046)
            fig.suptitle(f"attention ratio per layer and head, trained, member mean ({mode})", fontsize=9)
            paths.append(save_figure(fig, figdir / f"attention_ratio_heads_{mode}.png"))
        return [*paths, *super().plot(cfg, run, analysis, figdir)]


def _ref_json(ref: dict) -> dict:
    return {w: {f"{t:g}": dict(zip(MEASURES, r, strict=True)) for t, r in rows.items()} for w, rows in ref.items()}


def fig3_within_cross(run: RunView, which: str) -> tuple[np.ndarray, np.ndarray]:
    """``(within (E,), cross (E,))`` mean cosines of the stored 9 x 9 maps (3 groups of 3 words, distinct pairs)."""
    try:
        cos = run.arrays(f"fig3/{which}")["cos"].double()  # (E, 9, 9)
    except (RunDirError, KeyError, OSError, ValueError):  # a run that stopped before measuring
        return np.zeros(0), np.zeros(0)
    g = torch.arange(cos.shape[-1]) // 3
    same = (g[:, None] == g[None, :]) & ~torch.eye(cos.shape[-1], dtype=torch.bool)
    cross = g[:, None] != g[None, :]
    return cos[:, same].mean(-1).numpy(), cos[:, cross].mean(-1).numpy()


def fig3_word_strings(run: RunView) -> list[list[str]]:
    """The Fig. 3 words as strings (from the cached corpus vocabulary), 3 groups of 3."""
    try:
        ids = run.arrays("fig3/trained")["ids"][0].tolist()
        vocab = json.loads((run.path / "cache" / "vocab.json").read_text())
    except (RunDirError, KeyError, OSError, ValueError):
        return []
    return [[vocab[i] for i in ids[k : k + 3]] for k in range(0, len(ids), 3)]
