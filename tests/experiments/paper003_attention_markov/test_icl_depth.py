"""markov-icl-depth (seed 003 Part II): every declared claim holds on the measured gaps and fails on
contradicting ones, is not resolved when members disagree or the end still moves, and not evaluable
when its cells did not run, did not train, or did not pass their stage (a reach claim needs the arm
past the order-(k−1) estimator; a 1-layer claim needs its 2-layer control past order 0); provenance
(relative PE decides k >= 2; `both` never decides); positional-encoding values map onto the model; a
tiny end-to-end run."""

from __future__ import annotations

import math
import re

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.paper003_attention_markov.icl_depth import (
    MarkovICLDepth,
    cell_arm,
    pe_model,
    probe_arm,
    provenance,
)
from tdlab.runner import execute
from tdlab.runs import RunWriter

EXP = MarkovICLDepth()
CELLS = "cells=[[1, 1, absolute], [1, 2, absolute], [2, 2, relative], [2, 3, relative], [2, 3, absolute], [2, 2, both]]"
# Estimator losses (orders 0..k) on the probe sequences, per k (T = 128): the gap between the top two
# orders is ~0.06 nats, so the stage (share 0.25) lies 0.045–0.05 nats above the order-k estimator.
EST = {1: [0.582, 0.518], 2: [0.625, 0.581, 0.518]}
STEPS = [0, 1000, 1800, 1900, 2000]
GROUPS = [
    "one-layer-does-not-reach-estimator",
    "one-layer-gap-exceeds-two-layers",
    "two-layers-reach-order-1-estimator",
    "three-layers-reach-order-k-estimator",
]


def synthetic_run(
    tmp_path,
    cfg,
    gaps: dict[str, float],
    spread: dict[str, list[float]] | None = None,
    falling: set[str] = frozenset(),
    untrained: set[str] = frozenset(),
):
    """Probe metrics with each member's gap = ``gaps[arm]`` + 0.001·member (or ``spread[arm][member]``),
    and trainer curves whose gap to ``test_loss@bayes`` ends at the same value: flat over the last 10% of
    training, or still falling by 0.05 nats there for arms in ``falling``; arms in ``untrained`` end
    above log 2."""
    with RunWriter(tmp_path, EXP.name) as w:
        w.write_config({"experiment": EXP.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for k, depth, pe in cfg.grid():
            arm = cell_arm(k, depth, pe)
            rows, train = [], []
            for m in range(cfg.members):
                gap = (spread or {}).get(arm, [gaps[arm] + 0.001 * m] * cfg.members)[m]
                rows.append((2000, m, "probe_loss", EST[k][k] + gap))
                rows += [(2000, m, f"est_loss_order{j}", v) for j, v in enumerate(EST[k])]
                for layer in range(depth):
                    rows += [(2000, m, f"match_score_layer{layer}", 0.8), (2000, m, f"match_chance_layer{layer}", 0.4)]
                for s in STEPS:
                    bayes = EST[k][k] + 0.003 * m
                    if arm in untrained:
                        loss = 0.70 if s else 0.69
                    elif s == 0:
                        loss = math.log(2)
                    else:
                        loss = bayes + gap + (0.05 * (2000 - s) / 200 if arm in falling and s >= 1800 else 0.0)
                    train += [(s, m, "test_loss", loss), (s, m, "test_loss@bayes", bayes)]
            w.add_metrics(probe_arm(arm), rows)
            w.add_metrics(arm, train)
        return w.finish()


def analyse(cfg, run):
    a = EXP.analyse(cfg, run)
    return a, {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}


# Measured gaps: 1 layer +0.03 (k = 1: past the order-0 stage, short of the estimator), 2 layers +0.004;
# k = 2: 3 layers relative +0.007, absolute +0.001; 2 layers relative-bias +0.066 (short of the order-2
# stage: a measurement, no claim), both +0.003.
FAITHFUL = {
    "k1/L1/absolute": 0.03,
    "k1/L2/absolute": 0.004,
    "k2/L2/relative": 0.066,
    "k2/L3/relative": 0.007,
    "k2/L3/absolute": 0.001,
    "k2/L2/both": 0.003,
}


def test_measured_gaps_hold_every_group(tmp_path):
    cfg = EXP.make_config("quick", [CELLS], members=3)
    a, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, FAITHFUL))
    assert [g.id for g in a.groups] == GROUPS and all(g.kind == "paper" for g in a.groups)
    assert {gid: g.verdict for gid, g in groups.items()} == dict.fromkeys(GROUPS, "holds")
    assert set(rows) == {
        "one-layer-does-not-reach-estimator/absolute",
        "one-layer-gap-exceeds-two-layers/absolute",
        "two-layers-reach-order-1-estimator/absolute",
        "three-layers-reach-order-k-estimator/k2/relative",
        "three-layers-reach-order-k-estimator/k2/absolute",
    }
    two = rows["two-layers-reach-order-1-estimator/absolute"]
    assert two.measured.values == pytest.approx([0.004, 0.005, 0.006])
    assert two.stage == "past-order-(k-1)-estimator" and two.measured.drift == pytest.approx(0.0, abs=1e-12)
    assert rows["one-layer-gap-exceeds-two-layers/absolute"].paired
    assert rows["one-layer-does-not-reach-estimator/absolute"].stage == "two-layers-past-order-0"
    # The positional encoding decides provenance: the theorem's relative PE for k >= 2, any but `both` for k = 1.
    assert rows["three-layers-reach-order-k-estimator/k2/relative"].provenance == "paper"
    assert rows["three-layers-reach-order-k-estimator/k2/absolute"].provenance == "ours"
    assert "the theorem's relative PE" in rows["three-layers-reach-order-k-estimator/k2/relative"].statement
    assert "states no PE for k = 1" in two.statement and two.provenance == "paper"
    assert [provenance(1, pe) for pe in ("absolute", "relative", "relative-kv", "both", "both-kv")] == [
        "paper",
        "paper",
        "paper",
        "ours",
        "ours",
    ]
    cells = a.measurements["cells"]
    assert cells["k2/L2/relative"]["gap_vs_lower_order"]["order1"][0] == pytest.approx(0.003)
    assert cells["k2/L2/relative"]["past_lower_order"] == [False] * 3
    assert cells["k1/L2/absolute"]["match_ratio_last_layer"] == [2.0, 2.0, 2.0]
    assert cells["k1/L2/absolute"]["eval_gap_final"] == pytest.approx([0.004, 0.005, 0.006])
    assert (
        "| 2 | 2 | — | +0.0670 ± 0.0008 (vs order-1 +0.004) | +0.0040 ± 0.0008 (vs order-1 -0.059) |"
        in a.measurements["gap_table"]
    )
    assert any("2 layers, k=2, relative PE (measured, not a claim" in n for n in a.notes)


