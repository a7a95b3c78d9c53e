"""``markov-icl-depth-linear`` and ``markov-icl-heads``: seed 003 ("Attention with Markov", talk), Part II.

Every sequence has its own random k-th order binary kernel (:class:`~tdlab.tasks.markov_kth.InContextMarkov`,
Dirichlet(α) rows), so prediction must be in context; the reference of every claim is the order-k
add-α in-context estimator (:func:`tdlab.theory.kgram.kgram_probs`, α = 1: Laplace, the Bayes
predictor) on the same fresh sequences, as in :mod:`tdlab.experiments.markov_icl_depth`.

``markov-icl-depth-linear`` — the talk: "Without non-linearities, you need logarithmic depth" (beside
"Constant depth suffices: 3 layers, 1 head per layer, relative PE and layer norm"). Two families of
GPTs, one head per layer, relative key/value positions (``relative-kv``, the seed-faithful choice of
``markov-icl-depth``):

* ``attn``: attention-only (``mlp=False, norm="none"``: no MLP, no LayerNorm anywhere), depth 1..5;
* ``mlp``: pre-LN GPT-2 blocks (MLP + LayerNorm), depth 1..3.

Per member and k the *smallest depth* whose gap to the estimator is ≤ ``claims.tol_nats`` (a member
that reaches it at no depth of the grid is censored at max depth + 1). Claims: attention-only models
reach the estimator within the grid; their smallest depth grows with k — compared, paired over
members, between k and 2k (what log k growth predicts: ⌈log2 2k⌉ = ⌈log2 k⌉ + 1); with MLP + LN the
smallest depth is at most 3 for every k (the theorem's constant).

``markov-icl-heads`` — the talk: "(Edelman et al., 2024 & Nichani et al., 2024): Number of
heads/layers should scale with k. But..." the main result: "3 layers, 1 head per layer" suffice for
any k. The talk states nothing of its own about heads at depth 2 (the scaling-with-k statement is
prior work it cites and then contrasts): grid heads {1, 2, 4} × depth {2, 3} × k, pre-LN GPT with MLP.
Claims, as the talk states them: at depth 3 one head per layer reaches the order-k estimator for
every k; and more heads are not needed there (the gap with 1 head exceeds the gap with the most heads
by at most the tolerance). Depth-2 cells are measurements reported beside them.

Each cell's members train as one ensemble (members differ by seed only; member i of every cell shares
its training and probe sequences). Arms ``{family}/k{k}/L{depth}/H{heads}``; probe arm ``.../probe``
holds ``probe_loss``, ``est_loss`` (order-k estimator), ``match_score_last``, ``match_chance_last``.
Rows whose cells were not run are ``not evaluable`` and say so.
"""

from __future__ import annotations

from abc import abstractmethod

import math
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.claims import end_drift
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, RunContext, register
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.attention import attention_patterns, context_matching_score
from tdlab.report.figures import member_curves, plt, save_figure
from tdlab.runs import Run
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.theory.kgram import cross_entropy, kgram_probs
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer, next_token_loss

__all__ = ["LinearModelConfig", "LinearTrainConfig", "LinearProbeConfig", "LinearClaimConfig", "MarkovICLDepthLinearConfig",
           "MarkovICLDepthLinear", "MarkovICLHeadsConfig", "MarkovICLHeads", "cell_arm", "min_depths", "Family"]

Family = Literal["attn", "mlp"]
Cell = tuple[str, int, int, int]  # (family, k, depth, heads)
PROBE_DATA = "probe-data"


def cell_arm(family: str, k: int, depth: int, heads: int = 1) -> str:
    """Training arm of a cell: ``attn/k2/L3/H1``."""
    return f"{family}/k{k}/L{depth}/H{heads}"


