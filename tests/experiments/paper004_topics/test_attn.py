"""topics-attn: W^V classes on planted (u, z); Tables 3-4's claims on synthetic stored runs with planted
attention averages -- the paper's own rows hold, a planted violation of each claim fails (below Table 3's
uncalibrated 1.2 margin: not resolved), a setting without a member of the table's pattern is outside its
hypothesis, members short of the gap-closed stage are not evaluable (an untrained member of another class holds
nothing back, an untrained table setting leaves the table open), settings outside the tables are ours; a tiny
training run through the runner ends with verdicts and uniform attention at init."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.config import ConfigError
from tdlab.experiments.paper004_topics.attn import (
    TABLE3,
    TABLE4,
    AttnClaims,
    TopicsAttn,
    classify,
    member_lrs,
    setting_name,
)
from tdlab.run_view import RunView
from tdlab.runner import execute
from tdlab.runs import RunWriter
from tdlab.theory.topics import c3

GROUPS = [
    "table3-same-topic-over-different-topic",
    "table3-thm3-topic-average-above-different-topic",
    "table4-same-word-then-different-topic-then-same-topic",
    "table4-thm5-same-topic-over-same-word-below-lambda5",
]
BLOCK = (0.9, 20.0)  # (u, z) of a block-wise W^V
DIAG = (0.05, 8.0)  # of a diagonal one
TRAINED, UNTRAINED = 3.5, 4.5  # final test losses: past the gap-closed stage (bound 3.88) or not


def test_classify_planted_patterns():
    u = np.array([0.9, 0.5, 0.49, 0.2, 0.21, -0.1, 0.9, np.nan])
    z = np.array([5.0, 3.0, 4.0, 4.0, 4.0, 10.0, 2.9, 10.0])
    assert classify(u, z).tolist() == [
        "block",
        "block",
        "mixed",
        "diagonal",
        "mixed",
        "diagonal",
        "unstructured",
        "unstructured",
    ]
    assert classify(u[:1], z[:1], AttnClaims(u_block=0.95)).tolist() == ["mixed"]
    with pytest.raises(ValueError, match="u_diag"):
        AttnClaims(u_diag=0.6, u_block=0.5)


def _config(**kw):
    return TopicsAttn().make_config("quick", [f"{k}={v}" for k, v in kw.items()], members=2)


def _synthetic_run(tmp_path, tag, planted, lrs=None):
    """A stored run (nothing trained): ``planted[(setting, member_within_setting)] = (u, z, a_sw, a_st, a_dt[, loss])``;
    members not listed are unstructured with uniform attention (trained)."""
    exp = TopicsAttn()
    cfg = _config(table4_seeds=4, **(lrs or {}))
    with RunWriter(tmp_path / "synthetic", exp.name, run_id=f"synthetic-{tag}") as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm in exp.arms(cfg):
            lrs_ = member_lrs(cfg, arm)
            rows = []
            for m, lr in enumerate(lrs_):
                k = m - lrs_.index(lr)
                u, z, sw, st, dt, *loss = planted.get((setting_name(arm, lr), k), (0.9, 1.0, 0.01, 0.01, 0.01))
                for step, vals in ((0, (0.5, 0.1, 0.01, 0.01, 0.01)), (100, (u, z, sw, st, dt))):
                    names = ("wv_u", "wv_z", "attn_sw", "attn_st", "attn_dt")
                    rows += [(step, m, n, float(x)) for n, x in zip(names, vals, strict=True)]
                rows += [(0, m, "test_loss", 4.62), (100, m, "test_loss", loss[0] if loss else TRAINED)]
            w.add_metrics(arm, rows)
        run = w.finish()
    return exp, cfg, RunView(run)


def _paper_plants(jitter=0.02):
    """Every Table 3 setting: two block members with its means; Table 4's settings: two diagonal members more."""
    out = {}
    for name, row in TABLE3.items():
        for k in range(2):
            f = 1 + jitter * (k - 0.5)
            out[(name, k)] = (*BLOCK, row["a_sw"][0] * f, row["a_st"][0] * f, row["a_dt"][0])
    for name, row in TABLE4.items():
        for k in (2, 3):
            f = 1 + jitter * (k - 2.5)
            out[(name, k)] = (*DIAG, row["a_sw"][0] * f, row["a_st"][0] * f, row["a_dt"][0])
    return out


