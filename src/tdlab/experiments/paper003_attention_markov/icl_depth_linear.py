"""``markov-icl-depth-linear``: seed 003 ("Attention with Markov", talk), Part II, "What's happening":
"Without non-linearities, you need logarithmic depth", beside "Constant depth suffices: 3 layers,
1 head per layer, relative PE and layer norm".

Two families of GPTs (:mod:`.common.icl_grid`), one head per layer, relative key/value positions:

* ``attn``: attention-only (``mlp=False, norm="none"``: no MLP, no LayerNorm anywhere), depth 1..5;
* ``mlp``: pre-LN GPT-2 blocks (MLP + LayerNorm), depth 1..3.

Each cell's probe loss is compared with the order-k add-α in-context estimator on the same fresh sequences (the
Bayes predictor of the source). Its readings of the seed and its claims are declared in the seed's
``experiments.yaml`` (``tdlab explain markov-icl-depth-linear``).

Rows whose cells were not run are absent: a group without rows is not evaluable and names what it needs.
"""

from __future__ import annotations

from pydantic import field_validator, model_validator

from tdlab.claims import GroupResult, Measurements, Sample, Stage
from tdlab.experiments.base import register
from tdlab.experiments.paper003_attention_markov.common.estimator_stage import record_stage
from tdlab.experiments.paper003_attention_markov.common.icl_grid import (
    TRAINING_GAPS,
    Cell,
    GridConfig,
    ICLGrid,
    cell_arm,
    depth_list,
    gap_heatmap,
)
from tdlab.probes.curves import min_depths
from tdlab.run_view import RunView

DEEPEST_LEARNS = Stage(
    "deepest-attention-only-past-order-(k-1)",
    "the deepest attention-only cell of the row's order is past the order-(k−1) in-context estimator by "
    "claims.stage_share of the gap to the order-k one: the budget taught the grid's most capable "
    "attention-only model, so a depth that does not reach the estimator is the depth's, not the budget's",
)


class MarkovICLDepthLinearConfig(GridConfig):
    depths: list[int] = [1, 2, 3, 4, 5]  # attention-only depths: room for 1 + log2(k) layers up to k = 4
    mlp_depths: list[int] = [1, 2, 3]  # MLP + LN depths (talk: 3 layers suffice)

    _d = field_validator("depths", "mlp_depths")(classmethod(lambda cls, v: depth_list(v)))

    @model_validator(mode="after")
    def _check(self) -> MarkovICLDepthLinearConfig:
        if not self.depths:
            raise ValueError("depths must list at least one attention-only depth")
        return self

    def grid(self) -> list[Cell]:
        return [("attn", k, d, 1) for k in self.ks for d in self.depths] + [
            ("mlp", k, d, 1) for k in self.ks for d in self.mlp_depths
        ]


@register
class MarkovICLDepthLinear(ICLGrid[MarkovICLDepthLinearConfig]):
    Config = MarkovICLDepthLinearConfig

    def measure(self, cfg: MarkovICLDepthLinearConfig, run: RunView) -> Measurements:
        cl = cfg.claims
        out = Measurements({"tol_nats": cl.tol_nats, "stage_share": cl.stage_share})
        cells = out.values["cells"] = self.cells(cfg, run, out)
        mins: dict[str, dict[str, dict]] = {"attn": {}, "mlp": {}}
        for family, depths in (("attn", cfg.depths), ("mlp", cfg.mlp_depths)):
            for k in cfg.ks:
                arms = [cell_arm(family, k, d) for d in depths]
                if not depths or any(a not in cells for a in arms):
                    continue
                found = min_depths({d: cells[a]["gap"] for d, a in zip(depths, arms, strict=True)}, cl.tol_nats)
                mins[family][f"k{k}"] = {"depth": found.as_optional(), "resolution": found.resolution, "found": found}
                if family != "attn":
                    continue
                deepest = cells[arms[-1]]
                for a in arms:  # the stage of every depth's arm is the deepest cell's, member by member
                    record_stage(
                        out,
                        a,
                        deepest["probe_loss"],
                        deepest["est_loss_lower_order"],
                        deepest["est_loss"],
                        cl.stage_share,
                        k,
                        DEEPEST_LEARNS,
                        source=arms[-1],
                    )
                out.row(
                    "attention-only-reaches-estimator",
                    f"k{k}",
                    Sample(deepest["gap"], drift=deepest["eval_gap_drift"]),
                    arms=[arms[-1]],
                    context={"k": k, "depth": depths[-1]},
                    label=f"k={k}: the {depths[-1]}-layer attention-only cell's gap ≤ {cl.tol_nats} nats",
                )
        for k in cfg.ks:
            hi = f"k{k}"
            mlp_arm = cell_arm("mlp", k, cl.constant_depth)
            if mlp_arm in cells:
                c = cells[mlp_arm]
                out.row(
                    "mlp-depth-stays-constant",
                    hi,
                    Sample(c["gap"], drift=c["eval_gap_drift"]),
                    arms=[mlp_arm],
                    context={"k": k, "depth": cl.constant_depth},
                    label=f"k={k}: the {cl.constant_depth}-layer MLP + LN cell's gap ≤ {cl.tol_nats} nats",
                )
            for k2 in cfg.ks:
                if k2 < 4 * k or f"k{k2}" not in mins["attn"] or hi not in mins["attn"]:
                    continue
                x, y = mins["attn"][f"k{k2}"]["found"], mins["attn"][hi]["found"]
                out.row(
                    "attention-only-depth-grows-with-k",
                    f"k{k2}-vs-k{k}",
                    Sample(x.steps, censored=x.censored, resolution=x.resolution),
                    Sample(y.steps, censored=y.censored, resolution=y.resolution),
                    arms=[cell_arm("attn", kk, d) for kk in (k, k2) for d in cfg.depths],
                    context={"k": k, "k2": k2},
                    label=f"smallest attention-only depth at k={k2} > at k={k} (paired)",
                )
        out.values["min_depth"] = {
            f: {kk: {"depth": v["depth"], "resolution": v["resolution"]} for kk, v in d.items()}
            for f, d in mins.items()
        }
        return out

    def notes(self, cfg: MarkovICLDepthLinearConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        tol = cfg.claims.tol_nats
        notes = []
        for f, d in measured.values["min_depth"].items():
            for k, v in d.items():
                notes.append(
                    f"{f}, {k}: smallest depth with gap ≤ {tol} per member: "
                    + ", ".join("not reached (censored)" if x is None else str(x) for x in v["depth"])
                )
        missing = [k for k in (3, 4) if k not in cfg.ks]
        if missing:
            notes.append(
                f"k = {', '.join(map(str, missing))} and depths beyond {max(cfg.depths)} were not run (paper profile): "
                "the k = 1..4 × depth 1..5 grid, and the k vs 4k depth comparison, are covered by the paper profile only."
            )
        return [*super().notes(cfg, measured, groups), *notes, *self.cell_notes(cfg, measured.values["cells"])]

    figures = (
        gap_heatmap(
            lambda c: f"{c['family']} L{c['depth']}",
            lambda c: f"k={c['k']}",
            "Gap to the order-k estimator, mean over members",
            "gap_table.png",
        ),
        TRAINING_GAPS,
    )
