"""``markov-icl-heads``: seed 003 ("Attention with Markov", talk), Part II, "Memory = k, Depth?".

The talk: "(Edelman et al., 2024 & Nichani et al., 2024): Number of heads/layers should scale with k.
But..." the main result: "3 layers, 1 head per layer" suffice for any k. Grid heads {1, 2, 4} × depth
{2, 3} × k, pre-LN GPTs with MLPs and relative key/value positions (:mod:`.common.icl_grid`), each cell
against the order-k in-context estimator (add-α, the Bayes predictor, on the same fresh sequences).

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-icl-heads``).
"""

from __future__ import annotations

from pydantic import field_validator, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.experiments.base import register
from tdlab.experiments.paper003_attention_markov.common.icl_grid import (
    TRAINING_GAPS,
    Cell,
    GridConfig,
    ICLGrid,
    cell_arm,
    depth_list,
    gap_heatmap,
)
from tdlab.run_view import RunView


class MarkovICLHeadsConfig(GridConfig):
    heads: list[int] = [1, 2, 4]
    depths: list[int] = [2, 3]
    ks: list[int] = [1, 2, 3]

    _d = field_validator("depths")(classmethod(lambda cls, v: depth_list(v)))

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


@register
class MarkovICLHeads(ICLGrid[MarkovICLHeadsConfig]):
    Config = MarkovICLHeadsConfig

    def measure(self, cfg: MarkovICLHeadsConfig, run: RunView) -> Measurements:
        cl = cfg.claims
        out = Measurements({"tol_nats": cl.tol_nats, "stage_share": cl.stage_share})
        cells = out.values["cells"] = self.cells(cfg, run, out)
        depth, hmax = cl.constant_depth, max(cfg.heads)
        for k in cfg.ks:
            a1, am = cell_arm("mlp", k, depth, 1), cell_arm("mlp", k, depth, hmax)
            if a1 not in cells:
                continue
            c = cells[a1]
            out.row(
                "one-head-per-layer-suffices-at-depth-3",
                f"k{k}",
                Sample(c["gap"], drift=c["eval_gap_drift"]),
                arms=[a1],
                context={"k": k, "depth": depth, "heads": 1},
                label=f"k={k}, {depth} layers, 1 head: mean gap ≤ {cl.tol_nats} nats",
            )
            if hmax > 1 and am in cells:
                m = cells[am]
                diff = [a - b for a, b in zip(c["gap"], m["gap"], strict=True)]
                out.row(
                    "more-heads-not-needed-at-depth-3",
                    f"k{k}",
                    Sample(diff, drift=c["eval_gap_drift"] - m["eval_gap_drift"]),
                    arms=[a1, am],
                    context={"k": k, "depth": depth, "heads": hmax},
                    label=f"k={k}, {depth} layers: gap(1 head) − gap({hmax} heads) ≤ {cl.tol_nats} nats (paired)",
                )
        # the cells' mean gaps again, as one table: (k, depth) × heads
        out.values["gap_mean_by_heads"] = {
            f"k{k}/L{d}": {
                f"H={h}": cells[a]["gap_mean"] for h in cfg.heads if (a := cell_arm("mlp", k, d, h)) in cells
            }
            for k in cfg.ks
            for d in cfg.depths
        }
        return out

    def notes(self, cfg: MarkovICLHeadsConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        cells = measured.values["cells"]
        notes = [
            f"depth {depth} (measured, not a claim: the talk states nothing of its own for depth {depth}): its mean "
            f"gaps by heads are the rows k…/L{depth} of the gap_mean_by_heads table."
            for depth in cfg.depths
            if depth != cfg.claims.constant_depth
        ]
        if 3 not in cfg.ks:
            notes.append("k = 3 was not run (paper profile).")
        return [*super().notes(cfg, measured, groups), *notes, *self.cell_notes(cfg, cells)]

    figures = (
        gap_heatmap(
            lambda c: f"k={c['k']} L{c['depth']}",
            lambda c: f"H={c['heads']}",
            "Gap to the order-k estimator by heads, mean over members",
            "gap_heads.png",
        ),
        TRAINING_GAPS,
    )