def min_depths(gaps: dict[int, list[float]], tol: float) -> list[int]:
    """Per member, the smallest depth whose gap is ≤ ``tol``; ``max(depths) + 1`` where none is.

    Args:
        gaps: ``{depth: per-member gaps}`` (equal lengths).
    Returns:
        one integer per member.
    """
    depths = sorted(gaps)
    n = len(gaps[depths[0]])
    out = []
    for e in range(n):
        reach = [d for d in depths if gaps[d][e] <= tol]
        out.append(reach[0] if reach else depths[-1] + 1)
    return out


class LinearModelConfig(GPTConfig):
    """GPT-2 layout, d = 16 (ours; the existing depth grid's quick width), relative key/value positions."""

    arch: Literal["sec2", "gpt2"] = "gpt2"
    d: int = Field(16, ge=4, le=4096)
    positions: Literal["absolute", "relative", "both", "none"] = "relative"
    rel_encoding: Literal["bias", "kv"] = "kv"


class LinearTrainConfig(TrainConfig):
    """Ours (the talk gives no schedule): AdamW lr 1e-2 cosine, T = 64, batch 32."""

    steps: int = Field(3000, ge=1, le=10_000_000)
    batch: int = Field(32, ge=1, le=1_000_000)
    seq_len: int = Field(64, ge=4, le=65536)
    lr: float = Field(1e-2, gt=0.0, le=100.0)
    eval_every: int = Field(100, ge=1)
    eval_batches: int = Field(4, ge=1, le=100_000)


class LinearProbeConfig(Config):
    sequences: int = Field(256, ge=8, le=100_000)  # fresh sequences per member (ours)
    batch: int = Field(64, ge=1, le=100_000)
    attention_sequences: int = Field(32, ge=1, le=100_000)


class LinearClaimConfig(Config):
    # "Reaches the estimator": gap ≤ 0.02 nats per token, markov-icl-depth's scientific tolerance.
    tol_nats: float = Field(0.02, gt=0.0, le=1.0)
    # The theorem's constant depth with non-linearities (talk: "3 layers").
    constant_depth: int = Field(3, ge=1, le=64)


class _GridConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)
    ks: list[int] = [1, 2]
    alpha: float = Field(1.0, gt=0.0, le=100.0)
    model: LinearModelConfig = LinearModelConfig()
    train: LinearTrainConfig = LinearTrainConfig()
    probe: LinearProbeConfig = LinearProbeConfig()
    claims: LinearClaimConfig = LinearClaimConfig()
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @field_validator("ks")
    @classmethod
    def _ks(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v) or any(k < 1 or k > 8 for k in v):
            raise ValueError("must list distinct orders in 1..8")
        return sorted(v)

    @abstractmethod
    def grid(self) -> list[Cell]:
        """Every cell the experiment trains (each subclass defines its grid)."""

    def cell_model(self, family: str, depth: int, heads: int) -> GPTConfig:
        mlp = family == "mlp"
        return self.model.updated({"layers": depth, "heads": heads, "mlp": mlp, "norm": "pre" if mlp else "none",
                                   "max_len": self.train.seq_len})


def _depth_list(v: list[int]) -> list[int]:
    if len(set(v)) != len(v) or any(d < 1 or d > 64 for d in v):
        raise ValueError("must list distinct depths in 1..64")
    return sorted(v)


class MarkovICLDepthLinearConfig(_GridConfig):
    depths: list[int] = [1, 2, 3, 4, 5]  # attention-only depths (issue: 1..5)
    mlp_depths: list[int] = [1, 2, 3]  # MLP + LN depths (talk: 3 layers suffice)

    _d = field_validator("depths", "mlp_depths")(classmethod(lambda cls, v: _depth_list(v)))

    @model_validator(mode="after")
    def _check(self) -> MarkovICLDepthLinearConfig:
        if not self.depths:
            raise ValueError("depths must list at least one attention-only depth")
        return self

    def grid(self) -> list[Cell]:
        return ([("attn", k, d, 1) for k in self.ks for d in self.depths]
                + [("mlp", k, d, 1) for k in self.ks for d in self.mlp_depths])


