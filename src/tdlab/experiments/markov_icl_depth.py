"""``markov-icl-depth``: seed 003 ("Attention with Markov", talk), Part II, "Memory = k, Depth?".

Every sequence has its own random k-th order binary kernel (rows iid Dirichlet(1),
:class:`~tdlab.tasks.markov_kth.InContextMarkov`), so the only way to predict well is in context:
match the current k-context against the history and count what followed ("ICL for kth-order
Markov"). The Bayes-optimal predictor is the add-one (Laplace) order-k estimator
(:func:`tdlab.theory.kgram.kgram_probs`), the baseline of every gap here, computed on the *same*
fresh sequences as the model's loss. The talk's results:

* depth matters: a 1-layer transformer does not do ICL (it cannot form an induction head), a
  2-layer one does for k = 1 (induction head);
* "Constant depth suffices": any order-k in-context estimator is representable by 3 layers,
  1 head per layer, relative positional encodings and layer norm.

We train pre-LN GPT-2 models (``arch="gpt2"``, one head per layer) of depth 1, 2, 3 with absolute
positions, a learned relative positional bias, or both, for k = 1, 2 (paper profile: k = 3 too),
and report the gap ``model loss - order-k Laplace loss`` (nats, averaged over positions) per
cell, per-position loss curves beside the estimators of orders 0..k, the attention maps of each
layer, and the last layer's context-matching score (attention mass on keys whose preceding k
tokens match the current ones; :mod:`tdlab.probes.attention`) against chance.

Claims (computed from each member's probe metrics): k = 1: one layer stays at least
``clear_margin_nats`` above the estimator, two layers get within ``tol_nats``; k >= 2: three layers
with relative PE get within ``tol_nats`` of the order-k estimator and below the order-(k-1) one.
Whether two layers suffice for k >= 2 is reported per positional encoding as measured (the issue's
earlier single-seed runs: relative-only no, absolute+relative yes), not asserted.

Metric layout: arm ``k{k}/L{depth}/{positions}`` holds the trainer's ``test_loss`` etc.; arm
``k{k}/L{depth}/{positions}/probe`` the probe of the final models: at the final
step ``probe_loss`` and ``est_loss_order{j}`` (j = 0..k) on ``probe.sequences`` fresh sequences,
``match_score_layer{l}`` / ``match_chance_layer{l}``; per-position curves ``pos_loss_model`` and
``pos_loss_order{j}`` with the *position* (0-based, predicting token ``pos + 1``) in the step column.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.claims import check
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.attention import attention_patterns, context_match_mask, context_matching_score, plot_attention_maps
from tdlab.report.figures import curve_with_band, member_curves, plt, save_figure
from tdlab.runs import Run
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.train.cpu import cpu_threads
from tdlab.theory.kgram import cross_entropy, kgram_probs
from tdlab.train.trainer import TrainConfig, Trainer, next_token_loss

__all__ = ["ICLModelConfig", "ICLTrainConfig", "ICLProbeConfig", "ICLClaimConfig", "MarkovICLDepthConfig", "MarkovICLDepth", "cell_arm", "probe_arm", "verdict"]

PE = Literal["absolute", "relative", "both"]
Cell = tuple[int, int, PE]
PROBE_DATA = "probe-data"  # the random stream of a member's probe sequences


def cell_arm(k: int, depth: int, positions: str) -> str:
    """Training arm of a cell: ``k2/L3/relative``."""
    return f"k{k}/L{depth}/{positions}"


def probe_arm(arm: str) -> str:
    """Arm holding the probe measurements of a cell's trained models: ``k2/L3/relative/probe``."""
    return f"{arm}/probe"


def verdict(gaps: list[float], tol: float, margin: float) -> str:
    """Table verdict of a cell from its members' gaps: ``reaches`` (all within ``tol``), ``above``
    (all at least ``margin`` above), ``mixed`` otherwise."""
    if all(g <= tol for g in gaps):
        return "reaches"
    if all(g >= margin for g in gaps):
        return "above"
    return "mixed"


