"""``markov-icl-depth``: seed 003 ("Attention with Markov", talk), Part II, "Memory = k, Depth?".

Every sequence has its own random k-th order binary kernel (rows iid Dirichlet(α),
:class:`~tdlab.tasks.markov_kth.InContextMarkov`), so the only way to predict well is in context:
match the current k-context against the history and count what followed ("ICL for kth-order
Markov"). The talk's "in-context estimator" is the unsmoothed count ratio; its loss is infinite
whenever a context's count is still zero, so the reference of every claim here is its smoothed form,
the add-α order-k estimator (:func:`tdlab.theory.kgram.kgram_probs`; Laplace for α = 1), which is the
*Bayes predictor* of this source (uniform first k tokens, Dirichlet(α) rows: the task's
``optimal_probs``) and tends to the count ratio as counts grow. Gaps are measured against it on the
*same* sequences: the probe's fresh sequences (``est_loss_order{k}``) and, during training, the
trainer's evaluation batches (``test_loss@bayes``, the task's ``optimal_probs`` on those batches).

The talk's statements tested here:

* "Depth = 1" vs "Depth > 1: in-context learning emerges" (for k = 1): a 1-layer transformer does not
  reach the in-context estimator (it cannot form an induction head), a 2-layer one does;
* "Constant depth suffices": any order-k in-context estimator is representable by 3 layers, 1 head
  per layer, relative positional encodings and layer norm — tested as: trained 3-layer models reach
  the order-k estimator for k >= 2.

Models: pre-LN GPT-2 (``arch="gpt2"``, one head per layer, seed 000 Table 1) of depth 1, 2, 3. The
positional encoding is an axis (``positions``): the talk states relative PE for its 3-layer
construction and nothing for k = 1, and neither the talk nor seed 000 says which relative encoding.
Values: ``absolute`` (learned p_n), ``relative`` (tdlab's learned scalar bias per distance),
``relative-kv`` (Shaw et al. 2018 relative key/value embeddings, the kind of the seed authors' RPE
code; :class:`~tdlab.models.gpt.GPTConfig` ``rel_encoding="kv"``), ``both``/``both-kv`` (absolute +
relative). Every claim is reported per value, marked when the value is not the seed's.

Each statement is one claim group with a row per cell, decided on the members' mean with its
t-interval (:mod:`tdlab.claims`); depth claims are comparisons between depth arms (paired: member i
of every cell of one k shares its training and probe sequences); end-state rows carry the drift of
the gap to the Bayes predictor over the last 10% of training and are ``not resolved`` while it still
moves by more than the tolerance. A statement whose cells are not in the run's grid gets one row that
is ``not evaluable`` (the quick profile runs k = 1 only).

Metric layout: arm ``k{k}/L{depth}/{positions}`` holds the trainer's ``test_loss``, ``test_loss@bayes``
etc.; arm ``k{k}/L{depth}/{positions}/probe`` the probe of the final models: at the final
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

from tdlab.experiments.axes import AtlasAxes, AtlasAxis
from tdlab.claims import end_drift
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

__all__ = ["ICLModelConfig", "ICLTrainConfig", "ICLProbeConfig", "ICLClaimConfig", "MarkovICLDepthConfig", "MarkovICLDepth",
           "cell_arm", "probe_arm", "pe_model", "PES"]

# Positional encodings (an axis: see the module docstring). "-kv": relative key/value embeddings.
PE = Literal["absolute", "relative", "relative-kv", "both", "both-kv"]
PES: tuple[str, ...] = ("absolute", "relative", "relative-kv", "both", "both-kv")
THEOREM_PES = ("relative", "relative-kv")  # the talk's construction: relative PE (kind not stated)
Cell = tuple[int, int, PE]
PROBE_DATA = "probe-data"  # the random stream of a member's probe sequences


def cell_arm(k: int, depth: int, positions: str) -> str:
    """Training arm of a cell: ``k2/L3/relative``."""
    return f"k{k}/L{depth}/{positions}"


def probe_arm(arm: str) -> str:
    """Arm holding the probe measurements of a cell's trained models: ``k2/L3/relative/probe``."""
    return f"{arm}/probe"