class MarkovICLHeadsConfig(_GridConfig):
    heads: list[int] = [1, 2, 4]  # issue: heads {1, 2, 4}
    depths: list[int] = [2, 3]  # issue: depth 2 and 3
    ks: list[int] = [1, 2, 3]

    _d = field_validator("depths")(classmethod(lambda cls, v: _depth_list(v)))

    @field_validator("heads")
    @classmethod
    def _heads(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v) or any(h < 1 or h > 64 for h in v):
            raise ValueError("must list distinct head counts in 1..64")
        return sorted(v)

    @model_validator(mode="after")
    def _check(self) -> MarkovICLHeadsConfig:
        bad = [h for h in self.heads if self.model.d % h]
        if bad:
            raise ValueError(f"heads: model.d={self.model.d} must be divisible by every head count, not by {bad}")
        return self

    def grid(self) -> list[Cell]:
        return [("mlp", k, d, h) for k in self.ks for d in self.depths for h in self.heads]


class _ICLGrid(Experiment):
    """Train every cell of ``cfg.grid()`` as one ensemble, probe it against the order-k estimator."""

    arm_fields = {"model.layers": "depths=[...]", "model.heads": "heads=[...]", "model.mlp": "(set per family)",
                  "model.norm": "(set per family)", "model.max_len": "train.seq_len"}

    def run(self, cfg: _GridConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            for family, k, depth, heads in cfg.grid():
                arm = cell_arm(family, k, depth, heads)
                task = InContextMarkov(k, 2, cfg.alpha)
                mcfg = cfg.cell_model(family, depth, heads)
                trainer = Trainer(cfg.train, ctx.device, ctx.progress, label=arm)
                result = ctx.fit(arm, trainer, lambda s, m=mcfg: GPT(m, s), seeds, task)
                if ctx.writer.arm_rows(f"{arm}/probe"):
                    continue
                model = GPT(mcfg, seeds)
                model.load_state_dict({n: torch.stack([s[n] for s in result.states]) for n in result.states[0]})
                ctx.store_rows(f"{arm}/probe", self.probe(model.to(ctx.device), task, cfg, seeds, ctx.device))

    @staticmethod
    @torch.no_grad()
    def probe(model: GPT, task: InContextMarkov, cfg: _GridConfig, seeds: list[int],
              device: str = "cpu") -> list[tuple[int, int, str, float]]:
        """Model and order-k estimator losses on fresh sequences (each member's own ``probe-data``
        stream, the same in every cell of one k), and the last layer's context-matching score."""
        model.eval()
        k, T, step = task.k, cfg.train.seq_len, cfg.train.steps
        x = task.sample(generators(seeds, PROBE_DATA, device), cfg.probe.sequences, T + 1, device)
        E = x.shape[0]
        loss = torch.zeros(E, dtype=torch.float64, device=device)
        for i in range(0, x.shape[1], cfg.probe.batch):
            xb = x[:, i : i + cfg.probe.batch]
            loss += next_token_loss(model(xb[..., :-1]), xb[..., 1:]).double() * xb.shape[1]
        loss /= x.shape[1]
        est = cross_entropy(kgram_probs(x, k, 2, cfg.alpha), x).mean((-1, -2))
        xa = x[:, : cfg.probe.attention_sequences, :-1]
        pat = attention_patterns(model, xa)[-1]
        score, chance = context_matching_score(pat, xa[:, :, None], k, keep_dims=1)
        rows = []
        for e in range(E):
            rows += [(step, e, "probe_loss", float(loss[e])), (step, e, "est_loss", float(est[e])),
                     (step, e, "match_score_last", float(score[e])), (step, e, "match_chance_last", float(chance[e]))]
        return rows

    def trivial_error(self, cfg: _GridConfig, arm: str) -> float:
        return math.log(2)

    @staticmethod
    def _final(metrics: pd.DataFrame, arm: str, name: str) -> list[float]:
        df = metrics[(metrics["arm"] == arm) & (metrics["name"] == name)].sort_values("member")
        return df["value"].tolist()

    def cells(self, cfg: _GridConfig, run: Run) -> dict[str, dict]:
        """Per cell: per-member gap to the order-k estimator, drift of the evaluation gap, match score."""
        metrics = run.metrics()
        out = {}
        for family, k, depth, heads in cfg.grid():
            arm = cell_arm(family, k, depth, heads)
            loss = np.array(self._final(metrics, f"{arm}/probe", "probe_loss"))
            est = np.array(self._final(metrics, f"{arm}/probe", "est_loss"))
            if loss.size == 0 or loss.shape != est.shape:
                continue
            steps, test = member_curves(metrics, arm, "test_loss")
            _, bayes = member_curves(metrics, arm, "test_loss@bayes")
            drift = end_drift(steps, test - bayes) if test.size and bayes.shape == test.shape else None
            out[arm] = {"family": family, "k": k, "depth": depth, "heads": heads, "gap": (loss - est).tolist(),
                        "gap_mean": float((loss - est).mean()), "eval_gap_drift": drift,
                        "match_score_last": self._final(metrics, f"{arm}/probe", "match_score_last"),
                        "match_chance_last": self._final(metrics, f"{arm}/probe", "match_chance_last")}
        return out

    @staticmethod
    def _not_in_run(group, need: str) -> None:
        row = group.value("not-in-grid", [], 0.0, 0.0, "le", statement=f"needs {need}")
        row.reason = f"no {need} in this run's grid (the quick profile runs a smaller grid; use the paper profile or --set)"

    @staticmethod
    def _notes(cells: dict[str, dict], out: Analysis) -> None:
        for arm, c in cells.items():
            g = np.array(c["gap"])
            drift = c["eval_gap_drift"]
            out.notes.append(f"{arm}: gap {g.mean():+.4f} ± {g.std():.4f} (members {', '.join(f'{x:+.4f}' for x in g)})"
                             + (f"; drift {drift:+.4f}" if drift is not None else "")
                             + f"; last-layer match {np.mean(c['match_score_last']):.3f} vs chance {np.mean(c['match_chance_last']):.3f}.")

    def _plot_gaps(self, cfg: _GridConfig, cells: dict, figdir: Path, rows_of, cols_of, title: str, name: str) -> Path:
        rows = sorted({rows_of(c) for c in cells.values()})
        cols = sorted({cols_of(c) for c in cells.values()})
        grid = np.full((len(rows), len(cols)), np.nan)
        for c in cells.values():
            grid[rows.index(rows_of(c)), cols.index(cols_of(c))] = c["gap_mean"]
        fig, ax = plt.subplots(figsize=(1.4 * len(cols) + 2.5, 0.5 * len(rows) + 1.8))
        vmax = max(0.08, float(np.nanmax(grid))) if np.isfinite(grid).any() else 0.08
        im = ax.imshow(grid, cmap="Reds", vmin=0, vmax=vmax)
        for i in range(len(rows)):
            for j in range(len(cols)):
                ax.text(j, i, "—" if np.isnan(grid[i, j]) else f"{grid[i, j]:+.3f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(cols)), [str(c) for c in cols])
        ax.set_yticks(range(len(rows)), [str(r) for r in rows])
        fig.colorbar(im, ax=ax, label="gap to order-k Laplace (nats)")
        ax.set_title(f"{title} (reach tolerance {cfg.claims.tol_nats})", fontsize=9)
        return save_figure(fig, figdir / name)

    def _plot_training(self, cfg: _GridConfig, run: Run, cells: dict, figdir: Path) -> Path:
        metrics = run.metrics()
        ks = sorted({c["k"] for c in cells.values()})
        fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 4), squeeze=False)
        for ax, k in zip(axes[0], ks):
            for arm, c in cells.items():
                if c["k"] != k:
                    continue
                steps, test = member_curves(metrics, arm, "test_loss")
                _, bayes = member_curves(metrics, arm, "test_loss@bayes")
                if test.size and bayes.shape == test.shape:
                    ax.plot(steps, (test - bayes).mean(0), label=arm)
            ax.axhline(cfg.claims.tol_nats, color="k", ls=":", lw=0.8)
            ax.set_yscale("symlog", linthresh=1e-2)
            ax.set_xlabel("iteration")
            ax.set_ylabel("test loss − Bayes (nats)")
            ax.set_title(f"k = {k}")
            ax.legend(fontsize=6)
        return save_figure(fig, figdir / "training_gaps.png")