def _verdicts(a):
    return {g.id: g.verdict for g in a.groups}


def _rows(a):
    return {r.id: r for g in a.groups for r in g.rows}


def test_the_papers_rows_hold(tmp_path):
    exp, cfg, run = _synthetic_run(tmp_path, "paper", _paper_plants())
    a = exp.analyse(cfg, run)
    assert [g.id for g in a.paper] == GROUPS
    assert set(_verdicts(a).values()) == {"holds"}, _verdicts(a)
    rows = _rows(a)
    assert rows[f"{GROUPS[0]}/adam/lr0.03"].measured.values == pytest.approx(
        [0.0116 * f / 0.00665 for f in (0.99, 1.01)]
    )
    assert rows[f"{GROUPS[3]}/adam/lr0.003"].expected == pytest.approx(c3(0.15, 0.1) / 9)
    assert rows[f"{GROUPS[3]}/adam/lr0.003"].measured.values == pytest.approx([0.00185 / 0.0916] * 2)
    assert rows[f"{GROUPS[0]}/adam/lr0.03"].arms == ("adam/lr0.03/block",)  # gated on its block members only
    assert all(r.provenance == "paper" and r.stage == "gap-closed" for r in rows.values())
    m = a.measurements["adam/lr0.003"]
    assert m["classes"] == {"block": 2, "diagonal": 2, "mixed": 0, "unstructured": 0}
    assert m["block_mean"]["a_st"] == pytest.approx(0.0108)
    assert m["paper_table3"]["a_st"] == {"mean": 0.0108, "std": 0.000657}
    assert m["paper_table4"]["a_sw"]["mean"] == pytest.approx(0.0916)
    # SGD settings have no diagonal member and are not Table 4 rows: no diagonal row for them
    assert f"{GROUPS[2]}/sgd/lr0.01" not in rows


def test_each_claim_fails_on_a_planted_violation_and_the_uncalibrated_margin_does_not(tmp_path, at_paper_length):
    at_paper_length(TopicsAttn)
    plants = _paper_plants(jitter=0.0)
    d = 1e-7  # a member-to-member spread small enough that every violation survives Holm's correction
    for k in range(2):
        plants[("adam/lr0.01", k)] = (*BLOCK, 0.008, 0.0110 + d * k, 0.010)  # a_st/a_dt 1.1 < 1.2; Thm. 3's 1.07 > 1
        plants[("sgd/lr0.03", k)] = (*BLOCK, 0.005, 0.007 + d * k, 0.010)  # a_st < a_dt: both Table 3 claims fail
    for k in (2, 3):
        plants[("adam/lr0.003", k)] = (*DIAG, 0.09, 0.003 + d * k, 0.002)  # a_dt < a_st: order fails; a_st/a_sw ok
        plants[("adam/lr0.01", k)] = (*DIAG, 0.05, 0.010 + d * k, 0.012)  # order holds, a_st/a_sw = 0.2 > λ5 = 0.128
    exp, cfg, run = _synthetic_run(tmp_path, "violated", plants)
    a = exp.analyse(cfg, run)
    rows = _rows(a)
    # Table 3's 1.2 is a margin of ours that nothing calibrates: below it is "not resolved", never a failure, even
    # under the paper's direction (sgd/lr0.03: a_st < a_dt); the Thm. 3 claim (the paper's direction) fails there.
    assert _verdicts(a) == {GROUPS[0]: "not resolved", GROUPS[1]: "fails", GROUPS[2]: "fails", GROUPS[3]: "fails"}
    for setting in ("adam/lr0.01", "sgd/lr0.03"):
        r = rows[f"{GROUPS[0]}/{setting}"]
        assert (r.verdict, r.cause) == ("not resolved", "uncalibrated threshold")
    assert rows[f"{GROUPS[1]}/adam/lr0.01"].verdict == "holds"
    assert rows[f"{GROUPS[1]}/sgd/lr0.03"].verdict == "fails"
    assert rows[f"{GROUPS[0]}/adam/lr0.003"].verdict == "holds"
    assert rows[f"{GROUPS[2]}/adam/lr0.003"].verdict == "fails" and rows[f"{GROUPS[3]}/adam/lr0.003"].verdict == "holds"
    assert rows[f"{GROUPS[2]}/adam/lr0.01"].verdict == "holds" and rows[f"{GROUPS[3]}/adam/lr0.01"].verdict == "fails"


