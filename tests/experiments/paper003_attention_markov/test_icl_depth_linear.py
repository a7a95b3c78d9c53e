"""markov-icl-depth-linear (seed 003 Part II; the smallest reaching depth per member, discrete and censored when
never reached: tests/probes/test_curves.py): every declared claim holds on planted numbers that say so and fails on
contradicting ones; an arm at its order-(k−1) plateau never fails a claim (not evaluable, the stage
named: the quick profile's 250 steps); censored or one-layer differences never give a certain
direction; cells not in the grid / not trained are not evaluable; a tiny end-to-end run."""

from __future__ import annotations

import math
import re

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.paper003_attention_markov.common.icl_grid import cell_arm
from tdlab.experiments.paper003_attention_markov.icl_depth_linear import MarkovICLDepthLinear
from tdlab.runner import execute

LIN = MarkovICLDepthLinear()
GROUPS = ["attention-only-reaches-estimator", "attention-only-depth-grows-with-k", "mlp-depth-stays-constant"]
K14 = ["ks=[1, 4]", "depths=[1, 2, 3, 4, 5]"]


def analyse(cfg, run):
    a = LIN.analyse(cfg, run)
    return {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}, a


def log_depth(levels):
    """Attention-only reaches at 2 + log2(k) layers (2 for k = 1, 4 for k = 4), at its plateau below; with
    MLPs at 2 layers for k = 1 and 3 beyond, past the stage but short of the estimator below."""

    def gap(family, k, depth, heads, m):
        need = 2 + round(math.log2(k)) if family == "attn" else (2 if k == 1 else 3)
        return (
            levels.reached if depth >= need else (levels.plateau(k) if family == "attn" else levels.past(k))
        ) + 0.001 * m

    return gap


def test_planted_log_depth_holds_every_group(make_grid_run, levels):
    cfg = LIN.make_config("quick", K14, members=6)  # six members: the fewest an exact sign test decides with
    groups, rows, a = analyse(cfg, make_grid_run(LIN, cfg, log_depth(levels)))
    assert [g.id for g in a.groups] == GROUPS
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "holds"), [
        r.describe() for r in rows.values()
    ]
    assert set(rows) == {
        "attention-only-reaches-estimator/k1",
        "attention-only-reaches-estimator/k4",
        "attention-only-depth-grows-with-k/k4-vs-k1",
        "mlp-depth-stays-constant/k1",
        "mlp-depth-stays-constant/k4",
    }
    grows = rows["attention-only-depth-grows-with-k/k4-vs-k1"]
    assert grows.measured.values == (4.0,) * 6 and grows.reference.values == (2.0,) * 6
    assert grows.measured.resolution == 1.0 and grows.paired and "sign test" in grows.reason
    assert grows.stage == "deepest-attention-only-past-order-(k-1)"
    assert rows["attention-only-reaches-estimator/k4"].arms == ("attn/k4/L5/H1",)
    assert rows["mlp-depth-stays-constant/k4"].arms == ("mlp/k4/L3/H1",)
    assert a.measurements["min_depth"]["mlp"]["k4"]["depth"] == [3] * 6
    # three members never decide the direction (2/8 = 0.25)
    cfg = LIN.make_config("quick", K14, members=3)
    _, rows, _ = analyse(cfg, make_grid_run(LIN, cfg, log_depth(levels), sub="three"))
    assert rows["attention-only-depth-grows-with-k/k4-vs-k1"].verdict == "not resolved"


def test_planted_contradictions_fail_every_group(make_grid_run, levels):
    cfg = LIN.make_config("quick", K14, members=6)

    def bad(family, k, depth, heads, m):
        # attention-only: k = 1 needs 3 layers, k = 4 only 2 (depth falls with k); its deepest k = 4 cell
        # and the 3-layer MLP at k = 4 past their stages but short of the estimator
        if family == "attn":
            if depth == 5 and k == 4:
                return levels.past(k)
            return levels.reached if depth >= (3 if k == 1 else 2) else levels.plateau(k)
        return levels.past(k) if k == 4 else (levels.reached if depth >= 2 else levels.plateau(k))

    groups, rows, _ = analyse(cfg, make_grid_run(LIN, cfg, bad))
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "fails"), [
        r.describe() for r in rows.values()
    ]
    assert rows["attention-only-reaches-estimator/k1"].verdict == "holds"
    assert rows["attention-only-depth-grows-with-k/k4-vs-k1"].p_fail == pytest.approx(2 / 64)


def test_arms_at_their_plateau_are_not_evaluable_never_failing(make_grid_run, levels):
    # The quick profile: 250 steps leave every cell at its order-(k−1) plateau (0.588 vs 0.524 nats, match at
    # chance): the budget, not the architecture, set every gap.
    cfg = LIN.make_config("quick", K14)
    groups, rows, a = analyse(cfg, make_grid_run(LIN, cfg, lambda f, k, d, h, m: levels.plateau(k) + 0.001 * m))
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "not evaluable")
    assert all(r.cause == "stage not reached" for r in rows.values())
    assert "probe loss vs order-0 estimator" in rows["attention-only-reaches-estimator/k1"].reason
    assert "attn/k4/L5/H1's probe loss" in rows["attention-only-depth-grows-with-k/k4-vs-k1"].reason
    assert any("budget, not depth or heads" in n for n in a.notes)