@register
class MarkovICLDepthLinear(_ICLGrid):
    name = "markov-icl-depth-linear"
    paper = "003 Attention with Markov (talk), Part II"
    figure = "Without non-linearities, you need logarithmic depth: attention-only depth 1-5 x k vs MLP+LN"
    description = (
        "In-context k-th order binary Markov chains: attention-only GPTs (no MLP, no LayerNorm, relative k/v positions) "
        "of depth 1-5 and pre-LN GPTs with MLPs of depth 1-3, against the order-k Laplace (Bayes) estimator. Claims: "
        "the smallest attention-only depth reaching the estimator grows with k (k vs 2k, paired); with MLP + LN it "
        "stays at most 3 for every k."
    )
    Config = MarkovICLDepthLinearConfig
    profiles = {
        # ≤ 5 min on 2 CPU cores (measured in the report): k = 1, 2; attention-only and MLP depth 1..3;
        # 3 members; T = 64, batch 32, 250 steps (far from converged: rows then come out "not resolved"
        # through the drift of the gap, see the notes). Cells k = 3, 4 and depths 4, 5: paper profile.
        "quick": {"ks": [1, 2], "depths": [1, 2, 3], "mlp_depths": [1, 2, 3],
                  "train": {"steps": 250, "eval_every": 25}, "probe": {"sequences": 128}},
        "paper": {"members": 5, "ks": [1, 2, 3, 4], "depths": [1, 2, 3, 4, 5], "mlp_depths": [1, 2, 3],
                  "model": {"d": 32}, "train": {"steps": 6000, "batch": 64, "seq_len": 128, "lr": 3e-3, "eval_every": 250},
                  "probe": {"sequences": 512}},
    }

    def analyse(self, cfg: MarkovICLDepthLinearConfig, run: Run) -> Analysis:
        tol, D = cfg.claims.tol_nats, cfg.claims.constant_depth
        cells = self.cells(cfg, run)
        out = Analysis(measurements={"tol_nats": tol, "cells": cells})
        reach = out.group("attention-only-reaches-estimator",
                          "Without non-linearities the order-k estimator is still reached, with more depth (talk: 'you need "
                          f"logarithmic depth'): for each k some attention-only depth of the grid has gap ≤ {tol} nats "
                          "(smallest such depth per member; censored at max depth + 1)")
        grows = out.group("attention-only-depth-grows-with-k",
                          "Without non-linearities the depth needed grows with k (talk: logarithmic depth): the smallest "
                          "attention-only depth reaching the estimator is larger at 2k than at k (paired over members)")
        const = out.group("mlp-depth-stays-constant",
                          f"With non-linearities (MLP + LayerNorm) constant depth suffices: the smallest depth reaching the "
                          f"estimator is ≤ {D} for every k (talk: '3 layers, 1 head per layer ... and layer norm')")
        mins: dict[str, dict[int, list[int]]] = {"attn": {}, "mlp": {}}
        censored: dict[str, dict[int, bool]] = {"attn": {}, "mlp": {}}
        for family, depths in (("attn", cfg.depths), ("mlp", cfg.mlp_depths)):
            for k in cfg.ks:
                arms = [cell_arm(family, k, d) for d in depths]
                if not depths or any(a not in cells for a in arms):
                    continue
                m = min_depths({d: cells[a]["gap"] for d, a in zip(depths, arms)}, tol)
                mins[family][k] = m
                censored[family][k] = any(v > max(depths) for v in m)
                drifts = [abs(cells[a]["eval_gap_drift"]) for a in arms if cells[a]["eval_gap_drift"] is not None
                          and math.isfinite(cells[a]["eval_gap_drift"])]
                drift = max(drifts) if drifts and censored[family][k] else None  # a censored member may still get there
                if family == "attn":
                    reach.value(f"k{k}", m, float(max(depths)), 0.0, "le", arms=arms, drift=drift, drift_tolerance=tol,
                                statement=f"k={k}: smallest attention-only depth with gap ≤ {tol} is within depths {depths}")
                else:
                    const.value(f"k{k}", m, float(D), 0.0, "le", arms=arms, drift=drift, drift_tolerance=tol,
                                statement=f"k={k}: smallest MLP+LN depth with gap ≤ {tol} is ≤ {D}")
        for k in cfg.ks:
            if 2 * k in mins["attn"] and k in mins["attn"]:
                arms = [cell_arm("attn", kk, d) for kk in (k, 2 * k) for d in cfg.depths]
                row = grows.compare(f"k{2 * k}-vs-k{k}", mins["attn"][2 * k], mins["attn"][k], "gt", paired=True, arms=arms,
                                    statement=f"smallest attention-only depth at k={2 * k} > at k={k} (paired)")
                if censored["attn"][k] and row.verdict not in ("not evaluable",):
                    row.verdict = "not resolved"
                    row.reason = f"some member reaches the k={k} estimator at no depth of {cfg.depths}: no lower bound to exceed"
        if not reach.rows:
            self._not_in_run(reach, "attention-only cells (k, every depth)")
        if not grows.rows:
            self._not_in_run(grows, "attention-only cells at k and 2k (k = 1, 2 or 2, 4)")
        if not const.rows:
            self._not_in_run(const, "MLP cells (k, every MLP depth)")
        out.measurements["min_depth"] = {f: {f"k{k}": v for k, v in d.items()} for f, d in mins.items()}
        for f, d in mins.items():
            for k, v in d.items():
                out.notes.append(f"{f}, k={k}: smallest depth with gap ≤ {tol} per member: {v}"
                                 + (" (a value of max depth + 1 = not reached)" if censored[f][k] else ""))
        if mins["mlp"] and all(censored["mlp"].values()) and all(censored["attn"].values()):
            out.notes.append("No cell of either family reached the estimator, not even the MLP + LN cells (which reach it in "
                             "markov-icl-depth with 4000+ steps): this run's training budget, not the architecture, sets these "
                             "verdicts (the cosine schedule brings the drift to ~0 at the end, so the rows are decided, not "
                             "'still moving'). The paper profile trains 6000 steps.")
        missing = [k for k in (3, 4) if k not in cfg.ks]
        if missing:
            out.notes.append(f"k = {', '.join(map(str, missing))} and depths beyond {max(cfg.depths)} were not run (paper profile): "
                             "the issue's k = 1..4 × depth 1..5 grid is covered by the paper profile only.")
        self._notes(cells, out)
        return out

    def plot(self, cfg: MarkovICLDepthLinearConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        cells = analysis.measurements["cells"]
        if not cells:
            return []
        return [self._plot_gaps(cfg, cells, figdir, lambda c: f"{c['family']} L{c['depth']}", lambda c: f"k={c['k']}",
                                "Gap to the order-k estimator, mean over members", "gap_table.png"),
                self._plot_training(cfg, run, cells, figdir)]


@register
class MarkovICLHeads(_ICLGrid):
    name = "markov-icl-heads"
    paper = "003 Attention with Markov (talk), Part II"
    figure = "Memory = k, Depth?: heads {1, 2, 4} at depth 2 and 3 vs k (1 head per layer suffices at depth 3)"
    description = (
        "In-context k-th order binary Markov chains: pre-LN GPTs with MLPs, relative k/v positions, heads {1, 2, 4} x depth "
        "{2, 3} x k. Claims as the talk states them: at depth 3 one head per layer reaches the order-k Laplace estimator for "
        "every k, and more heads are not needed there (prior work: heads/layers should scale with k)."
    )
    Config = MarkovICLHeadsConfig
    profiles = {
        # ≤ 5 min on 2 CPU cores: k = 1, 2, heads {1, 4}, depth {2, 3}, 3 members, 200 steps.
        "quick": {"ks": [1, 2], "heads": [1, 4], "train": {"steps": 200, "eval_every": 25}, "probe": {"sequences": 128}},
        "paper": {"members": 5, "ks": [1, 2, 3], "heads": [1, 2, 4], "model": {"d": 32},
                  "train": {"steps": 6000, "batch": 64, "seq_len": 128, "lr": 3e-3, "eval_every": 250}, "probe": {"sequences": 512}},
    }

    def analyse(self, cfg: MarkovICLHeadsConfig, run: Run) -> Analysis:
        tol = cfg.claims.tol_nats
        cells = self.cells(cfg, run)
        out = Analysis(measurements={"tol_nats": tol, "cells": cells})
        one = out.group("one-head-per-layer-suffices-at-depth-3",
                        "Constant depth suffices: a 3-layer transformer with 1 head per layer (relative PE, layer norm) reaches "
                        f"the order-k in-context estimator for every k, mean gap ≤ {tol} nats (talk Part II, main result)")
        more = out.group("more-heads-not-needed-at-depth-3",
                         "Heads need not scale with k at depth 3 (the talk's 'But...' to 'number of heads/layers should scale "
                         f"with k'): gap(1 head) − gap(most heads) ≤ {tol} nats, paired over members")
        hmax = max(cfg.heads)
        for k in cfg.ks:
            a1 = cell_arm("mlp", k, 3, 1)
            if 3 in cfg.depths and 1 in cfg.heads and a1 in cells:
                c = cells[a1]
                one.value(f"k{k}", c["gap"], 0.0, tol, "le", arms=[a1], drift=c["eval_gap_drift"], unit=" nats",
                          statement=f"k={k}, 3 layers, 1 head: mean gap ≤ {tol} nats")
                am = cell_arm("mlp", k, 3, hmax)
                if hmax > 1 and am in cells:
                    diff = [a - b for a, b in zip(c["gap"], cells[am]["gap"])]
                    more.value(f"k{k}", diff, 0.0, tol, "le", arms=[a1, am], unit=" nats",
                               statement=f"k={k}, 3 layers: gap(1 head) − gap({hmax} heads) ≤ {tol} nats (paired)")
        if not one.rows:
            self._not_in_run(one, "cells (k, depth 3, 1 head)")
        if not more.rows:
            self._not_in_run(more, "cells (k, depth 3, 1 head) and (k, depth 3, more heads)")
        for k in cfg.ks:
            if 2 in cfg.depths:
                gaps = {h: cells[cell_arm("mlp", k, 2, h)]["gap_mean"] for h in cfg.heads if cell_arm("mlp", k, 2, h) in cells}
                out.notes.append(f"depth 2, k={k} (measured, not a claim: the talk states nothing of its own for depth 2): mean gap by "
                                 "heads " + ", ".join(f"{h}: {g:+.4f}" for h, g in gaps.items()) + " nats.")
        if cells and all(max(c["gap"]) > tol for c in cells.values()):
            out.notes.append("No member of any cell reached the estimator: this run's training budget, not the number of heads, "
                             "sets these verdicts (markov-icl-depth needs 4000+ steps for it; the paper profile trains 6000).")
        if 3 not in cfg.ks:
            out.notes.append("k = 3 was not run (paper profile).")
        self._notes(cells, out)
        return out

    def plot(self, cfg: MarkovICLHeadsConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        cells = analysis.measurements["cells"]
        if not cells:
            return []
        return [self._plot_gaps(cfg, cells, figdir, lambda c: f"k={c['k']} L{c['depth']}", lambda c: f"H={c['heads']}",
                                "Gap to the order-k estimator by heads, mean over members", "gap_heads.png"),
                self._plot_training(cfg, run, cells, figdir)]
