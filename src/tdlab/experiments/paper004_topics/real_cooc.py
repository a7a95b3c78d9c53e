"""``topics-real-cooc``: seed 004 (Li, Li & Risteski, ICML 2023), Table 2 (App. A.2): the topic-wise behaviour of
a pretrained model's embeddings and attention is not co-occurrence. The corpus, encoder and measures are
:mod:`~tdlab.experiments.paper004_topics.common.real_text`'s; the rows' provenance and stage as in
``topics-real``.

Measured per θ and member (a checkpoint is one deterministic model): the mean (debiased) attention and the mean
embedding cosine of the top co-occurring word pairs (``C(⌊θn⌋ + 1, 2)`` of them) against those of the same-topic
pairs.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-real-cooc``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.experiments.base import Analysis, register
from tdlab.experiments.paper004_topics.common.real_text import (
    RealTextExperiment,
    TopicsRealConfig,
    theta_key,
)
from tdlab.run_view import RunView

# Table 2 (App. A.2), rows in Table 1's θ order: (# pairs, attn same-topic, attn top co-occ., cos same, cos co-occ.)
TABLE2_BERT = {
    0.0005: (105, 0.00659, 0.00751, 0.468, 0.316),
    0.001: (435, 0.00621, 0.00695, 0.461, 0.311),
    0.002: (1711, 0.00597, 0.00677, 0.425, 0.323),
}
KEYS = ("attn_same", "attn_cooc", "cos_same", "cos_cooc")


class TopicsRealCoocConfig(TopicsRealConfig):
    pass


@register
class TopicsRealCooc(RealTextExperiment[TopicsRealCoocConfig]):
    Config = TopicsRealCoocConfig
    cooc = True

    def measure(self, cfg: TopicsRealCoocConfig, run: RunView) -> Measurements:
        """Per θ the same-topic and top co-occurring means (trained and untrained) and the two differences."""
        out = self.start(cfg, run)
        arms, det = self.trained_arms(cfg), bool(cfg.model.checkpoint)
        table: dict[str, Any] = {}
        for theta in cfg.thetas:
            th = theta_key(theta)
            v = {k: self.values(run, "trained", f"cooc/{th}/{k}") for k in (*KEYS, "pairs")}
            u = {k: self.values(run, "untrained", f"cooc/{th}/{k}") for k in KEYS}
            table[th] = {
                "trained": {k: x.tolist() for k, x in v.items()},
                "untrained": {k: x.tolist() for k, x in u.items()},
            }
            r = TABLE2_BERT.get(theta)
            row: dict[str, Any] = {"arms": arms, "provenance": self.provenance(cfg, theta), "context": {"theta": theta}}
            if v["attn_same"].size and v["attn_same"].size == v["attn_cooc"].size:
                refs = f" (seed's BERT, {r[0]} pairs: {r[1]:g} vs {r[2]:g})" if r else ""
                out.row(
                    "table2-same-topic-attention-below-cooc",
                    f"θ={th}",
                    Sample(v["attn_same"] - v["attn_cooc"], deterministic=det),
                    **row,
                    label=f"θ = {th}: attention same-topic − top co-occurring < 0{refs}",
                )
            if v["cos_same"].size and v["cos_same"].size == v["cos_cooc"].size:
                refs = f" (seed's BERT: {r[3]:g} vs {r[4]:g})" if r else ""
                out.row(
                    "table2-same-topic-cosine-above-cooc",
                    f"θ={th}",
                    Sample(v["cos_same"] - v["cos_cooc"], deterministic=det),
                    **row,
                    label=f"θ = {th}: embedding cosine same-topic − top co-occurring > 0{refs}",
                )
        out.values["table2"] = table
        out.values["reference_bert"] = {
            f"{t:g}": dict(zip(("pairs", *KEYS), r, strict=True)) for t, r in TABLE2_BERT.items()
        }
        return out

    def notes(self, cfg: TopicsRealCoocConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        ran, *common = self.common_notes(cfg, measured)
        return [
            ran,  # what ran leads: every verdict below is on this corpus and encoder
            *super().notes(cfg, measured, groups),
            *common,
        ]

    def plot(self, cfg: TopicsRealConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        table = analysis.measurements.get("table2", {})
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        ths = list(table)
        x = np.arange(len(ths))
        for ax, (a, b, label) in zip(
            axes,
            (("attn_same", "attn_cooc", "mean debiased attention"), ("cos_same", "cos_cooc", "mean embedding cosine")),
            strict=True,
        ):
            for k, (key, name) in enumerate(((a, "same-topic"), (b, "top co-occurring"))):
                vals = [table[t]["trained"].get(key) or [np.nan] for t in ths]
                ax.bar(
                    x + (k - 0.5) * 0.38,
                    [np.mean(v) for v in vals],
                    0.38,
                    yerr=[np.std(v) for v in vals],
                    label=name,
                    capsize=3,
                )
            ax.set_xticks(x)
            ax.set_xticklabels(
                [f"θ = {t}\n{int(np.mean(table[t]['trained'].get('pairs') or [0]))} pairs" for t in ths], fontsize=7
            )
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
        fig.suptitle(
            "Table 2 — same-topic vs top co-occurring word pairs (trained encoder; paper: attention lower, "
            "cosine higher for same-topic)",
            fontsize=9,
        )
        return [save_figure(fig, figdir / "table2_same_topic_vs_cooc.png")]