def test_contradicting_gaps_fail_every_group(tmp_path):
    cfg = EXP.make_config("quick", [CELLS], members=3)
    # past their stages (gap < 0.048 / 0.047 above the order-k estimator) but contradicting the talk
    bad = dict(
        FAITHFUL, **{"k1/L1/absolute": 0.005, "k1/L2/absolute": 0.04, "k2/L3/relative": 0.04, "k2/L3/absolute": 0.04}
    )
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, bad))
    assert {gid: g.verdict for gid, g in groups.items()} == dict.fromkeys(GROUPS, "fails")
    assert all(r.verdict == "fails" for r in rows.values()), [r.describe() for r in rows.values()]


def test_an_arm_short_of_its_stage_is_not_evaluable_never_failing(tmp_path):
    # Every cell at its order-(k−1) plateau (the quick depth-linear runs: gap ≈ the whole order gap).
    cfg = EXP.make_config("quick", [CELLS], members=3)
    plateau = {
        "k1/L1/absolute": 0.06,
        "k1/L2/absolute": 0.06,
        "k2/L2/relative": 0.06,
        "k2/L3/relative": 0.06,
        "k2/L3/absolute": 0.06,
        "k2/L2/both": 0.06,
    }
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, plateau))
    assert {gid: g.verdict for gid, g in groups.items()} == dict.fromkeys(GROUPS, "not evaluable")
    for rid, r in rows.items():
        assert r.cause == "stage not reached" and ("order-0" in r.reason or "order-1" in r.reason), (rid, r.reason)
    # the 1-layer claim is about the depth only when its 2-layer control learned under the same budget
    assert "k1/L2/absolute's probe loss" in rows["one-layer-does-not-reach-estimator/absolute"].reason
    # one 2-layer member short of the stage is enough: every member must pass
    run = synthetic_run(tmp_path / "b", cfg, FAITHFUL, spread={"k1/L2/absolute": [0.004, 0.005, 0.06]})
    _, groups, rows = analyse(cfg, run)
    assert rows["two-layers-reach-order-1-estimator/absolute"].verdict == "not evaluable"
    assert "members [2]" in rows["two-layers-reach-order-1-estimator/absolute"].reason


def test_one_layer_as_good_as_two_fails_the_depth_comparison(tmp_path):
    cfg = EXP.make_config("quick", ["cells=[[1, 1, absolute], [1, 2, absolute]]"], members=3)
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, {"k1/L1/absolute": 0.03, "k1/L2/absolute": 0.035}))
    assert rows["one-layer-does-not-reach-estimator/absolute"].verdict == "holds"
    assert rows["one-layer-gap-exceeds-two-layers/absolute"].verdict == "fails"
    assert groups["one-layer-gap-exceeds-two-layers"].verdict == "fails"