def test_no_diagonal_member_is_not_evaluable_not_a_failure(tmp_path):
    plants = {k: v for k, v in _paper_plants().items() if k[1] < 2}
    plants[("adam/lr0.003", 2)] = (0.35, 9.0, 0.01, 0.012, 0.009)  # mixed: judged by neither table
    exp, cfg, run = _synthetic_run(tmp_path, "nodiag", plants)
    a = exp.analyse(cfg, run)
    v = _verdicts(a)
    assert v[GROUPS[0]] == v[GROUPS[1]] == "holds"
    assert v[GROUPS[2]] == v[GROUPS[3]] == "not evaluable"
    # Table 4 speaks of runs whose W^V converged to the diagonal: a setting without one is outside it
    assert {a.result(g).cause for g in GROUPS[2:]} == {"outside hypotheses"}
    rows = _rows(a)
    assert [r for r in rows if r.startswith(GROUPS[2])] == [f"{GROUPS[2]}/adam/lr0.003", f"{GROUPS[2]}/adam/lr0.01"]
    empty = rows[f"{GROUPS[2]}/adam/lr0.01"]
    assert empty.measured.values == () and empty.verdict == "not evaluable" and empty.provenance == "ours"
    assert rows[f"{GROUPS[0]}/adam/lr0.003"].measured.values == pytest.approx(
        [0.0108 * f / 0.00689 for f in (0.99, 1.01)]
    )
    assert a.measurements["adam/lr0.003"]["classes"]["mixed"] == 1  # judged by neither table


def test_members_short_of_the_stage_are_not_evaluable_and_hold_nothing_else_back(tmp_path):
    plants = _paper_plants()
    for k in range(2):  # adam/lr0.01's block members stopped at 4.5 nats: 6 % of the way to the Bayes floor
        plants[("adam/lr0.01", k)] = (*plants[("adam/lr0.01", k)], UNTRAINED)
    plants[("adam/lr0.03", 1)] = (0.9, 1.0, 0.01, 0.01, 0.01, 4.7)  # an unstructured member that never learnt
    exp, cfg, run = _synthetic_run(tmp_path, "stage", plants)
    a = exp.analyse(cfg, run)
    rows = _rows(a)
    r = rows[f"{GROUPS[0]}/adam/lr0.01"]
    assert r.verdict == "not evaluable" and r.cause == "stage not reached" and "4.5 vs 3.751" in r.reason
    # Table 3's claims cover every one of its settings: one that did not train leaves them open (here also
    # adam/lr0.03, judged on its one block member left)
    assert {a.result(g).verdict for g in GROUPS[:2]} == {"not resolved"}
    assert rows[f"{GROUPS[2]}/adam/lr0.01"].verdict == "holds"  # the setting's diagonal members trained
    assert rows[f"{GROUPS[0]}/adam/lr0.03"].verdict in ("holds", "not resolved")  # one block member left: judged
    assert rows[f"{GROUPS[0]}/adam/lr0.03"].cause != "not trained"


def test_a_table_setting_that_did_not_train_leaves_its_table_open_and_one_without_the_pattern_is_ours(tmp_path):
    plants = _paper_plants()
    for k in range(2):  # sgd/lr0.03's block members barely moved (the paper's trained): every other row holds
        plants[("sgd/lr0.03", k)] = (*plants[("sgd/lr0.03", k)], UNTRAINED)
    exp, cfg, run = _synthetic_run(tmp_path / "a", "untrained", plants)
    a = exp.analyse(cfg, run)
    for g in GROUPS[:2]:
        assert (a.result(g).verdict, a.result(g).cause) == ("not resolved", "rows not evaluable")
    assert {_verdicts(a)[g] for g in GROUPS[2:]} == {"holds"}
    # no block member at all in sgd/lr0.03 (the W^V pattern Table 3 is about never formed): outside, ours
    plants = {k: v for k, v in _paper_plants().items() if k[0] != "sgd/lr0.03"}
    exp, cfg, run = _synthetic_run(tmp_path / "b", "nopattern", plants)
    a = exp.analyse(cfg, run)
    row = _rows(a)[f"{GROUPS[0]}/sgd/lr0.03"]
    assert row.provenance == "ours" and row.outside and row.measured.values == ()
    assert {_verdicts(a)[g] for g in GROUPS} == {"holds"}


