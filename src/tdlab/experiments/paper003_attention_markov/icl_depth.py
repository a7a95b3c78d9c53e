"""``markov-icl-depth``: seed 003 ("Attention with Markov", talk), Part II, "Memory = k, Depth?".

Every sequence has its own random k-th order binary kernel (rows iid Dirichlet(α),
:class:`~tdlab.tasks.markov_kth.InContextMarkov`), so the only way to predict well is in context:
match the current k-context against the history and count what followed ("ICL for kth-order
Markov"). The reference of every claim is the add-α order-k estimator
(:func:`tdlab.theory.kgram.kgram_probs`), the *Bayes predictor* of this source. Gaps are measured against
it on the *same* sequences: the probe's fresh sequences (``est_loss_order{k}``) and, during training,
the trainer's evaluation batches (``test_loss@bayes``, the task's ``optimal_probs`` on those batches),
whose gap drifts over the last tenth of training in learning-rate time decide convergence.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-icl-depth``); the claims' stages are :mod:`.common.estimator_stage`'s and :data:`DEPTH_TWO_LEARNS`.

Models: pre-LN GPT-2 (``arch="gpt2"``, one head per layer, seed 000 Table 1) of depth 1, 2, 3. The
positional encoding is an axis (``positions``): ``absolute`` (learned p_n), ``relative`` (tdlab's
learned scalar bias per distance), ``relative-kv`` (Shaw et al. 2018 relative key/value embeddings;
:class:`~tdlab.models.gpt.GPTConfig` ``rel_encoding="kv"``), ``both``/``both-kv`` (absolute + relative).

Metric layout: arm ``k{k}/L{depth}/{positions}`` holds the trainer's ``test_loss``, ``test_loss@bayes``
etc.; arm ``k{k}/L{depth}/{positions}/probe`` the probe of the final models: at the final
step ``probe_loss`` and ``est_loss_order{j}`` (j = 0..k) on ``probe.sequences`` fresh sequences,
``match_score_layer{l}`` / ``match_chance_layer{l}``; per-position curves ``pos_loss_model`` and
``pos_loss_order{j}`` with the *position* (0-based, predicting token ``pos + 1``) in the step column.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.claims.declare import Calibration, Hypothesis, Threshold
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper003_attention_markov.common.estimator_stage import (
    PAST_LOWER_ORDER,
    PROBE_DATA,
    planted_reach,
    record_stage,
    stage_leaves_room,
)
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.attention import attention_patterns, context_match_mask, context_matching_score, plot_attention_maps
from tdlab.report.standard_figures import Curves, Heatmap, Line, Panel
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.theory.kgram import estimator_losses
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer, next_token_loss

# Positional encodings (an axis: see the module docstring). "-kv": relative key/value embeddings.
PE = Literal["absolute", "relative", "relative-kv", "both", "both-kv"]
PES: tuple[str, ...] = ("absolute", "relative", "relative-kv", "both", "both-kv")
THEOREM_PES = ("relative", "relative-kv")  # the talk's construction: relative PE (kind not stated)
Cell = tuple[int, int, PE]


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
    # of the order-1 estimator's loss (~0.52 nats at T = 128) and well under the gap between the order-0
    # and order-1 estimators (~0.064 nats), the information the in-context transition counts carry.
    # "Does not reach" is the complement: a mean gap above it.
    tol_nats: float = Field(0.02, gt=0.0, le=1.0)
    # The stage a reach claim needs (estimator_stage.PAST_LOWER_ORDER): past the order-(k-1) estimator by
    # this share of the gap to the order-k one (seed 000's plateau-escape share; why: estimator_stage).
    stage_share: float = Field(0.25, gt=0.0, lt=1.0)


# Nested defaults live on subclasses: a profile or --set that touches ``model`` or ``train`` is merged
# into the class defaults (tdlab.config.build_config), so instance defaults would be lost.
class ICLModelConfig(GPTConfig):
    """Pre-LN GPT-2 (seed 000 Table 1), 1 head per layer (the talk's theorem: "1 head per layer", layer
    norm); d = 32 (not stated by the seed; d = 16 measured similar)."""

    arch: Literal["sec2", "gpt2"] = "gpt2"
    d: int = Field(32, ge=1, le=4096)


class ICLTrainConfig(TrainConfig):
    """Not stated by the talk: T = 128, batch 64, AdamW lr 3e-3 (ours); the rest seed 000 Table 2 (betas,
    cosine, weight decay 1e-3). 6000 steps: a 2-layer k = 1 model reached the estimator after ~3700."""

    steps: int = Field(6000, ge=1, le=10_000_000)
    batch: int = Field(64, ge=1, le=1_000_000)
    seq_len: int = Field(128, ge=2, le=65536)
    lr: float = Field(3e-3, gt=0.0, le=100.0)
    eval_every: int = Field(250, ge=1)
    eval_batches: int = Field(4, ge=1, le=100_000)


class MarkovICLDepthConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # independent seeds per cell
    ks: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1), Distinct] = [
        1,
        2,
    ]  # k = 1, 2 (paper profile adds k = 3)
    depths: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1), Distinct] = [
        1,
        2,
        3,
    ]  # talk: "2-layer transformer" / "3-layer transformer"; 1 layer as control
    # An axis, not a tuned value: the talk states relative PE (kind unstated) for its construction only.
    positions: Annotated[list[PE], Field(min_length=1), Distinct] = ["absolute", "relative", "relative-kv", "both"]
    # Explicit subset of the (k, depth, positions) grid; empty = the full product.
    cells: Annotated[list[Cell], Distinct] = []
    alpha: float = Field(1.0, gt=0.0)  # Dirichlet(1) rows: the add-one (Laplace) estimator is then Bayes
    model: ICLModelConfig = ICLModelConfig()  # layers and positions are set per cell
    train: ICLTrainConfig = ICLTrainConfig()
    probe: ICLProbeConfig = ICLProbeConfig()
    claims: ICLClaimConfig = ICLClaimConfig()
    cpu_threads: int | None = Field(
        1, ge=1, le=1024
    )  # torch threads on CPU (tdlab.train.cpu.cpu_threads); None: default

    @model_validator(mode="after")
    def _check(self) -> MarkovICLDepthConfig:
        if self.model.arch != "gpt2":
            raise ValueError("model.arch must be 'gpt2' (pre-LN, one head per layer)")
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


def provenance(k: int, pe: str) -> Literal["paper", "ours"]:
    """Whether a cell's positional encoding is one the talk's statement covers (module docstring)."""
    if k == 1:
        return "ours" if pe.startswith("both") else "paper"
    return "paper" if pe in THEOREM_PES else "ours"


# The 1-layer statements are about *not* reaching, which a short budget makes true for any depth: their stage
# is the 2-layer cell's, recorded for the 1-layer arm from the 2-layer arm's members.
DEPTH_TWO_LEARNS = Stage(
    "two-layers-past-order-0",
    "the 2-layer cell of the same k = 1 and positional encoding, trained under the same budget, is past the "
    "order-0 in-context estimator by claims.stage_share of the gap to the order-1 one: the budget teaches the "
    "depth that can match contexts, so the 1-layer gap is the depth's, not the budget's",
)

# The talk's hypotheses, read off each row's own cell (its context keeps k and positions in every record).
# k = 1: the talk states no PE for "Depth > 1: ICL emerges", so any single encoding is its (absolute, the
# seed authors' GPT-2's; or a relative one); absolute + relative together is a combination it never uses.
ONE_ENCODING = Hypothesis(
    "one positional encoding, absolute or relative (the talk states none for 'Depth > 1: ICL emerges'; absolute + "
    "relative together it never uses)",
    lambda cfg, row: not str(row.context["positions"]).startswith("both"),
    on="row",
)
RELATIVE_PE = Hypothesis(
    "relative positional encodings (talk, Part II, main result; the kind is not stated: tdlab's scalar bias per "
    "distance `relative` and Shaw et al.'s key/value embeddings `relative-kv` both are)",
    lambda cfg, row: row.context["positions"] in THEOREM_PES,
    on="row",
)
ONE_HEAD = Hypothesis("1 head per layer (talk, Part II, main result)", lambda cfg: cfg.model.heads == 1)
LAYER_NORM = Hypothesis(
    "layer norm (talk, Part II, main result): the GPT-2 blocks with LayerNorm (model.norm auto, pre or post)",
    lambda cfg: cfg.model.arch == "gpt2" and cfg.model.norm in ("auto", "pre", "post"),
)


def _plant(reach: bool, lower: int | None = None):
    """The planted pair of a reach claim at the run's sequence length and members (estimator_stage.planted_reach):
    the order-k estimator against the order-``lower`` one (default k − 1)."""

    def plant(cfg: MarkovICLDepthConfig, context: Any) -> tuple[Sample, Sample]:
        k = int(context["k"])
        low = k - 1 if lower is None else lower
        return planted_reach(k, low, cfg.train.seq_len + 1, cfg.alpha, cfg.claims.tol_nats, cfg.members, reach=reach)

    return plant


_CALIBRATION_TEST = "tests/experiments/test_declared_claims.py::test_a_calibrated_threshold_separates_its_planted_cases"
_TOL = "claims.tol_nats = 0.02 nats per token around the order-k add-α (Bayes) estimator's loss on the same sequences"


def _reach(note: str, reach: bool = True) -> Threshold:
    return Threshold("ours", _TOL, Calibration("planted", note, plant=_plant(reach), test=_CALIBRATION_TEST))


def _training_panels(cells: dict[str, dict]) -> list[Panel]:
    """Per k, every cell's test loss against the order-0..k in-context estimators' losses."""
    panels = []
    for k in sorted({c["k"] for c in cells.values()}):
        group = [a for a, c in cells.items() if c["k"] == k]
        est = {j: float(np.mean(cells[group[0]]["estimator_loss"][f"order{j}"])) for j in range(k + 1)}
        panels.append(
            Panel(
                f"k = {k}",
                [Line(a, label=f"{cells[a]['depth']} layer(s), {cells[a]['positions']}") for a in group],
                reference={f"order-{j} estimator {v:.3f}": v for j, v in est.items()},
            )
        )
    return panels


@register
class MarkovICLDepth(Experiment[MarkovICLDepthConfig]):
    Config = MarkovICLDepthConfig

    # ------------------------------------------------------------------------------------------
    def run(self, cfg: MarkovICLDepthConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            # The cells are independent: they train at once on one-thread lanes (tdlab.train.lanes).
            arms = [(cell_arm(k, depth, pe), k, cfg.arm_model(depth, pe)) for k, depth, pe in cfg.grid()]
            fits = [
                Fit(
                    arm,
                    Trainer(cfg.train, ctx.device, ctx.progress, label=arm),
                    partial(GPT, mcfg),
                    seeds,
                    InContextMarkov(k, 2, cfg.alpha),
                )
                for arm, k, mcfg in arms
            ]
            for fit, result in zip(fits, ctx.fit_all(fits), strict=True):
                if ctx.writer.arm_rows(probe_arm(fit.arm)):
                    continue  # probed by an interrupted attempt of this (resumed) run
                model = fit.build(seeds)
                model.load_state_dict({n: torch.stack([s[n] for s in result.states]) for n in result.states[0]})
                ctx.store_rows(probe_arm(fit.arm), self.probe(model.to(ctx.device), fit.task, cfg, seeds, ctx.device))

    @staticmethod
    def probe_tokens(
        task: InContextMarkov, cfg: MarkovICLDepthConfig, seeds: list[int], device: str = "cpu"
    ) -> torch.Tensor:
        """``(E, S, T + 1)`` probe sequences: fresh, from each member's own ``probe-data`` stream
        (the same for every cell of one k)."""
        return task.sample(generators(seeds, PROBE_DATA, device), cfg.probe.sequences, cfg.train.seq_len + 1, device)

    @classmethod
    @torch.no_grad()
    def probe(
        cls, model: GPT, task: InContextMarkov, cfg: MarkovICLDepthConfig, seeds: list[int], device: str = "cpu"
    ) -> list[tuple[int, int, str, float]]:
        """Per-position model and estimator losses on the probe set, and the matching scores."""
        model.eval()
        k, T, step = task.k, cfg.train.seq_len, cfg.train.steps
        x = cls.probe_tokens(task, cfg, seeds, device)
        E = x.shape[0]
        pos_model = torch.zeros(E, T, dtype=torch.float64, device=device)
        for i in range(0, x.shape[1], cfg.probe.batch):
            xb = x[:, i : i + cfg.probe.batch]
            pos_model += (
                next_token_loss(model(xb[..., :-1]), xb[..., 1:], reduce_positions=False).double() * xb.shape[1]
            )
        pos_model /= x.shape[1]
        rows: list[tuple[int, int, str, float]] = []
        for e in range(E):
            rows.extend((t, e, "pos_loss_model", float(pos_model[e, t])) for t in range(T))
            rows.append((step, e, "probe_loss", float(pos_model[e].mean())))
        for j, est in estimator_losses(x, k, task.vocab, cfg.alpha).items():  # (E, T) per order
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
    def measure(self, cfg: MarkovICLDepthConfig, run: RunView) -> Measurements:
        """Per cell: the members' probe gap to the order-k estimator, its drift on the evaluation batches
        (learning-rate time) and the stage check; then one row per statement and cell."""
        cl = cfg.claims
        out = Measurements({"tol_nats": cl.tol_nats, "stage_share": cl.stage_share})
        cells: dict[str, dict] = {}
        for k, depth, pe in cfg.grid():
            arm = cell_arm(k, depth, pe)
            pa = probe_arm(arm)
            model = run.final(pa, "probe_loss")
            est = {j: run.final(pa, f"est_loss_order{j}") for j in range(k + 1)}
            gap = model - est[k]
            record_stage(out, arm, model, est[k - 1], est[k], cl.stage_share, k)
            score = run.final(pa, f"match_score_layer{depth - 1}")
            chance = run.final(pa, f"match_chance_layer{depth - 1}")
            cells[arm] = {
                "k": k,
                "depth": depth,
                "positions": pe,
                "provenance": provenance(k, pe),
                "probe_loss": model.tolist(),
                "estimator_loss": {f"order{j}": v.tolist() for j, v in est.items()},
                "gap": gap.tolist(),
                "gap_mean": float(gap.mean()) if gap.size else math.nan,
                "gap_vs_lower_order": {f"order{j}": (model - v).tolist() for j, v in est.items() if j < k},
                "eval_gap_final": (run.final(arm, "test_loss") - run.final(arm, "test_loss@bayes")).tolist(),
                "eval_gap_drift": run.drift(arm, "test_loss", minus="test_loss@bayes"),
                "past_lower_order": out.stages[arm][PAST_LOWER_ORDER.id].passed,
                "stage_leaves_room": stage_leaves_room(est[k - 1], est[k], cl.stage_share, cl.tol_nats),
                "match_score_last_layer": score.tolist(),
                "match_chance_last_layer": chance.tolist(),
                "match_ratio_last_layer": (score / chance).tolist(),
                "match_score_by_layer": [run.final(pa, f"match_score_layer{i}").tolist() for i in range(depth)],
            }
        out.values["cells"] = cells
        self._rows(cfg, cells, out)
        out.values["gap_table"] = self.gap_table(cfg, cells)
        return out

    @staticmethod
    def _pe_label(k: int, pe: str) -> str:
        if k == 1:
            return f"{pe} PE (the talk states no PE for k = 1)"
        if pe in THEOREM_PES:
            return f"{pe} PE (the theorem's relative PE; its kind is not stated by the seed)"
        return f"{pe} PE (not the theorem's relative PE; an axis value not stated by the seed)"

    @classmethod
    def _rows(cls, cfg: MarkovICLDepthConfig, cells: dict[str, dict], out: Measurements) -> None:
        tol, share = cfg.claims.tol_nats, cfg.claims.stage_share
        pes = sorted({pe for _, _, pe in cfg.grid()}, key=PES.index)
        for pe in pes:
            a1, a2 = cell_arm(1, 1, pe), cell_arm(1, 2, pe)
            l1, l2 = cells.get(a1), cells.get(a2)
            label, prov = cls._pe_label(1, pe), provenance(1, pe)
            if l2 is not None:
                est = l2["estimator_loss"]
                record_stage(out, a2, l2["probe_loss"], est["order0"], est["order1"], share, 1, DEPTH_TWO_LEARNS)
                out.row(
                    "two-layers-reach-order-1-estimator",
                    pe,
                    Sample(l2["gap"], drift=l2["eval_gap_drift"]),
                    arms=[a2],
                    provenance=prov,
                    context={"k": 1, "depth": 2, "positions": pe},
                    label=f"k=1, 2 layers, {label}: mean gap ≤ {tol} nats",
                )
            if l1 is None:
                continue
            if l2 is not None:  # the 1-layer arm's stage is its 2-layer control's, member by member
                est = l2["estimator_loss"]
                record_stage(
                    out, a1, l2["probe_loss"], est["order0"], est["order1"], share, 1, DEPTH_TWO_LEARNS, source=a2
                )
                out.row(
                    "one-layer-gap-exceeds-two-layers",
                    pe,
                    Sample(l1["gap"]),
                    Sample(l2["gap"]),
                    arms=[a1, a2],
                    provenance=prov,
                    context={"k": 1, "positions": pe},
                    label=f"k=1, {label}: gap(1 layer) − gap(2 layers) > 0 (paired over members)",
                )
            else:
                nan = [math.nan] * len(l1["gap"])
                out.stage(a1, DEPTH_TWO_LEARNS, nan, nan, evidence=f"no 2-layer cell {a2} in this run's grid")
            out.row(
                "one-layer-does-not-reach-estimator",
                pe,
                Sample(l1["gap"], drift=l1["eval_gap_drift"]),
                arms=[a1],
                provenance=prov,
                context={"k": 1, "depth": 1, "positions": pe},
                label=f"k=1, 1 layer, {label}: mean gap ≥ {tol} nats",
            )
        for k in sorted({k for k, _, _ in cfg.grid() if k >= 2}):
            for pe in pes:
                arm = cell_arm(k, 3, pe)
                c = cells.get(arm)
                if c is not None:
                    out.row(
                        "three-layers-reach-order-k-estimator",
                        f"k{k}/{pe}",
                        Sample(c["gap"], drift=c["eval_gap_drift"]),
                        arms=[arm],
                        provenance=provenance(k, pe),
                        context={"k": k, "depth": 3, "positions": pe},
                        label=f"k={k}, 3 layers, {cls._pe_label(k, pe)}: mean gap ≤ {tol} nats",
                    )

    def notes(self, cfg: MarkovICLDepthConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        cells = measured.values["cells"]
        grid = ", ".join(f"(k={k}, {d} layer{'s' if d > 1 else ''}, {pe})" for k, d, pe in cfg.grid())
        notes = [f"Cells of this run: {grid}."]
        for arm, c in cells.items():
            g = np.array(c["gap"])
            lower = np.mean(c["gap_vs_lower_order"][f"order{c['k'] - 1}"])
            passed = sum(c["past_lower_order"])
            notes.append(
                f"{arm}: gap {g.mean():+.4f} ± {g.std():.4f} (members {', '.join(f'{x:+.4f}' for x in g)}); "
                f"vs order-{c['k'] - 1} {lower:+.4f}; {passed}/{g.size} members past the order-{c['k'] - 1} stage; "
                f"drift {c['eval_gap_drift']:+.4f}; match {np.mean(c['match_score_last_layer']):.3f} vs chance "
                f"{np.mean(c['match_chance_last_layer']):.3f}."
            )
            if not c["stage_leaves_room"]:
                notes.append(
                    f"{arm}: a member at the stage boundary is already within {cfg.claims.tol_nats} nats of the "
                    "order-k estimator: past the stage, its reach row cannot fail."
                )
        for c in cells.values():
            if c["k"] >= 2 and c["depth"] == 2:
                lower = np.array(c["gap_vs_lower_order"][f"order{c['k'] - 1}"])
                notes.append(
                    f"2 layers, k={c['k']}, {c['positions']} PE (measured, not a claim: the talk states nothing for it): gap "
                    f"{np.mean(c['gap']):+.4f} nats to the order-{c['k']} estimator, {np.mean(lower):+.4f} vs the order-{c['k'] - 1} one."
                )
        if any(pe.startswith(("relative", "both")) for _, _, pe in cfg.grid()):
            notes.append(
                "Relative PE: 'relative'/'both' use tdlab's learned scalar bias per distance (not the seed authors' "
                "encoding); 'relative-kv'/'both-kv' the relative key/value embeddings (Shaw et al. 2018) of their RPE code."
            )
        return [*super().notes(cfg, measured, groups), *notes]

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
    figures = (
        Curves(
            "training_curves.png",
            lambda cfg, m: _training_panels(m["cells"]),
            title="Training: test loss (band: min–max over members) vs the in-context estimators",
            legend=7,
        ),
        Heatmap(
            "gap_table.png",
            "gap_mean",
            x="positions",
            y=lambda c: (c["k"], c["depth"]),
            title=lambda cfg: (
                f"Final gap to the order-k Bayes estimator, mean over members (reach tolerance {cfg.claims.tol_nats})"
            ),
            colorbar="gap to order-k Laplace (nats)",
            x_order=PES.index,
            y_label=lambda kd: f"k={kd[0]}, {kd[1]} layer(s)",
            vmin=0.0,
            vmax_at_least=0.08,
        ),
    )

    def plot(self, cfg: MarkovICLDepthConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """Loss by position (its own figure), the declared training curves and gap table, the attention maps."""
        cells = analysis.measurements["cells"]
        return [
            self._plot_positions(cfg, run, cells, figdir),
            *super().plot(cfg, run, analysis, figdir),
            *self._plot_attention(cfg, run, cells, figdir),
        ]

    @staticmethod
    def _smooth(y: np.ndarray, w: int = 5) -> np.ndarray:
        if len(y) < w:
            return y
        kernel = np.ones(w) / w
        pad = np.pad(y, (w // 2, w - 1 - w // 2), mode="edge")
        return np.convolve(pad, kernel, mode="valid")

    def _plot_positions(self, cfg: MarkovICLDepthConfig, run: RunView, cells: dict, figdir: Path) -> Path:
        from tdlab.report.figures import plt, save_figure

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
                    pos, vals = run.curves(probe_arm(arm), "pos_loss_model")
                    ax.plot(pos + 1, self._smooth(vals.mean(0)), lw=1.6, label=f"{cells[arm]['depth']} layer(s)")
                for j, ls in zip(range(k + 1), ["--", "-.", ":", (0, (5, 1))], strict=False):
                    pos, est = run.curves(probe_arm(group[0]), f"pos_loss_order{j}")
                    ax.plot(
                        pos + 1,
                        self._smooth(est.mean(0)),
                        color="k",
                        ls=ls,
                        lw=1.1,
                        label=f"order-{j} Laplace estimator" + (" (Bayes)" if j == k else ""),
                    )
                ax.set_title(f"k = {k}, {pe} PE", fontsize=9)
                ax.set_xlabel("position t (predicting x_{t+1})")
                ax.set_ylabel("loss (nats)")
                ax.legend(fontsize=7)
        fig.suptitle(
            f"Per-position loss on fresh sequences (mean over {cfg.members} members, 5-position moving average)"
        )
        return save_figure(fig, figdir / "per_position_loss.png")

    def _plot_attention(self, cfg: MarkovICLDepthConfig, run: RunView, cells: dict, figdir: Path) -> list[Path]:
        """Attention maps of every layer, member 0, one probe sequence: for each k the deepest
        cell (relative PE preferred: the talk's construction)."""
        from tdlab.report.figures import save_figure

        paths = []
        seeds = member_seeds(cfg.seed, cfg.members)
        for k in sorted({c["k"] for c in cells.values()}):
            group = [c for c in cells.values() if c["k"] == k]
            best = max(group, key=lambda c: (c["depth"], c["positions"] in THEOREM_PES))
            arm = cell_arm(k, best["depth"], best["positions"])
            model = GPT(cfg.arm_model(best["depth"], best["positions"]), seeds)
            model.load_state_dict(run.arrays(arm))
            x = self.probe_tokens(InContextMarkov(k, 2, cfg.alpha), cfg, seeds)[:, :1, : cfg.probe.map_len]
            maps = [p[0, 0, 0] for p in attention_patterns(model, x)]
            match = context_match_mask(x[0, 0], k)
            score = np.mean(best["match_score_last_layer"])
            chance = np.mean(best["match_chance_last_layer"])
            fig = plot_attention_maps(
                maps,
                x[0, 0].tolist(),
                [f"layer {i}" for i in range(len(maps))],
                match,
                f"{arm}, member 0: red dots = keys whose preceding {k} token(s) match the query's "
                f"(last-layer mass {score:.2f} vs chance {chance:.2f}, probe mean)",
            )
            paths.append(save_figure(fig, figdir / f"attention_k{k}.png"))
        return paths