def test_disagreeing_members_or_a_moving_end_are_not_resolved(tmp_path):
    cfg = EXP.make_config("quick", ["cells=[[1, 1, absolute], [1, 2, absolute]]"], members=3)
    # Two-layer members at 0.0, 0.02, 0.04: the mean's interval straddles the tolerance.
    run = synthetic_run(
        tmp_path / "a",
        cfg,
        {"k1/L1/absolute": 0.05, "k1/L2/absolute": 0.0},
        spread={"k1/L2/absolute": [0.0, 0.02, 0.04]},
    )
    _, _groups, rows = analyse(cfg, run)
    assert rows["two-layers-reach-order-1-estimator/absolute"].verdict == "not resolved"
    # Within tolerance at the end, but the gap still falls by 0.05 nats over the last 10%: not resolved;
    # the same for the 1-layer row (its own tolerance is 0: the drift is judged against the reach tolerance).
    run = synthetic_run(
        tmp_path / "b",
        cfg,
        {"k1/L1/absolute": 0.03, "k1/L2/absolute": 0.004},
        falling={"k1/L1/absolute", "k1/L2/absolute"},
    )
    _, _groups, rows = analyse(cfg, run)
    for rid in ("two-layers-reach-order-1-estimator/absolute", "one-layer-does-not-reach-estimator/absolute"):
        assert rows[rid].verdict == "not resolved" and "still moving" in rows[rid].reason, rows[rid].describe()
        assert rows[rid].measured.drift == pytest.approx(-0.05, rel=1e-6)


def test_cells_not_run_or_not_trained_are_not_evaluable(tmp_path):
    cfg = EXP.make_config("quick", members=3)  # the quick grid: k = 1 only
    run = synthetic_run(tmp_path, cfg, {"k1/L1/absolute": 0.03, "k1/L2/absolute": 0.004}, untrained={"k1/L2/absolute"})
    _, groups, rows = analyse(cfg, run)
    three = groups["three-layers-reach-order-k-estimator"]
    assert three.verdict == "not evaluable" and three.cause == "no rows" and "paper profile" in three.reason
    assert groups["two-layers-reach-order-1-estimator"].verdict == "not evaluable"
    assert "k1/L2/absolute not trained" in rows["two-layers-reach-order-1-estimator/absolute"].reason
    assert rows["one-layer-gap-exceeds-two-layers/absolute"].verdict == "not evaluable"
    assert EXP.trivial_error(cfg, "k1/L1/absolute") == pytest.approx(math.log(2))
    # a 1-layer cell without its 2-layer control in the run: nothing says the budget sufficed
    cfg = EXP.make_config("quick", ["cells=[[1, 1, absolute]]"], members=3)
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path / "b", cfg, {"k1/L1/absolute": 0.03}))
    r = rows["one-layer-does-not-reach-estimator/absolute"]
    assert r.verdict == "not evaluable" and "no 2-layer cell k1/L2/absolute" in r.reason


def test_quick_profile_and_positional_encoding_axis():
    cfg = EXP.make_config("quick")
    assert cfg.grid() == [(1, 1, "absolute"), (1, 2, "absolute")]
    t = cfg.train
    assert (t.steps, t.seq_len, t.batch) == (4000, 128, 64)  # the 2-layer k = 1 model converges there
    assert pe_model("relative-kv") == {"positions": "relative", "rel_encoding": "kv"}
    assert pe_model("absolute") == {"positions": "absolute", "rel_encoding": "bias"}
    m = cfg.arm_model(3, "both-kv")
    assert (m.layers, m.positions, m.rel_encoding, m.max_len) == (3, "both", "kv", 128)
    assert cfg.arm_model(2, "relative").rel_encoding == "bias"
    with pytest.raises(ConfigError, match=re.escape("model.rel_encoding")):
        EXP.make_config("quick", ["model.rel_encoding=kv"])
    assert "relative-kv" in EXP.make_config("paper").positions