def test_settings_outside_the_tables_are_ours(tmp_path, at_paper_length):
    at_paper_length(TopicsAttn)
    plants = _paper_plants()
    for k in range(2):
        plants[("adam/lr0.02", k)] = (*BLOCK, 0.005, 0.005, 0.010)  # fails, but no table row: never deciding
    exp, cfg, run = _synthetic_run(tmp_path, "ours", plants, lrs={"adam_lrs": "[0.003,0.01,0.02,0.03]"})
    a = exp.analyse(cfg, run)
    row = _rows(a)[f"{GROUPS[1]}/adam/lr0.02"]
    assert row.provenance == "ours" and row.verdict == "fails"
    assert a.result(GROUPS[1]).verdict == a.result(GROUPS[0]).verdict == "holds"


def test_tiny_run_through_the_runner_ends_with_verdicts(tmp_path):
    exp = TopicsAttn()
    cfg = exp.make_config(
        "quick",
        [
            "train.steps=6",
            "train.eval_every=3",
            "train.batch=2",
            "train.eval_batches=1",
            "table4_seeds=2",
            "heldout_docs=6",
            "heldout_chunk=4",
            "sgd_lrs=[0.03]",
        ],
        members=1,
    )
    r = execute(exp, cfg, "quick", tmp_path, progress=False)
    s = r.summary
    assert s["status"] == "done"
    assert [g["id"] for g in s["claims"]] == GROUPS
    assert all(g["verdict"] in ("holds", "fails", "not resolved", "not evaluable") for g in s["claims"])
    df = r.metrics()
    att = df[df["name"].isin(["attn_sw", "attn_st", "attn_dt"])]
    assert sorted(att["step"].unique()) == [0, 6]  # before the first step and at the end
    assert len(att[(att["arm"] == "adam") & (att["step"] == 0)]) == 3 * 5  # 2 + 2 + 1 Adam members
    # N(0, 0.02²) init: scores ~1e-4, attention uniform over the 100 kept tokens: every average ≈ 1/100
    np.testing.assert_allclose(att[att["step"] == 0]["value"], 0.01, rtol=1e-2)
    for f in ("tables3_4_attention.png", "wv_classes.png"):
        assert (r.path / "figures" / f).stat().st_size > 5000


@pytest.mark.parametrize(
    "override, field",
    [
        (["table4_lrs=[0.02]"], "table4_lrs"),
        (["adam_lrs=[]", "sgd_lrs=[]", "table4_lrs=[]"], "adam_lrs"),
        (["model.onehot=false"], "model"),
        (["claims.u_diag=0.7"], "u_diag"),
        (["heldout_docs=0"], "heldout_docs"),
    ],
)
def test_bad_config_is_refused(override, field):
    with pytest.raises(ConfigError, match=field):
        TopicsAttn().make_config("quick", override)


def test_uniform_blocks_with_weak_contrast_are_reported_not_judged(tmp_path):
    plants = {k: v for k, v in _paper_plants().items() if k[1] < 2}
    plants[("adam/lr0.01", 0)] = (0.99, 2.5, 0.012, 0.015, 0.0045)  # u ≈ 1 but z < 3
    exp, cfg, run = _synthetic_run(tmp_path, "weak", plants)
    a = exp.analyse(cfg, run)
    assert _rows(a)[f"{GROUPS[0]}/adam/lr0.01"].measured.values == pytest.approx([0.010 * 1.01 / 0.00707])  # member 1
    assert a.measurements["adam/lr0.01"]["classes"]["unstructured"] == 3  # the weak one and the two unplanted ones
    [note] = [n for n in a.notes if "weak contrast" in n and n.startswith("adam/lr0.01:")]
    assert "3 member(s)" in note and "z = 2.50, 1.00, 1.00" in note and "a_st / a_dt = 3.33, 1.00, 1.00" in note