def test_censored_or_one_layer_differences_are_never_certain(make_grid_run, levels):
    cfg = LIN.make_config("quick", K14, members=6)
    # the deepest cells past their stage, no depth reaching at either k: every member censored at 6 on both
    # sides, "never reached within the grid" (the quick run's [4, 4, 4] vs [4, 4, 4] gave a certain "fails")
    _groups, rows, _ = analyse(cfg, make_grid_run(LIN, cfg, lambda f, k, d, h, m: levels.past(k)))
    r = rows["attention-only-depth-grows-with-k/k4-vs-k1"]
    assert r.verdict == "not resolved" and r.cause == "censored"
    assert r.measured.censored == (True,) * 6 and r.measured.values == (6.0,) * 6
    assert rows["attention-only-reaches-estimator/k1"].verdict == "fails"  # past the stage, short at depth 5

    def one_more(family, k, depth, heads, m):  # k = 4 needs 3 layers, k = 1 needs 2: one layer is the grid's step
        need = 3 if k == 4 else 2
        return levels.reached if depth >= need else levels.plateau(k)

    _, rows, _ = analyse(cfg, make_grid_run(LIN, cfg, one_more, sub="one"))
    r = rows["attention-only-depth-grows-with-k/k4-vs-k1"]
    assert r.verdict == "not resolved" and r.cause == "resolution"


def test_a_moving_end_is_not_resolved(make_grid_run, levels):
    cfg = LIN.make_config("quick", ["ks=[1, 2]"])
    run = make_grid_run(LIN, cfg, lambda f, k, d, h, m: levels.past(k) + 0.001 * m, falling={cell_arm("attn", 1, 3)})
    _, rows, _ = analyse(cfg, run)
    r = rows["attention-only-reaches-estimator/k1"]
    assert r.verdict == "not resolved" and "still moving" in r.reason


def test_missing_cells_and_untrained_arms_are_not_evaluable(make_grid_run, levels):
    cfg = LIN.make_config("quick", ["ks=[1, 2]", "mlp_depths=[1, 2]"])
    groups, rows, _ = analyse(cfg, make_grid_run(LIN, cfg, log_depth(levels), untrained={cell_arm("attn", 1, 3)}))
    # k and 2k only: one doubling is one layer, which the depth grid cannot resolve: no row
    assert groups["attention-only-depth-grows-with-k"].verdict == "not evaluable"
    assert "k' ≥ 4k" in groups["attention-only-depth-grows-with-k"].reason
    assert groups["mlp-depth-stays-constant"].verdict == "not evaluable"  # no 3-layer MLP cell
    r = rows["attention-only-reaches-estimator/k1"]
    assert r.verdict == "not evaluable" and "attn/k1/L3/H1 not trained" in r.reason


def test_configs_models_and_bad_input():
    cfg = LIN.make_config("quick")
    assert [c for c in cfg.grid() if c[0] == "attn"] == [("attn", k, d, 1) for k in (1, 2) for d in (1, 2, 3)]
    m = cfg.cell_model("attn", 3, 1)
    assert (m.layers, m.mlp, m.norm_placement, m.has_final_norm, m.positions, m.rel_encoding) == (
        3,
        False,
        "none",
        False,
        "relative",
        "kv",
    )
    m = cfg.cell_model("mlp", 2, 1)
    assert (m.mlp, m.norm_placement, m.max_len) == (True, "pre", cfg.train.seq_len)
    paper = LIN.make_config("paper")
    assert paper.ks == [1, 2, 3, 4] and paper.depths == [1, 2, 3, 4, 5]
    with pytest.raises(ConfigError, match=re.escape("model.layers")):
        LIN.make_config("quick", ["model.layers=2"])
    with pytest.raises(ConfigError, match="depths"):
        LIN.make_config("quick", ["depths=[0, 1]"])


def test_tiny_end_to_end_run(tmp_path):
    cfg = LIN.make_config(
        "quick",
        [
            "train.steps=2",
            "train.eval_every=2",
            "train.eval_batches=1",
            "train.batch=4",
            "train.seq_len=12",
            "probe.sequences=8",
            "probe.attention_sequences=4",
            "model.d=8",
            "ks=[1, 2]",
            "depths=[1, 2]",
            "mlp_depths=[1]",
        ],
        members=2,
    )
    run = execute(LIN, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done" and [g["id"] for g in s["claims"]] == GROUPS
    assert set(s["arms"]) == {
        "attn/k1/L1/H1",
        "attn/k1/L2/H1",
        "attn/k2/L1/H1",
        "attn/k2/L2/H1",
        "mlp/k1/L1/H1",
        "mlp/k2/L1/H1",
    }
    assert "blocks.1.mlp.W_1.weight" not in run.arrays("attn/k1/L2/H1")  # attention-only
    m = run.metrics()
    assert set(m[m.arm == "attn/k2/L1/H1/probe"].name) >= {
        "est_loss_order0",
        "est_loss_order1",
        "est_loss_order2",
        "probe_loss",
    }
    assert len(s["figures"]) == 2


def test_a_constant_depth_other_than_the_talks_decides_nothing(make_grid_run, levels):
    # "3 layers": with claims.constant_depth = 2 the MLP rows are ours (judged and shown, never deciding);
    # the attention-only statements do not name a depth and still decide
    cfg = LIN.make_config("quick", [*K14, "claims.constant_depth=2"], members=6)
    groups, _, _ = analyse(cfg, make_grid_run(LIN, cfg, log_depth(levels)))
    g = groups["mlp-depth-stays-constant"]
    assert (g.verdict, g.cause) == ("not evaluable", "outside hypotheses") and "3 layers" in g.reason
    assert all(r.provenance == "ours" for r in g.rows)
    assert groups["attention-only-reaches-estimator"].verdict == "holds"