def test_tiny_end_to_end_run(tmp_path):
    cfg = EXP.make_config(
        "quick",
        [
            "cells=[[1, 1, absolute], [2, 3, relative-kv]]",
            "model.d=8",
            "train.steps=3",
            "train.seq_len=16",
            "train.batch=4",
            "train.eval_every=3",
            "train.eval_batches=1",
            "probe.sequences=16",
            "probe.batch=8",
            "probe.attention_sequences=8",
            "probe.map_len=10",
        ],
        members=2,
    )
    assert cfg.model.arch == "gpt2" and cfg.train.lr == 3e-3  # profile/overrides keep the class defaults
    run = execute(EXP, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done"
    assert [g["id"] for g in s["claims"]] == GROUPS
    rows = {r["id"] for g in s["claims"] for r in g["rows"]}
    assert rows == {
        "one-layer-does-not-reach-estimator/absolute",
        "three-layers-reach-order-k-estimator/k2/relative-kv",
    }
    assert set(s["arms"]) == {"k1/L1/absolute", "k2/L3/relative-kv"}  # probe arms are not training arms
    assert run.arrays("k2/L3/relative-kv")["blocks.0.attn.rel_k"].shape == (2, 17, 8)  # key/value embeddings trained
    cells = s["measurements"]["cells"]
    assert len(cells["k2/L3/relative-kv"]["match_score_by_layer"]) == 3
    assert all((run.path / f).is_file() for f in s["figures"]) and len(s["figures"]) == 5
    m = run.metrics()
    pos = m[(m.arm == "k2/L3/relative-kv/probe") & (m.name == "pos_loss_order2")]
    assert sorted(pos.step.unique()) == list(range(16)) and len(pos) == 2 * 16
    assert not m[(m.arm == "k2/L3/relative-kv") & (m.name == "test_loss@bayes")].empty


def test_cells_on_two_lanes_give_the_numbers_of_one_lane(tmp_path):
    from tdlab.train.lanes import limited_to

    cfg = EXP.make_config(
        "quick",
        [
            "cells=[[1, 1, absolute], [1, 2, absolute]]",
            "model.d=8",
            "train.steps=6",
            "train.seq_len=16",
            "train.batch=4",
            "train.eval_every=3",
            "train.eval_batches=1",
            "probe.sequences=16",
            "probe.batch=8",
            "probe.attention_sequences=8",
            "probe.map_len=10",
        ],
        members=2,
    )
    runs = {}
    for lanes in (1, 2):
        with limited_to(lanes):
            runs[lanes] = execute(EXP, cfg, "quick", tmp_path / f"l{lanes}", progress=False)
    a, b = (runs[n].metrics().sort_values(["arm", "name", "member", "step"]).reset_index(drop=True) for n in (1, 2))
    assert len(a) > 0 and a.equals(b)  # bit for bit: every op of a cell runs serially on its lane
    assert runs[1].summary["claims"] == runs[2].summary["claims"]


def test_the_talks_hypotheses_make_rows_outside_them_ours(tmp_path):
    # k = 1 with absolute + relative ('both'), a combination the talk never uses: outside ONE_ENCODING; the
    # 3-layer absolute cell is outside RELATIVE_PE (the main result's relative positional encodings)
    cells = "cells=[[1, 1, both], [1, 2, both], [2, 3, relative], [2, 3, absolute]]"
    cfg = EXP.make_config("quick", [cells], members=3)
    gaps = {"k1/L1/both": 0.03, "k1/L2/both": 0.004, "k2/L3/relative": 0.007, "k2/L3/absolute": 0.001}
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, gaps))
    assert (
        rows["two-layers-reach-order-1-estimator/both"].outside
        and groups["two-layers-reach-order-1-estimator"].cause == "outside hypotheses"
    )
    assert rows["three-layers-reach-order-k-estimator/k2/absolute"].outside == [
        h.text for h in groups["three-layers-reach-order-k-estimator"].spec.hypotheses[:1]
    ]
    assert not rows["three-layers-reach-order-k-estimator/k2/relative"].outside
    assert groups["three-layers-reach-order-k-estimator"].verdict == "holds"
    # two heads per layer: not the main result's transformer, so no row of the 3-layer claim is the talk's
    cfg2 = EXP.make_config("quick", [cells, "model.heads=2"], members=3)
    _, groups2, _ = analyse(cfg2, synthetic_run(tmp_path / "heads", cfg2, gaps))
    g = groups2["three-layers-reach-order-k-estimator"]
    assert g.verdict == "not evaluable" and g.cause == "outside hypotheses" and "1 head per layer" in g.reason


def test_every_order_the_run_has_must_show_the_three_layer_claim(tmp_path):
    # "3-layer transformer can learn Markov chains of all orders": one relative cell short of its stage
    # leaves the group not resolved, never held on the other's strength
    cells = "cells=[[2, 3, relative], [2, 3, relative-kv]]"
    cfg = EXP.make_config("quick", [cells], members=3)
    _, groups, rows = analyse(cfg, synthetic_run(tmp_path, cfg, {"k2/L3/relative": 0.007, "k2/L3/relative-kv": 0.06}))
    assert rows["three-layers-reach-order-k-estimator/k2/relative"].verdict == "holds"
    assert rows["three-layers-reach-order-k-estimator/k2/relative-kv"].verdict == "not evaluable"
    g = groups["three-layers-reach-order-k-estimator"]
    assert (g.verdict, g.cause) == ("not resolved", "rows not evaluable")
