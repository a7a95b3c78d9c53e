"""markov-icl-heads (seed 003 Part II): both declared claims hold on planted numbers that say so and
fail on contradicting ones; a 1-head cell at its order-(k−1) plateau is not evaluable, never failing
(the quick profile's 200 steps); depth-2 cells are notes, not claims; a tiny end-to-end run."""

from __future__ import annotations

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.paper003_attention_markov.icl_heads import MarkovICLHeads
from tdlab.report.measurement_tables import format_cell, measurement_tables
from tdlab.runner import execute

HEADS = MarkovICLHeads()
GROUPS = ["one-head-per-layer-suffices-at-depth-3", "more-heads-not-needed-at-depth-3"]


def analyse(cfg, run):
    a = HEADS.analyse(cfg, run)
    return {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}, a


def test_planted_numbers_hold_and_fail(make_grid_run, levels):
    cfg = HEADS.make_config("quick", ["heads=[1, 2, 4]"])

    def good(family, k, depth, heads, m):  # depth 3 reaches with any head count; depth 2 improves with heads
        return (levels.reached if depth == 3 else levels.past(k) / heads) + 0.001 * m

    groups, rows, a = analyse(cfg, make_grid_run(HEADS, cfg, good))
    assert [g.id for g in a.groups] == GROUPS
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "holds")
    assert set(rows) == {f"{g}/k{k}" for g in GROUPS for k in (1, 2)}
    assert rows["more-heads-not-needed-at-depth-3/k2"].arms == ("mlp/k2/L3/H1", "mlp/k2/L3/H4")
    assert rows["more-heads-not-needed-at-depth-3/k2"].measured.values == pytest.approx([0.0] * 3, abs=1e-12)
    assert any("depth 2 (measured, not a claim" in n for n in a.notes)
    # the mean gaps by heads are a table, (k, depth) × heads, no longer a note per (k, depth)
    assert not any("mean gap by heads" in n for n in a.notes)
    cells = a.measurements["cells"]
    (table,) = [t for t in measurement_tables(a.measurements)[0] if t.title == "gap_mean_by_heads"]
    assert table.columns == ("H=1", "H=2", "H=4")
    assert table.rows == [
        (f"k{k}/L{d}", [format_cell(cells[f"mlp/k{k}/L{d}/H{h}"]["gap_mean"]) for h in (1, 2, 4)])
        for k in (1, 2)
        for d in (2, 3)
    ]

    def bad(family, k, depth, heads, m):  # one head per layer past its stage but short; four heads reach
        return levels.past(k) + 0.001 * m if heads == 1 else levels.reached

    groups, rows, _ = analyse(cfg, make_grid_run(HEADS, cfg, bad, sub="bad"))
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "fails")


def test_a_one_head_cell_at_its_plateau_is_not_evaluable(make_grid_run, levels):
    cfg = HEADS.make_config("quick")

    def plateau(family, k, depth, heads, m):  # the quick run: every cell still counting (k−1)-contexts
        return levels.plateau(k) + 0.001 * m

    groups, rows, a = analyse(cfg, make_grid_run(HEADS, cfg, plateau))
    assert {g: v.verdict for g, v in groups.items()} == dict.fromkeys(GROUPS, "not evaluable")
    assert all(r.cause == "stage not reached" for r in rows.values())
    assert any("budget, not depth or heads" in n for n in a.notes)

    def one_head_behind(family, k, depth, heads, m):  # four heads reach, one head still at the plateau
        return levels.plateau(k) if heads == 1 else levels.reached

    groups, rows, _ = analyse(cfg, make_grid_run(HEADS, cfg, one_head_behind, sub="behind"))
    r = rows["more-heads-not-needed-at-depth-3/k1"]
    assert r.verdict == "not evaluable" and "mlp/k1/L3/H1 members [0, 1, 2]" in r.reason


def test_configs_and_bad_input():
    assert HEADS.make_config("paper").heads == [1, 2, 4]
    with pytest.raises(ConfigError, match="heads"):
        HEADS.make_config("quick", ["heads=[1, 3]"])
    assert HEADS.make_config("quick").grid()[:2] == [("mlp", 1, 2, 1), ("mlp", 1, 2, 4)]


def test_tiny_end_to_end_run(tmp_path):
    cfg = HEADS.make_config(
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
            "ks=[1]",
            "depths=[3]",
            "heads=[1, 2]",
        ],
        members=2,
    )
    run = execute(HEADS, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done" and [g["id"] for g in s["claims"]] == GROUPS
    assert run.arrays("mlp/k1/L3/H2")["blocks.2.attn.rel_k"].shape == (2, 17, 4)  # 2 heads of width 4


def test_a_depth_or_encoding_other_than_the_talks_decides_nothing(make_grid_run, levels):
    # the main result's "3 layers" and "relative positional encodings": another constant depth or absolute
    # positions put every row outside the statement's hypotheses (ours, never deciding)
    def good(family, k, depth, heads, m):
        return levels.reached + 0.001 * m

    for override, text in (
        ("claims.constant_depth=2", "3 layers"),
        ("model.positions=absolute", "relative positional"),
    ):
        cfg = HEADS.make_config("quick", [override])
        groups, rows, _ = analyse(cfg, make_grid_run(HEADS, cfg, good, sub=override))
        for g in groups.values():
            assert (g.verdict, g.cause) == ("not evaluable", "outside hypotheses") and text in g.reason
        assert all(r.provenance == "ours" and r.verdict == "holds" for r in rows.values())


def test_every_order_must_show_one_head_suffices(make_grid_run, levels):
    # "any order k": k = 1 reaches, k = 2 still at its plateau (not evaluable): the group is not held
    cfg = HEADS.make_config("quick")

    def k2_behind(family, k, depth, heads, m):
        return levels.reached if k == 1 else levels.plateau(k)

    groups, rows, _ = analyse(cfg, make_grid_run(HEADS, cfg, k2_behind))
    assert rows["one-head-per-layer-suffices-at-depth-3/k1"].verdict == "holds"
    g = groups["one-head-per-layer-suffices-at-depth-3"]
    assert (g.verdict, g.cause) == ("not resolved", "rows not evaluable")