def pe_model(pe: str) -> dict[str, str]:
    """The :class:`GPTConfig` fields of a positional-encoding value: ``relative-kv`` ->
    ``{"positions": "relative", "rel_encoding": "kv"}``."""
    base, _, kind = pe.partition("-")
    return {"positions": base, "rel_encoding": kind or "bias"}


class ICLProbeConfig(Config):
    """Measurements on the trained models (our choices; the talk shows attention maps, no sizes)."""

    sequences: int = Field(256, ge=8, le=100_000)  # fresh sequences per member for gaps and curves
    batch: int = Field(64, ge=1, le=100_000)  # probe forward batch (memory)
    attention_sequences: int = Field(64, ge=1, le=100_000)  # of those, used for the matching score
    map_len: int = Field(40, ge=4, le=512)  # tokens of the sample sequence drawn in the attention maps


class ICLClaimConfig(Config):
    # "Reaches the estimator": the members' mean gap to the Bayes (order-k add-alpha) estimator on the
    # same sequences at most 0.02 nats per token. A scientific tolerance (the talk gives none): about 3%
    # of the order-1 estimator's loss (~0.55 nats at T = 128) and well under the gap between the order-0
    # and order-1 estimators (~0.07 nats), the information the in-context transition counts carry.
    # "Does not reach" is the complement: a mean gap above it.
    tol_nats: float = Field(0.02, gt=0.0, le=1.0)


# Nested defaults live on subclasses: a profile or --set that touches ``model`` or ``train`` is merged
# into the class defaults (tdlab.config.build_config), so instance defaults would be lost.
class ICLModelConfig(GPTConfig):
    """Pre-LN GPT-2 (seed 000 Table 1), 1 head per layer (the talk's theorem: "1 head per layer", layer
    norm); d = 32 (not stated by the seed; issue's setting, "d = 16 similar")."""

    arch: Literal["sec2", "gpt2"] = "gpt2"
    d: int = Field(32, ge=1, le=4096)


class ICLTrainConfig(TrainConfig):
    """Not stated by the talk: T = 128, batch 64, AdamW lr 3e-3 (issue's setting); the rest seed 000
    Table 2 (betas, cosine, weight decay 1e-3). 6000 steps: the issue's 2-layer k = 1 model needed ~3700."""

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
    # An axis, not a tuned value: the talk states relative PE (kind unstated) for its construction only.
    positions: list[PE] = ["absolute", "relative", "relative-kv", "both"]
    # Explicit subset of the (k, depth, positions) grid; empty = the full product.
    cells: list[Cell] = []
    alpha: float = Field(1.0, gt=0.0)  # issue: Dirichlet(1) rows; the add-one (Laplace) estimator is then Bayes
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
        return self.model.updated({"layers": depth, **pe_model(positions), "max_len": self.train.seq_len})