class ICLProbeConfig(Config):
    """Measurements on the trained models (our choices; the talk shows attention maps, no sizes)."""

    sequences: int = Field(256, ge=8, le=100_000)  # fresh sequences per member for gaps and curves
    batch: int = Field(64, ge=1, le=100_000)  # probe forward batch (memory)
    attention_sequences: int = Field(64, ge=1, le=100_000)  # of those, used for the matching score
    map_len: int = Field(40, ge=4, le=512)  # tokens of the sample sequence drawn in the attention maps


class ICLClaimConfig(Config):
    # Issue's earlier runs: reaching models at +0.013 (k=1, 2 layers) and +0.007/+0.003 (k=2);
    # non-reaching at +0.05 (k=1, 1 layer) and +0.066 (k=2, 2 layers relative-only).
    tol_nats: float = Field(0.02, gt=0.0, le=1.0)  # "within tolerance" of the estimator
    clear_margin_nats: float = Field(0.02, gt=0.0, le=1.0)  # "clearly above": gap >= this
    min_fraction: float = Field(1.0, gt=0.0, le=1.0)  # fraction of members that must satisfy a claim


# Nested defaults live on subclasses: a profile or --set that touches ``model`` or ``train`` is merged
# into the class defaults (tdlab.config.build_config), so instance defaults would be lost.
class ICLModelConfig(GPTConfig):
    """Issue's setting: pre-LN GPT-2 (seed 000 Table 1), 1 head per layer, d = 32 ("d = 16 similar")."""

    arch: Literal["sec2", "gpt2"] = "gpt2"
    d: int = Field(32, ge=1, le=4096)


class ICLTrainConfig(TrainConfig):
    """Issue's setting: T = 128, batch 64, AdamW lr 3e-3; the rest seed 000 Table 2 (betas, cosine,
    weight decay 1e-3). 6000 steps: the issue's 2-layer k = 1 model needed ~3700."""

    steps: int = Field(6000, ge=1, le=10_000_000)
    batch: int = Field(64, ge=1, le=1_000_000)
    seq_len: int = Field(128, ge=2, le=65536)
    lr: float = Field(3e-3, gt=0.0, le=100.0)
    eval_every: int = Field(250, ge=1)
    eval_batches: int = Field(4, ge=1, le=100_000)


class MarkovICLDepthConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # issue: ensemble several seeds per cell
    ks: list[int] = [1, 2]  # issue: k = 1, 2 (paper profile adds k = 3)
    depths: list[int] = [1, 2, 3]  # talk: "2-layer transformer" / "3-layer transformer"; 1 layer as control
    positions: list[PE] = ["absolute", "relative", "both"]  # talk's theorem: relative PE
    # Explicit subset of the (k, depth, positions) grid; empty = the full product.
    cells: list[Cell] = []
    alpha: float = Field(1.0, gt=0.0)  # issue: Dirichlet(1) rows; Laplace (add-one) estimator is Bayes
    model: ICLModelConfig = ICLModelConfig()  # layers and positions are set per cell
    train: ICLTrainConfig = ICLTrainConfig()
    probe: ICLProbeConfig = ICLProbeConfig()
    claims: ICLClaimConfig = ICLClaimConfig()
    cpu_threads: int | None = Field(1, ge=1, le=1024)  # torch threads on CPU (tdlab.train.cpu.cpu_threads); None: default

    @field_validator("ks", "depths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(x < 1 for x in v) or len(set(v)) != len(v):
            raise ValueError("must list distinct values >= 1")
        return v

    @model_validator(mode="after")
    def _check(self) -> MarkovICLDepthConfig:
        if self.model.arch != "gpt2":
            raise ValueError("model.arch must be 'gpt2' (pre-LN, one head per layer)")
        if not self.positions or len(set(self.positions)) != len(self.positions):
            raise ValueError("positions must list distinct values")
        if len(set(self.cells)) != len(self.cells):
            raise ValueError("cells must not repeat")
        if any(k < 1 or d < 1 for k, d, _ in self.cells):
            raise ValueError("cells need k >= 1 and depth >= 1")
        if self.probe.map_len > self.train.seq_len:
            raise ValueError("probe.map_len must not exceed train.seq_len")
        return self

    def grid(self) -> list[Cell]:
        if self.cells:
            return list(self.cells)
        return [(k, d, pe) for k in self.ks for d in self.depths for pe in self.positions]

    def arm_model(self, depth: int, positions: str) -> GPTConfig:
        return self.model.updated({"layers": depth, "positions": positions, "max_len": self.train.seq_len})


@register
class MarkovICLDepth(Experiment):
    name = "markov-icl-depth"
    paper = "003 Attention with Markov (talk), Part II"
    figure = "Memory = k, Depth?: 1/2/3-layer transformers vs the in-context k-gram estimator"
    description = (
        "In-context k-th order binary Markov chains (one Dirichlet(1) kernel per sequence): pre-LN "
        "transformers of depth 1-3 (one head per layer) with absolute, relative or both positional "
        "encodings, against the Bayes-optimal Laplace k-gram estimator on the same sequences. Claims: "
        "k=1 needs 2 layers (induction head); for k=2 three layers with relative PE reach the order-2 "
        "estimator (constant depth suffices). Attention maps and a context-matching score."
    )
    Config = MarkovICLDepthConfig
    arm_fields = {"model.layers": "depths=[...] or cells=[...]", "model.positions": "positions=[...] or cells=[...]", "model.max_len": "train.seq_len"}
    profiles = {
        # ~5 min on 2 CPU cores. The cells the claims need: k=1 at depth 1 and 2 (absolute PE, the
        # plain induction-head setting), k=2 at depth 3 with relative PE (the talk's theorem) and at
        # depth 2 with relative PE (the contrasting cell of the earlier runs). Scaled down
        # from the setting: d = 16 (issue: "similar" to 32), T = 64, batch 32, 2000 steps.
        "quick": {
            "members": 3,
            "cells": [(1, 1, "absolute"), (1, 2, "absolute"), (2, 2, "relative"), (2, 3, "relative")],
            "model": {"d": 16},
            "train": {"steps": 2000, "batch": 32, "seq_len": 64, "eval_every": 200, "eval_batches": 4},
            "probe": {"sequences": 256, "map_len": 40},
        },
        # The full grid: k in {1, 2, 3} x depth {1, 2, 3} x {absolute, relative, both}, d = 32,
        # T = 128, batch 64, 6000 steps (the 2-layer k=1 model needed ~3700), 5 members.
        "paper": {"members": 5, "ks": [1, 2, 3], "probe": {"sequences": 512}},
    }

    # ------------------------------------------------------------------------------------------
    def run(self, cfg: MarkovICLDepthConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            for k, depth, pe in cfg.grid():
                arm = cell_arm(k, depth, pe)
                task = InContextMarkov(k, 2, cfg.alpha)
                mcfg = cfg.arm_model(depth, pe)
                trainer = Trainer(cfg.train, ctx.device, ctx.progress, label=arm)
                result = ctx.fit(arm, trainer, lambda s, m=mcfg: GPT(m, s), seeds, task)
                if ctx.writer.arm_rows(probe_arm(arm)):
                    continue  # probed by an interrupted attempt of this (resumed) run
                model = GPT(mcfg, seeds)
                model.load_state_dict({n: torch.stack([s[n] for s in result.states]) for n in result.states[0]})
                ctx.store_rows(probe_arm(arm), self.probe(model.to(ctx.device), task, cfg, seeds, ctx.device))

    @staticmethod
    def probe_tokens(task: InContextMarkov, cfg: MarkovICLDepthConfig, seeds: list[int], device: str = "cpu") -> torch.Tensor:
        """``(E, S, T + 1)`` probe sequences: fresh, from each member's own ``probe-data`` stream
        (the same for every cell of one k)."""
        return task.sample(generators(seeds, PROBE_DATA, device), cfg.probe.sequences, cfg.train.seq_len + 1, device)

    @classmethod
    @torch.no_grad()
    def probe(cls, model: GPT, task: InContextMarkov, cfg: MarkovICLDepthConfig, seeds: list[int],
              device: str = "cpu") -> list[tuple[int, int, str, float]]:
        """Per-position model and estimator losses on the probe set, and the matching scores."""
        model.eval()
        k, T, step = task.k, cfg.train.seq_len, cfg.train.steps
        x = cls.probe_tokens(task, cfg, seeds, device)
        E = x.shape[0]
        pos_model = torch.zeros(E, T, dtype=torch.float64, device=device)
        for i in range(0, x.shape[1], cfg.probe.batch):
            xb = x[:, i : i + cfg.probe.batch]
            pos_model += next_token_loss(model(xb[..., :-1]), xb[..., 1:], reduce_positions=False).double() * xb.shape[1]
        pos_model /= x.shape[1]
        rows: list[tuple[int, int, str, float]] = []
        for e in range(E):
            rows.extend((t, e, "pos_loss_model", float(pos_model[e, t])) for t in range(T))
            rows.append((step, e, "probe_loss", float(pos_model[e].mean())))
        for j in range(k + 1):
            est = cross_entropy(kgram_probs(x, j, task.vocab, beta=cfg.alpha), x).mean(1)  # (E, T)
            for e in range(E):
                rows.extend((t, e, f"pos_loss_order{j}", float(est[e, t])) for t in range(T))
                rows.append((step, e, f"est_loss_order{j}", float(est[e].mean())))
        xa = x[:, : cfg.probe.attention_sequences, :T]
        for layer, pat in enumerate(attention_patterns(model, xa)):
            score, chance = context_matching_score(pat, xa[:, :, None, :], k, task.vocab, keep_dims=1)
            for e in range(E):
                rows.append((step, e, f"match_score_layer{layer}", float(score[e])))
                rows.append((step, e, f"match_chance_layer{layer}", float(chance[e])))
        return rows

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _final(metrics: pd.DataFrame, arm: str, name: str) -> list[float]:
        df = metrics[(metrics["arm"] == arm) & (metrics["name"] == name)].sort_values("member")
        return df["value"].tolist()

    def analyse(self, cfg: MarkovICLDepthConfig, run: Run) -> Analysis:
        metrics = run.metrics()
        cl = cfg.claims
        out = Analysis()
        cells: dict[str, dict] = {}
        for k, depth, pe in cfg.grid():
            arm = cell_arm(k, depth, pe)
            pa = probe_arm(arm)
            model = np.array(self._final(metrics, pa, "probe_loss"))
            est = {j: np.array(self._final(metrics, pa, f"est_loss_order{j}")) for j in range(k + 1)}
            gap = model - est[k]
            last = depth - 1
            score = self._final(metrics, pa, f"match_score_layer{last}")
            chance = self._final(metrics, pa, f"match_chance_layer{last}")
            cells[arm] = {
                "k": k, "depth": depth, "positions": pe,
                "probe_loss": model.tolist(),
                "estimator_loss": {f"order{j}": v.tolist() for j, v in est.items()},
                "gap": gap.tolist(),
                "gap_mean": float(gap.mean()),
                "gap_vs_lower_order": {f"order{j}": (model - v).tolist() for j, v in est.items() if j < k},
                "verdict": verdict(gap.tolist(), cl.tol_nats, cl.clear_margin_nats),
                "match_score_last_layer": score,
                "match_chance_last_layer": chance,
                "match_ratio_last_layer": [s / c for s, c in zip(score, chance)],
                "match_score_by_layer": [self._final(metrics, pa, f"match_score_layer{i}") for i in range(depth)],
            }
        out.measurements["cells"] = cells
        self._claims(cfg, cells, out)
        table = self.gap_table(cfg, cells)
        out.measurements["gap_table"] = table
        out.notes.append(f"Gap = model loss − order-k Laplace (Bayes) estimator loss on the same fresh sequences, nats, mean ± std "
                         f"over members; reaches: all members within {cl.tol_nats}, above: all at least {cl.clear_margin_nats} above, "
                         "else mixed. Match: last layer's attention mass on context-matching keys vs chance.")
        for arm, c in cells.items():
            g = np.array(c["gap"])
            n_in = int(np.sum(g <= cl.tol_nats))
            lower = "".join(f"; vs order-{j} {np.mean(v):+.4f}" for j, v in
                            ((int(o[5:]), c["gap_vs_lower_order"][o]) for o in c["gap_vs_lower_order"]) if j == c["k"] - 1)
            out.notes.append(f"{arm}: gap {g.mean():+.4f} ± {g.std():.4f} ({c['verdict']}, {n_in}/{len(g)} within {cl.tol_nats}{lower}); "
                             f"match {np.mean(c['match_score_last_layer']):.3f} vs chance {np.mean(c['match_chance_last_layer']):.3f}.")
        for arm, c in cells.items():
            if c["k"] >= 2 and c["depth"] == 2:
                lower = np.array(c["gap_vs_lower_order"][f"order{c['k'] - 1}"])
                out.notes.append(
                    f"2 layers, k={c['k']}, {c['positions']} PE (measured, not asserted): gap {np.mean(c['gap']):+.4f} nats, "
                    f"{'within' if c['verdict'] == 'reaches' else 'not within'} {cl.tol_nats} of the order-{c['k']} estimator "
                    f"({c['verdict']}); {np.mean(lower):+.4f} vs the order-{c['k'] - 1} estimator.")
        return out

    @staticmethod
    def _claims(cfg: MarkovICLDepthConfig, cells: dict[str, dict], out: Analysis) -> None:
        cl = cfg.claims
        for arm, c in cells.items():
            k, depth, pe = c["k"], c["depth"], c["positions"]
            if k == 1 and depth == 1:
                out.claims.append(check(f"{arm}/stays-above-estimator",
                                        f"k=1, 1 layer, {pe} PE: stays clearly above the in-context estimator, gap >= {cl.clear_margin_nats} "
                                        "nats (talk: depth matters; one layer cannot form an induction head)",
                                        c["gap"], cl.clear_margin_nats, 0.0, "ge", cl.min_fraction, " nats"))
            elif k == 1 and depth == 2:
                out.claims.append(check(f"{arm}/reaches-estimator",
                                        f"k=1, 2 layers, {pe} PE: within {cl.tol_nats} nats of the Laplace order-1 estimator (induction head)",
                                        c["gap"], 0.0, cl.tol_nats, "le", cl.min_fraction, " nats"))
            elif k >= 2 and depth == 3 and pe == "relative":
                out.claims.append(check(f"{arm}/reaches-order-{k}-estimator",
                                        f"k={k}, 3 layers, relative PE: within {cl.tol_nats} nats of the Laplace order-{k} estimator "
                                        "(talk: 'Constant depth suffices', 3 layers, 1 head, relative PE, layer norm)",
                                        c["gap"], 0.0, cl.tol_nats, "le", cl.min_fraction, " nats"))
                out.claims.append(check(f"{arm}/below-order-{k - 1}-estimator",
                                        f"k={k}, 3 layers, relative PE: loss below the order-{k - 1} in-context estimator's (uses the full k-context)",
                                        c["gap_vs_lower_order"][f"order{k - 1}"], 0.0, 0.0, "le", cl.min_fraction, " nats"))

    @staticmethod
    def gap_table(cfg: MarkovICLDepthConfig, cells: dict[str, dict]) -> str:
        """Markdown table: rows (k, depth), columns positional encodings."""
        pes = [pe for pe in ("absolute", "relative", "both") if any(c["positions"] == pe for c in cells.values())]
        rows = sorted({(c["k"], c["depth"]) for c in cells.values()})
        lines = ["| k | depth | " + " | ".join(pes) + " |", "|---|---|" + "---|" * len(pes)]
        for k, depth in rows:
            entries = []
            for pe in pes:
                c = cells.get(cell_arm(k, depth, pe))
                if c is None:
                    entries.append("—")
                    continue
                g = np.array(c["gap"])
                extra = ""
                if k >= 2:
                    lo = np.mean(c["gap_vs_lower_order"][f"order{k - 1}"])
                    extra = f"; vs order-{k - 1} {lo:+.3f}"
                entries.append(f"{g.mean():+.4f} ± {g.std():.4f} ({c['verdict']}{extra})")
            lines.append(f"| {k} | {depth} | " + " | ".join(entries) + " |")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------
    def plot(self, cfg: MarkovICLDepthConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        metrics = run.metrics()
        cells = analysis.measurements["cells"]
        paths = [self._plot_positions(cfg, metrics, cells, figdir), self._plot_training(cfg, metrics, cells, figdir),
                 self._plot_gaps(cfg, cells, figdir)]
        paths += self._plot_attention(cfg, run, cells, figdir)
        return paths

    @staticmethod
    def _smooth(y: np.ndarray, w: int = 5) -> np.ndarray:
        if len(y) < w:
            return y
        kernel = np.ones(w) / w
        pad = np.pad(y, (w // 2, w - 1 - w // 2), mode="edge")
        return np.convolve(pad, kernel, mode="valid")

    def _plot_positions(self, cfg: MarkovICLDepthConfig, metrics: pd.DataFrame, cells: dict, figdir: Path) -> Path:
        ks = sorted({c["k"] for c in cells.values()})
        pes = [pe for pe in ("absolute", "relative", "both") if any(c["positions"] == pe for c in cells.values())]
        fig, axes = plt.subplots(len(ks), len(pes), figsize=(5 * len(pes), 3.6 * len(ks)), squeeze=False)
        for r, k in enumerate(ks):
            for col, pe in enumerate(pes):
                ax = axes[r, col]
                group = [a for a, c in cells.items() if c["k"] == k and c["positions"] == pe]
                if not group:
                    ax.axis("off")
                    continue
                for arm in group:
                    pos, vals = member_curves(metrics, probe_arm(arm), "pos_loss_model")
                    ax.plot(pos + 1, self._smooth(vals.mean(0)), lw=1.6, label=f"{cells[arm]['depth']} layer(s)")
                pos, _ = member_curves(metrics, probe_arm(group[0]), "pos_loss_model")
                for j, ls in zip(range(k + 1), ["--", "-.", ":", (0, (5, 1))]):
                    _, est = member_curves(metrics, probe_arm(group[0]), f"pos_loss_order{j}")
                    ax.plot(pos + 1, self._smooth(est.mean(0)), color="k", ls=ls, lw=1.1,
                            label=f"order-{j} Laplace estimator" + (" (Bayes)" if j == k else ""))
                ax.set_title(f"k = {k}, {pe} PE", fontsize=9)
                ax.set_xlabel("position t (predicting x_{t+1})")
                ax.set_ylabel("loss (nats)")
                ax.legend(fontsize=7)
        fig.suptitle(f"Per-position loss on fresh sequences (mean over {cfg.members} members, 5-position moving average)")
        return save_figure(fig, figdir / "per_position_loss.png")

    @staticmethod
    def _plot_training(cfg: MarkovICLDepthConfig, metrics: pd.DataFrame, cells: dict, figdir: Path) -> Path:
        ks = sorted({c["k"] for c in cells.values()})
        fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 4), squeeze=False)
        for ax, k in zip(axes[0], ks):
            group = [a for a, c in cells.items() if c["k"] == k]
            for arm in group:
                steps, vals = member_curves(metrics, arm, "test_loss")
                curve_with_band(ax, steps, vals, f"{cells[arm]['depth']} layer(s), {cells[arm]['positions']}")
            for j in range(k + 1):
                est = np.mean(cells[group[0]]["estimator_loss"][f"order{j}"])
                ax.axhline(est, color="k", ls=["--", "-.", ":", (0, (5, 1))][j % 4], lw=1,
                           label=f"order-{j} estimator {est:.3f}")
            ax.set_xlabel("iteration")
            ax.set_ylabel("test loss (nats)")
            ax.set_title(f"k = {k}")
            ax.legend(fontsize=7)
        fig.suptitle("Training: test loss (band: min–max over members) vs the in-context estimators")
        return save_figure(fig, figdir / "training_curves.png")

    @staticmethod
    def _plot_gaps(cfg: MarkovICLDepthConfig, cells: dict, figdir: Path) -> Path:
        pes = [pe for pe in ("absolute", "relative", "both") if any(c["positions"] == pe for c in cells.values())]
        rows = sorted({(c["k"], c["depth"]) for c in cells.values()})
        grid = np.full((len(rows), len(pes)), np.nan)
        for (i, (k, d)) in enumerate(rows):
            for j, pe in enumerate(pes):
                c = cells.get(cell_arm(k, d, pe))
                if c is not None:
                    grid[i, j] = c["gap_mean"]
        fig, ax = plt.subplots(figsize=(1.8 * len(pes) + 2, 0.6 * len(rows) + 1.6))
        im = ax.imshow(grid, cmap="Reds", vmin=0, vmax=max(0.08, float(np.nanmax(grid)) if np.isfinite(grid).any() else 0.08))
        for i, (k, d) in enumerate(rows):
            for j, pe in enumerate(pes):
                c = cells.get(cell_arm(k, d, pe))
                txt = "—" if c is None else f"{c['gap_mean']:+.3f}\n{c['verdict']}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(pes)), pes)
        ax.set_yticks(range(len(rows)), [f"k={k}, {d} layer(s)" for k, d in rows])
        fig.colorbar(im, ax=ax, label="gap to order-k Laplace (nats)")
        ax.set_title(f"Final gap (tol {cfg.claims.tol_nats}, margin {cfg.claims.clear_margin_nats})", fontsize=9)
        return save_figure(fig, figdir / "gap_table.png")

    def _plot_attention(self, cfg: MarkovICLDepthConfig, run: Run, cells: dict, figdir: Path) -> list[Path]:
        """Attention maps of every layer, member 0, one probe sequence: for each k the deepest
        cell (relative PE preferred: the talk's construction)."""
        paths = []
        seeds = member_seeds(cfg.seed, cfg.members)
        for k in sorted({c["k"] for c in cells.values()}):
            group = [c for c in cells.values() if c["k"] == k]
            best = max(group, key=lambda c: (c["depth"], c["positions"] == "relative"))
            arm = cell_arm(k, best["depth"], best["positions"])
            mcfg = cfg.arm_model(best["depth"], best["positions"])
            states = run.arrays(arm)
            model = GPT(mcfg, seeds)
            model.load_state_dict(states)
            x = self.probe_tokens(InContextMarkov(k, 2, cfg.alpha), cfg, seeds)[:, :1, : cfg.probe.map_len]
            pats = attention_patterns(model, x)
            maps = [p[0, 0, 0] for p in pats]
            match = context_match_mask(x[0, 0], k)
            score = np.mean(best["match_score_last_layer"])
            chance = np.mean(best["match_chance_last_layer"])
            fig = plot_attention_maps(maps, x[0, 0].tolist(), [f"layer {i}" for i in range(len(maps))], match,
                                      f"{arm}, member 0: red dots = keys whose preceding {k} token(s) match the query's "
                                      f"(last-layer mass {score:.2f} vs chance {chance:.2f}, probe mean)")
            paths.append(save_figure(fig, figdir / f"attention_k{k}.png"))
        return paths
