"""markov-icl-depth-linear and markov-icl-heads (seed 003 Part II): smallest reaching depth per member
(censored when never reached); every claim group holds on planted numbers that say so and fails on
contradicting ones; cells not in the grid / not trained are not evaluable; cell models are attention-only
or MLP + LN as named; tiny end-to-end runs through the runner."""

from __future__ import annotations

import math

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.markov_icl_linear import MarkovICLDepthLinear, MarkovICLHeads, cell_arm, min_depths
from tdlab.experiments.runner import execute
from tdlab.runs import RunWriter

LIN, HEADS = MarkovICLDepthLinear(), MarkovICLHeads()
LIN_GROUPS = ["attention-only-reaches-estimator", "attention-only-depth-grows-with-k", "mlp-depth-stays-constant"]
HEAD_GROUPS = ["one-head-per-layer-suffices-at-depth-3", "more-heads-not-needed-at-depth-3"]
STEPS = [0, 100, 180, 190, 200]


def test_min_depths_per_member_and_censoring():
    gaps = {1: [0.1, 0.01, 0.2], 2: [0.015, 0.03, 0.2], 3: [0.001, 0.0, 0.05]}
    assert min_depths(gaps, 0.02) == [2, 1, 4]  # member 2 never reaches: max depth + 1


def synthetic_run(tmp_path, exp, cfg, gap_of, untrained: set[str] = frozenset(), falling: set[str] = frozenset()):
    """Every cell of the grid with member gaps ``gap_of(family, k, depth, heads, member)``; trainer curves
    ending at the same gap (still falling by 0.05 over the last 10% for arms in ``falling``); arms in
    ``untrained`` end above log 2."""
    with RunWriter(tmp_path, exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for family, k, depth, heads in cfg.grid():
            arm = cell_arm(family, k, depth, heads)
            rows, train = [], []
            for m in range(cfg.members):
                gap = gap_of(family, k, depth, heads, m)
                rows += [(200, m, "probe_loss", 0.5 + gap), (200, m, "est_loss", 0.5), (200, m, "match_score_last", 0.7),
                         (200, m, "match_chance_last", 0.4)]
                for s in STEPS:
                    if arm in untrained:
                        loss = 0.70 if s else 0.69
                    elif s == 0:
                        loss = math.log(2)
                    else:
                        loss = 0.5 + gap + (0.05 * (200 - s) / 20 if arm in falling and s >= 180 else 0.0)
                    train += [(s, m, "test_loss", loss), (s, m, "test_loss@bayes", 0.5)]
            w.add_metrics(f"{arm}/probe", rows)
            w.add_metrics(arm, train)
        return w.finish()


def analyse(exp, cfg, run):
    a = exp.analyse(cfg, run)
    a.gate(exp.health(cfg, run))
    return {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}, a


def log_depth(family, k, depth, heads, m):
    """Attention-only reaches at depth 1 + ceil(log2 k) + 1 (2 for k = 1, 3 for k = 2, 4 for k = 4); with
    MLPs at 2 for k = 1 and 3 beyond; tiny member spread."""
    need = 2 + math.ceil(math.log2(k)) if family == "attn" else (2 if k == 1 else 3)
    return (0.005 if depth >= need else 0.06) + 0.001 * m


def test_linear_planted_log_depth_holds_every_group(tmp_path):
    cfg = LIN.make_config("quick", ["ks=[1, 2, 4]", "depths=[1, 2, 3, 4, 5]"])
    groups, rows, a = analyse(LIN, cfg, synthetic_run(tmp_path, LIN, cfg, log_depth))
    assert [g.id for g in a.groups] == LIN_GROUPS
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(LIN_GROUPS, "holds")
    assert set(rows) == {"attention-only-reaches-estimator/k1", "attention-only-reaches-estimator/k2",
                         "attention-only-reaches-estimator/k4", "attention-only-depth-grows-with-k/k2-vs-k1",
                         "attention-only-depth-grows-with-k/k4-vs-k2", "mlp-depth-stays-constant/k1",
                         "mlp-depth-stays-constant/k2", "mlp-depth-stays-constant/k4"}
    assert rows["attention-only-reaches-estimator/k4"].measured == [4, 4, 4]
    assert rows["attention-only-depth-grows-with-k/k4-vs-k2"].paired
    assert a.measurements["min_depth"]["mlp"] == {"k1": [2, 2, 2], "k2": [3, 3, 3], "k4": [3, 3, 3]}


def test_linear_planted_contradictions_fail_every_group(tmp_path):
    cfg = LIN.make_config("quick", ["ks=[1, 2]"])

    def flat(family, k, depth, heads, m):  # attention-only: depth 2 suffices for both k; MLP needs 4 at k = 2
        if family == "attn":
            return 0.005 if depth >= 2 else 0.06
        return 0.06 if k == 2 else (0.005 if depth >= 2 else 0.06)

    groups, rows, _ = analyse(LIN, cfg, synthetic_run(tmp_path, LIN, cfg, flat))
    assert rows["attention-only-depth-grows-with-k/k2-vs-k1"].verdict == "fails"
    assert rows["mlp-depth-stays-constant/k2"].verdict == "fails"
    assert rows["attention-only-reaches-estimator/k1"].verdict == "holds"

    def never(family, k, depth, heads, m):  # attention-only never reaches at k = 2
        return 0.06 if family == "attn" and k == 2 else 0.005
    groups, rows, _ = analyse(LIN, cfg, synthetic_run(tmp_path / "b", LIN, cfg, never))
    assert rows["attention-only-reaches-estimator/k2"].verdict == "fails"
    assert rows["attention-only-depth-grows-with-k/k2-vs-k1"].verdict == "holds"  # censored at 4 > 1: a lower bound


def test_linear_censored_smaller_k_or_moving_end_is_not_resolved(tmp_path):
    cfg = LIN.make_config("quick", ["ks=[1, 2]"])
    groups, rows, a = analyse(LIN, cfg, synthetic_run(tmp_path, LIN, cfg, lambda f, k, d, h, m: 0.06))
    row = rows["attention-only-depth-grows-with-k/k2-vs-k1"]
    assert row.verdict == "not resolved" and "no lower bound" in row.reason
    assert any("training budget" in n for n in a.notes)  # nothing reached, not even the MLP reference
    # Not reached, but the deepest cell's gap still falls by 0.05 over the last 10%: not resolved.
    groups, rows, _ = analyse(LIN, cfg, synthetic_run(tmp_path / "b", LIN, cfg, lambda f, k, d, h, m: 0.06,
                                                      falling={cell_arm("attn", 1, 3)}))
    r = rows["attention-only-reaches-estimator/k1"]
    assert r.verdict == "not resolved" and "still moving" in r.reason


def test_linear_missing_cells_and_untrained_arms_are_not_evaluable(tmp_path):
    cfg = LIN.make_config("quick", ["ks=[1]", "mlp_depths=[]"])
    groups, rows, _ = analyse(LIN, cfg, synthetic_run(tmp_path, LIN, cfg, log_depth, untrained={cell_arm("attn", 1, 2)}))
    assert rows["attention-only-depth-grows-with-k/not-in-grid"].verdict == "not evaluable"
    assert rows["mlp-depth-stays-constant/not-in-grid"].verdict == "not evaluable"
    r = rows["attention-only-reaches-estimator/k1"]
    assert r.verdict == "not evaluable" and "attn/k1/L2/H1 not trained" in r.reason


def test_heads_planted_numbers_hold_and_fail(tmp_path):
    cfg = HEADS.make_config("quick", ["heads=[1, 2, 4]"])

    def good(family, k, depth, heads, m):
        return (0.005 if depth == 3 else 0.05 / heads) + 0.001 * m

    groups, rows, a = analyse(HEADS, cfg, synthetic_run(tmp_path, HEADS, cfg, good))
    assert [g.id for g in a.groups] == HEAD_GROUPS
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(HEAD_GROUPS, "holds")
    assert any("depth 2, k=1 (measured, not a claim" in n for n in a.notes)

    def bad(family, k, depth, heads, m):  # one head per layer stuck at depth 3; four heads reach
        return 0.06 + 0.001 * m if heads == 1 else 0.005
    groups, rows, _ = analyse(HEADS, cfg, synthetic_run(tmp_path / "b", HEADS, cfg, bad))
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(HEAD_GROUPS, "fails")


def test_configs_models_and_bad_input():
    cfg = LIN.make_config("quick")
    assert [c for c in cfg.grid() if c[0] == "attn"] == [("attn", k, d, 1) for k in (1, 2) for d in (1, 2, 3)]
    m = cfg.cell_model("attn", 3, 1)
    assert (m.layers, m.mlp, m.norm_placement, m.has_final_norm, m.positions, m.rel_encoding) == (3, False, "none", False, "relative", "kv")
    m = cfg.cell_model("mlp", 2, 1)
    assert (m.mlp, m.norm_placement, m.max_len) == (True, "pre", cfg.train.seq_len)
    assert LIN.make_config("paper").ks == [1, 2, 3, 4] and LIN.make_config("paper").depths == [1, 2, 3, 4, 5]
    assert HEADS.make_config("paper").heads == [1, 2, 4]
    with pytest.raises(ConfigError, match="heads"):
        HEADS.make_config("quick", ["heads=[1, 3]"])
    with pytest.raises(ConfigError, match="model.layers"):
        LIN.make_config("quick", ["model.layers=2"])
    with pytest.raises(ConfigError, match="depths"):
        LIN.make_config("quick", ["depths=[0, 1]"])


TINY = ["train.steps=2", "train.eval_every=2", "train.eval_batches=1", "train.batch=4", "train.seq_len=12",
        "probe.sequences=8", "probe.attention_sequences=4", "model.d=8"]


def test_tiny_end_to_end_runs(tmp_path):
    cfg = LIN.make_config("quick", TINY + ["ks=[1, 2]", "depths=[1, 2]", "mlp_depths=[1]"], members=2)
    run = execute(LIN, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done" and [g["id"] for g in s["claims"]] == LIN_GROUPS
    assert set(s["arms"]) == {"attn/k1/L1/H1", "attn/k1/L2/H1", "attn/k2/L1/H1", "attn/k2/L2/H1", "mlp/k1/L1/H1", "mlp/k2/L1/H1"}
    assert "blocks.1.mlp.W_1.weight" not in run.arrays("attn/k1/L2/H1")  # attention-only
    assert len(s["figures"]) == 2
    cfg = HEADS.make_config("quick", TINY + ["ks=[1]", "depths=[3]", "heads=[1, 2]"], members=2)
    run = execute(HEADS, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done" and [g["id"] for g in s["claims"]] == HEAD_GROUPS
    assert run.arrays("mlp/k1/L3/H2")["blocks.2.attn.rel_k"].shape == (2, 17, 4)  # 2 heads of width 4