@register
class MarkovICLDepth(Experiment):
    name = "markov-icl-depth"
    paper = "003 Attention with Markov (talk), Part II"
    figure = "Memory = k, Depth?: 1/2/3-layer transformers vs the in-context k-gram estimator"
    description = (
        "In-context k-th order binary Markov chains (one Dirichlet(1) kernel per sequence): pre-LN "
        "transformers of depth 1-3 (one head per layer) with absolute, relative (scalar bias or key/value "
        "embeddings) or both positional encodings, against the Bayes-optimal add-α k-gram estimator on the "
        "same sequences. Claims: for k=1 one layer does not reach the estimator and two layers do (depth > 1: "
        "ICL emerges); for k>=2 three layers reach the order-k estimator (constant depth suffices). "
        "Attention maps and a context-matching score."
    )
    Config = MarkovICLDepthConfig
    # Atlas (issue 18): one cell per point (cells=[] so that ks, depths, positions decide the grid).
    atlas_axes = AtlasAxes(
        axes=(AtlasAxis("depths", (1, 2, 3), quick=(1, 2), label="depth", as_list=True),
              AtlasAxis("positions", ("absolute", "relative", "relative-kv", "both"), quick=("absolute", "relative"),
                        label="PE", as_list=True),
              AtlasAxis("ks", (1, 2, 3), quick=(1,), label="k", as_list=True)),
        set={"cells": []},
        why="The claims are about depth against the chain's order k (depth 1 does not reach the k = 1 estimator, "
            "depth 2 does; depth 3 for k >= 2), and the seed states relative PE for its construction only.",
    )
    arm_fields = {"model.layers": "depths=[...] or cells=[...]", "model.positions": "positions=[...] or cells=[...]",
                  "model.rel_encoding": "positions=[...] (relative-kv, both-kv) or cells=[...]", "model.max_len": "train.seq_len"}
    profiles = {
        # ~8 min on 2 idle CPU cores. A schedule that can test its own claims (issue 11: the 2-layer
        # k = 1 model reaches +0.004 ± 0.003 at T = 128, batch 64, 4000 steps, ~5 min for 3 members;
        # at 2000 steps, T = 64, batch 32 it was still at +0.017 and falling). To stay within minutes the
        # grid shrinks, not the steps: k = 1 only, depth 1 and 2, absolute PE — the cells of "depth = 1
        # vs depth > 1". The k >= 2 statement ("constant depth suffices") needs the paper profile (or
        # --set cells=...); in a quick run it is not evaluable. d = 16 (issue: "similar" to 32).
        "quick": {
            "members": 3,
            "cells": [(1, 1, "absolute"), (1, 2, "absolute")],
            "model": {"d": 16},
            "train": {"steps": 4000, "batch": 64, "seq_len": 128, "eval_every": 200, "eval_batches": 4},
            "probe": {"sequences": 256, "map_len": 40},
        },
        # The full grid: k in {1, 2, 3} x depth {1, 2, 3} x {absolute, relative, relative-kv, both},
        # d = 32, T = 128, batch 64, 6000 steps (the 2-layer k=1 model needed ~3700), 5 members.
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

    def trivial_error(self, cfg: MarkovICLDepthConfig, arm: str) -> float:
        return math.log(2)  # next-token arms over a binary alphabet: the uniform predictor's loss, log V

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _final(metrics: pd.DataFrame, arm: str, name: str) -> list[float]:
        df = metrics[(metrics["arm"] == arm) & (metrics["name"] == name)].sort_values("member")
        return df["value"].tolist()

    def analyse(self, cfg: MarkovICLDepthConfig, run: Run) -> Analysis:
        metrics = run.metrics()
        cl = cfg.claims
        out = Analysis(measurements={"tol_nats": cl.tol_nats})
        cells: dict[str, dict] = {}
        for k, depth, pe in cfg.grid():
            arm = cell_arm(k, depth, pe)
            pa = probe_arm(arm)
            model = np.array(self._final(metrics, pa, "probe_loss"))
            est = {j: np.array(self._final(metrics, pa, f"est_loss_order{j}")) for j in range(k + 1)}
            gap = model - est[k]
            # The same gap on the trainer's evaluation batches over training (test_loss@bayes is the
            # task's optimal_probs, the order-k add-alpha estimator, on those very batches): its drift
            # over the last 10% of training says whether the end is converged.
            steps, test = member_curves(metrics, arm, "test_loss")
            _, bayes = member_curves(metrics, arm, "test_loss@bayes")
            eval_gap = test - bayes if test.size and bayes.shape == test.shape else np.empty((0, 0))
            drift = end_drift(steps, eval_gap) if eval_gap.size else None
            last = depth - 1
            score = self._final(metrics, pa, f"match_score_layer{last}")
            chance = self._final(metrics, pa, f"match_chance_layer{last}")
            cells[arm] = {
                "k": k, "depth": depth, "positions": pe,
                "probe_loss": model.tolist(),
                "estimator_loss": {f"order{j}": v.tolist() for j, v in est.items()},
                "gap": gap.tolist(),
                "gap_mean": float(gap.mean()) if gap.size else float("nan"),
                "gap_vs_lower_order": {f"order{j}": (model - v).tolist() for j, v in est.items() if j < k},
                "eval_gap_final": eval_gap[:, -1].tolist() if eval_gap.size else [],
                "eval_gap_drift": drift,
                "match_score_last_layer": score,
                "match_chance_last_layer": chance,
                "match_ratio_last_layer": [s / c for s, c in zip(score, chance)],
                "match_score_by_layer": [self._final(metrics, pa, f"match_score_layer{i}") for i in range(depth)],
            }
        out.measurements["cells"] = cells
        self._claims(cfg, cells, out)
        out.measurements["gap_table"] = self.gap_table(cfg, cells)
        grid = ", ".join(f"(k={k}, {d} layer{'s' if d > 1 else ''}, {pe})" for k, d, pe in cfg.grid())
        out.notes.append(f"Cells of this run: {grid}. Gap = model loss − the order-k add-α (Bayes) estimator's loss on the "
                         "same fresh probe sequences, nats per token; drift = change of the same gap on the evaluation "
                         "batches over the last 10% of training.")
        for arm, c in cells.items():
            g = np.array(c["gap"])
            lower = "".join(f"; vs order-{j} {np.mean(v):+.4f}" for j, v in
                            ((int(o[5:]), c["gap_vs_lower_order"][o]) for o in c["gap_vs_lower_order"]) if j == c["k"] - 1)
            drift = c["eval_gap_drift"]
            drift_s = f"drift {drift:+.4f}; " if drift is not None else ""
            out.notes.append(f"{arm}: gap {g.mean():+.4f} ± {g.std():.4f} (members {', '.join(f'{x:+.4f}' for x in g)}{lower}); "
                             f"{drift_s}match {np.mean(c['match_score_last_layer']):.3f} vs chance "
                             f"{np.mean(c['match_chance_last_layer']):.3f}.")
        for arm, c in cells.items():
            if c["k"] >= 2 and c["depth"] == 2:
                lower = np.array(c["gap_vs_lower_order"][f"order{c['k'] - 1}"])
                out.notes.append(
                    f"2 layers, k={c['k']}, {c['positions']} PE (measured, not a claim: the talk states nothing for it): gap "
                    f"{np.mean(c['gap']):+.4f} nats to the order-{c['k']} estimator, {np.mean(lower):+.4f} vs the order-{c['k'] - 1} one.")
        if any(pe.startswith(("relative", "both")) for _, _, pe in cfg.grid()):
            out.notes.append("Relative PE: 'relative'/'both' use tdlab's learned scalar bias per distance (not the seed authors' "
                             "encoding); 'relative-kv'/'both-kv' the relative key/value embeddings (Shaw et al. 2018) of their RPE code.")
        return out

    @staticmethod
    def _pe_label(k: int, pe: str) -> str:
        if k == 1:
            return f"{pe} PE (the talk states no PE for k = 1)"
        if pe in THEOREM_PES:
            return f"{pe} PE (the theorem's relative PE; its kind is not stated by the seed)"
        return f"{pe} PE (not the theorem's relative PE; an axis value not stated by the seed)"

    @classmethod
    def _claims(cls, cfg: MarkovICLDepthConfig, cells: dict[str, dict], out: Analysis) -> None:
        tol = cfg.claims.tol_nats
        one = out.group("one-layer-does-not-reach-estimator",
                        "Depth = 1: for k = 1 a 1-layer transformer does not learn the in-context estimator (no induction "
                        f"head): its mean gap to the order-1 Bayes estimator stays above the reach tolerance {tol} nats, and "
                        "above the 2-layer model's gap (talk Part II, 'Depth = 1' / 'Depth > 1')")
        two = out.group("two-layers-reach-order-1-estimator",
                        f"Depth > 1, in-context learning emerges: for k = 1 a 2-layer transformer reaches the order-1 in-context "
                        f"(Bayes) estimator, mean gap ≤ {tol} nats (talk Part II)")
        three = out.group("three-layers-reach-order-k-estimator",
                          "Constant depth suffices: 3 layers, 1 head per layer, relative PE and layer norm represent any order-k "
                          f"in-context estimator — trained 3-layer models reach the order-k (Bayes) estimator for k ≥ 2, mean gap "
                          f"≤ {tol} nats (talk Part II, main result)")
        pes = {pe for _, _, pe in cfg.grid()}
        for pe in sorted(pes, key=PES.index):
            l1, l2 = cells.get(cell_arm(1, 1, pe)), cells.get(cell_arm(1, 2, pe))
            label = cls._pe_label(1, pe)
            if l1 is not None:
                # a one-sided threshold (tolerance 0): a gap still moving by more than the reach
                # tolerance over the last 10% of training leaves the row not resolved
                one.value(f"{pe}/gap", l1["gap"], tol, 0.0, "ge", arms=[cell_arm(1, 1, pe)], drift=l1["eval_gap_drift"],
                          drift_tolerance=tol, unit=" nats", statement=f"k=1, 1 layer, {label}: mean gap ≥ {tol} nats")
                if l2 is not None:
                    one.compare(f"{pe}/vs-2-layers", l1["gap"], l2["gap"], "gt", paired=True,
                                arms=[cell_arm(1, 1, pe), cell_arm(1, 2, pe)], unit=" nats",
                                statement=f"k=1, {label}: gap(1 layer) − gap(2 layers) > 0 (paired over members)")
            if l2 is not None:
                two.value(pe, l2["gap"], 0.0, tol, "le", arms=[cell_arm(1, 2, pe)], drift=l2["eval_gap_drift"], unit=" nats",
                          statement=f"k=1, 2 layers, {label}: mean gap ≤ {tol} nats")
        for k in sorted({k for k, _, _ in cfg.grid() if k >= 2}):
            for pe in sorted(pes, key=PES.index):
                c = cells.get(cell_arm(k, 3, pe))
                if c is not None:
                    three.value(f"k{k}/{pe}", c["gap"], 0.0, tol, "le", arms=[cell_arm(k, 3, pe)], drift=c["eval_gap_drift"],
                                unit=" nats", statement=f"k={k}, 3 layers, {cls._pe_label(k, pe)}: mean gap ≤ {tol} nats")
        missing = [(one, "(1, 1, PE) and (1, 2, PE)"), (two, "(1, 2, PE)"), (three, "(k ≥ 2, 3, relative or relative-kv)")]
        for group, need in missing:
            if not group.rows:
                row = group.value("not-in-grid", [], 0.0, tol, "le", statement=f"needs cells {need}")
                row.reason = f"no cell {need} in this run's grid (the quick profile runs k = 1 only; use the paper profile or --set cells=...)"

    @staticmethod
    def gap_table(cfg: MarkovICLDepthConfig, cells: dict[str, dict]) -> str:
        """Markdown table: rows (k, depth), columns positional encodings; mean ± sd of the gap over members."""
        pes = [pe for pe in PES if any(c["positions"] == pe for c in cells.values())]
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
                    extra = f" (vs order-{k - 1} {lo:+.3f})"
                entries.append(f"{g.mean():+.4f} ± {g.std():.4f}{extra}")
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
        pes = [pe for pe in PES if any(c["positions"] == pe for c in cells.values())]
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
        pes = [pe for pe in PES if any(c["positions"] == pe for c in cells.values())]
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
                txt = "—" if c is None else f"{c['gap_mean']:+.3f}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(pes)), pes)
        ax.set_yticks(range(len(rows)), [f"k={k}, {d} layer(s)" for k, d in rows])
        fig.colorbar(im, ax=ax, label="gap to order-k Laplace (nats)")
        ax.set_title(f"Final gap to the order-k Bayes estimator, mean over members (reach tolerance {cfg.claims.tol_nats})", fontsize=9)
        return save_figure(fig, figdir / "gap_table.png")

    def _plot_attention(self, cfg: MarkovICLDepthConfig, run: Run, cells: dict, figdir: Path) -> list[Path]:
        """Attention maps of every layer, member 0, one probe sequence: for each k the deepest
        cell (relative PE preferred: the talk's construction)."""
        paths = []
        seeds = member_seeds(cfg.seed, cfg.members)
        for k in sorted({c["k"] for c in cells.values()}):
            group = [c for c in cells.values() if c["k"] == k]
            best = max(group, key=lambda c: (c["depth"], c["positions"] in THEOREM_PES))
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
