"""markov-bridge: the predicted basin follows p + q through the theory functions (Thms. 2/8, App. G);
the two claim groups (p+q<1 ends at the entropy rate, p+q>1 stays at H(π)), their rows per (p, q,
budget), member classes, the table and the disagreement notes are computed from stored metrics
(synthetic run directories whose final losses and same-batch reference losses the test chooses); a
p+q<1 member still on the H(π) plateau is not evaluable, never failing; an undecided p+q>1 row says
how many members are each beyond the tolerance; one tiny end-to-end run."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import tdlab.experiments.paper000_local_to_global.bridge as mb
from tdlab.claims import Row, Sample
from tdlab.config import ConfigError
from tdlab.experiments.paper000_local_to_global.bridge import MarkovBridge, cell_arm, classify_losses, predict_cell
from tdlab.experiments.paper000_local_to_global.common.hypotheses import BELOW_LINE_ROW
from tdlab.runner import execute, rebuild
from tdlab.runs import Run, RunWriter
from tdlab.theory.markov_landscape import CriticalKind, basins, gaussian_basin_probability


def _h(x: float) -> float:
    return -x * math.log(x) - (1 - x) * math.log(1 - x)


def chain_truth(p: float, q: float) -> tuple[float, float]:
    """(entropy rate, H(pi)) from first principles, independently of tdlab."""
    pi1 = p / (p + q)
    return (1 - pi1) * _h(p) + pi1 * _h(q), _h(pi1)


STEPS = [0, 100, 200, 300]
ABOVE = [(0.5, 0.8), (0.7, 0.9)]  # p + q > 1: Thm. 2
BELOW = [(0.2, 0.3), (0.1, 0.4)]  # p + q < 1: Thm. 8
GRID = BELOW + ABOVE
BUDGETS = [8000, 16000]  # Table 2's horizon and beyond: the p+q>1 claim reads rows trained at least that long
B0, B1 = BUDGETS
G_BELOW, G_ABOVE = "below-line-ends-at-entropy-rate", "above-line-stays-at-H(pi)"


def _grid_set(grid: Sequence[tuple[float, float]]) -> str:
    return "grid=[" + ", ".join(f"[{p}, {q}]" for p, q in grid) + "]"


@pytest.fixture
def make_bridge_run(tmp_path: Path):
    """``make(curves, grid=GRID, budgets=BUDGETS, overrides=(), members=3, refs=None, with_refs=True) -> (cfg, run_dir)``.

    ``curves(p, q, budget)`` returns one test-loss curve per member over ``STEPS`` (values are
    written as they are: nothing is trained). ``refs(p, q, budget)`` returns the (Bayes, unigram)
    losses on the evaluation batches (default: the population values); ``with_refs=False`` leaves them
    out, as in runs made before the trainer recorded them."""
    counter = iter(range(10_000))

    def make(
        curves, grid=GRID, budgets=BUDGETS, overrides: Sequence[str] = (), members: int = 3, refs=None, with_refs=True
    ):
        exp = MarkovBridge()
        sets = [_grid_set(grid), f"budgets={list(budgets)}", *overrides]
        cfg = exp.make_config("quick", sets, members=members)
        with RunWriter(tmp_path / "synthetic", exp.name, run_id=f"synthetic-{next(counter)}") as w:
            w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
            for p, q in grid:
                for b in budgets:
                    member_curves = curves(p, q, b)
                    assert len(member_curves) == members
                    rows = [
                        (s, m, "test_loss", float(v))
                        for m, c in enumerate(member_curves)
                        for s, v in zip(STEPS, c, strict=True)
                    ]
                    if with_refs:
                        bayes, unigram = refs(p, q, b) if refs else chain_truth(p, q)
                        rows += [
                            (s, m, f"test_loss@{name}", float(v))
                            for name, v in (("bayes", bayes), ("unigram", unigram))
                            for m in range(members)
                            for s in STEPS
                        ]
                    w.add_metrics(cell_arm(p, q, b), rows)
            run = w.finish()
        return cfg, run.path

    return make


def _at(which: str, members: int = 3, offset: float = 0.0):
    """Curves that start at log 2 and sit at ``which`` ("rate" or "hpi") (+ offset) from step 100 on."""

    def curves(p, q, b):
        rate, hpi = chain_truth(p, q)
        v = (rate if which == "rate" else hpi) + offset
        return [[math.log(2), v, v, v] for _ in range(members)]

    return curves


def _rows(analysis) -> dict[str, object]:
    """``{arm: row}`` over both groups."""
    return {r.id.split("/", 1)[1]: r for g in analysis.groups for r in g.rows}


def _groups(analysis) -> dict[str, object]:
    return {g.id: g for g in analysis.groups}


# --- theory: the predicted basin ---------------------------------------------------------------


@pytest.mark.parametrize("p,q", [*ABOVE, (0.9, 0.6), (0.8, 0.8)])
def test_above_the_line_theory_predicts_h_pi(p, q):
    rate, hpi = chain_truth(p, q)
    pred = predict_cell(p, q, 0.02, 0.01, 0.05, 0.8)
    assert pred["basin"] == "H(π)" and pred["theorem"] == "Thm. 2" and pred["informative"]
    assert pred["loss"] == pytest.approx(hpi, abs=1e-12)
    assert pred["entropy_rate"] == pytest.approx(rate, abs=1e-12)
    assert pred["marginal_entropy"] == pytest.approx(hpi, abs=1e-12)
    probs = gaussian_basin_probability(0.02, p, q)
    assert pred["probability"] == pytest.approx(float(probs[CriticalKind.LOCAL_MIN]))
    assert pred["probability"] > 0.999


@pytest.mark.parametrize("p,q", [*BELOW, (0.1, 0.1), (0.3, 0.3)])
def test_below_the_line_theory_predicts_the_entropy_rate(p, q):
    rate, _ = chain_truth(p, q)
    pred = predict_cell(p, q, 0.02, 0.01, 0.05, 0.8)
    assert pred["basin"] == "rate" and pred["theorem"] == "Thm. 8" and pred["informative"]
    assert pred["loss"] == pytest.approx(rate, abs=1e-12)
    assert pred["probability"] == pytest.approx(float(gaussian_basin_probability(0.02, p, q)[CriticalKind.GLOBAL_MIN]))


def test_prediction_is_computed_by_the_theory_functions(monkeypatch):
    # Swap the App. G probabilities: the predicted basin must swap with them (nothing typed in; the
    # prediction is tdlab.theory.markov_landscape.gaussian_init_limit's, which reads them).
    real = basins.gaussian_basin_probability

    def swapped(sigma, p, q):
        out = real(sigma, p, q)
        out[CriticalKind.LOCAL_MIN], out[CriticalKind.GLOBAL_MIN] = (
            out[CriticalKind.GLOBAL_MIN],
            out[CriticalKind.LOCAL_MIN],
        )
        return out

    monkeypatch.setattr(basins, "gaussian_basin_probability", swapped)
    assert predict_cell(0.5, 0.8, 0.02, 0.01, 0.05, 0.8)["basin"] == "rate"
    assert predict_cell(0.2, 0.3, 0.02, 0.01, 0.05, 0.8)["basin"] == "H(π)"


def test_cells_near_the_line_or_with_a_small_gap_are_not_informative():
    iid = predict_cell(0.3, 0.7, 0.02, 0.01, 0.05, 0.8)
    assert iid["basin"] is None and not iid["informative"] and "i.i.d." in iid["why_not"]
    near = predict_cell(0.45, 0.52, 0.02, 0.01, 0.05, 0.8)  # |p+q-1| = 0.03 < 0.05
    assert near["basin"] == "rate" and not near["informative"] and "margin" in near["why_not"]
    rate, hpi = chain_truth(0.6, 0.6)  # p+q = 1.2, but H(pi) - rate = 0.0201
    assert hpi - rate < 0.021
    assert not predict_cell(0.6, 0.6, 0.02, 0.011, 0.05, 0.8)["informative"]
    assert predict_cell(0.6, 0.6, 0.02, 0.01, 0.05, 0.8)["informative"]
    # A large init: the theory no longer gives the predicted basin to most members.
    big = predict_cell(0.5, 0.8, 3.0, 0.01, 0.05, 0.8)
    assert big["probability"] < 0.8 and not big["informative"]


def test_classification_of_final_losses():
    rate, hpi = chain_truth(0.5, 0.8)  # gap 0.047
    tol = 0.01
    finals = [rate, rate - 0.03, rate + 0.0099, hpi - 0.0099, hpi + 0.0099, (rate + hpi) / 2, hpi + 0.02, float("nan")]
    assert classify_losses(np.array(finals), rate, hpi, tol) == [
        "rate",
        "rate",
        "rate",
        "H(π)",
        "H(π)",
        "between",
        "other",
        "other",
    ]
    # Overlapping bands (gap < 2 tol): nearer entropy wins.
    assert classify_losses(np.array([rate + 0.02, hpi - 0.02]), rate, hpi, 0.03) == ["rate", "H(π)"]
    # Per-member references (the predictors' losses on each member's batches).
    refs_rate, refs_hpi = np.array([rate - 0.008, rate + 0.008]), np.array([hpi - 0.008, hpi + 0.008])
    assert classify_losses(np.array([rate - 0.005, rate - 0.005]), refs_rate, refs_hpi, 0.001) == ["between", "rate"]


# --- claims computed from stored metrics --------------------------------------------------------


def test_members_at_h_pi_hold_above_the_line_and_are_not_evaluable_below(make_bridge_run):
    cfg, path = make_bridge_run(_at("hpi"))
    a = MarkovBridge().analyse(cfg, Run(path))
    assert [g.id for g in a.paper] == [G_BELOW, G_ABOVE] and a.sanity_groups == []
    g = _groups(a)
    assert [r.id for r in g[G_BELOW].rows] == [f"{G_BELOW}/{cell_arm(p, q, b)}" for p, q in BELOW for b in BUDGETS]
    assert [r.id for r in g[G_ABOVE].rows] == [f"{G_ABOVE}/{cell_arm(p, q, b)}" for p, q in ABOVE for b in BUDGETS]
    rows = _rows(a)
    for p, q in GRID:
        rate, hpi = chain_truth(p, q)
        for b in BUDGETS:
            c = rows[cell_arm(p, q, b)]
            assert c.expected == 0.0 and c.relation == "close" and c.test == "value" and c.arms == (cell_arm(p, q, b),)
            assert (c.provenance, c.horizon) == ("paper", "convergence")
            if p + q > 1:  # gap to the unigram loss: 0
                assert c.verdict == "holds" and c.measured.values == pytest.approx([0.0] * 3, abs=1e-12)
                assert c.learning_required is False and c.stage is None
            else:  # still on the H(π) plateau: Thm. 8's global minimum may come later — not evaluable, never fails
                assert c.verdict == "not evaluable" and c.cause == "stage not reached" and c.stage == "left-plateau"
                assert c.mean == pytest.approx(hpi - rate, abs=1e-9) and c.learning_required
            row = a.measurements["cells"][cell_arm(p, q, b)]
            assert row["fraction_at_h_pi"] == 1.0 and row["fraction_at_rate"] == 0.0
            assert row["plateau_escape_step"] == [None, None, None] and row["escaped_fraction"] == 0.0
    assert g[G_ABOVE].verdict == "holds" and g[G_BELOW].verdict == "not evaluable"


def test_members_past_the_plateau_but_off_the_rate_fail_below_the_line(make_bridge_run):
    # 0.03 nats above the Bayes loss: below the plateau level (H(π) − 0.25 (H(π) − rate)) in every cell,
    # three tolerances off the entropy rate.
    cfg, path = make_bridge_run(_at("rate", offset=0.03))
    a = MarkovBridge().analyse(cfg, Run(path))
    rows = _rows(a)
    for p, q in BELOW:
        for b in BUDGETS:
            assert rows[cell_arm(p, q, b)].verdict == "fails" and rows[cell_arm(p, q, b)].mean == pytest.approx(
                0.03, abs=1e-9
            )
    assert _groups(a)[G_BELOW].verdict == "fails"
    # The generic notes say the group fails; each cell's note names the prediction and the gap's size in nats.
    assert any(n.startswith("Fails — ") and f"({G_BELOW})" in n for n in a.notes)
    p, q = BELOW[0]
    rate, hpi = chain_truth(p, q)
    note = next(n for n in a.notes if n.startswith(f"({p:g}, {q:g})"))
    assert (
        "Thm. 8 predicts the entropy rate" in note and "+0.0300 nats" in note and f"{0.03 / (hpi - rate):.0%}" in note
    )
    assert sum("Thm. 8 predicts the entropy rate" in n for n in a.notes) == len(BELOW) * len(BUDGETS)


def test_members_at_the_entropy_rate_hold_below_the_line_and_fail_above(make_bridge_run):
    cfg, path = make_bridge_run(_at("rate"))
    a = MarkovBridge().analyse(cfg, Run(path))
    rows = _rows(a)
    for p, q in GRID:
        for b in BUDGETS:
            assert rows[cell_arm(p, q, b)].verdict == ("holds" if p + q < 1 else "fails")
            row = a.measurements["cells"][cell_arm(p, q, b)]
            assert row["fraction_at_rate"] == 1.0
            assert row["plateau_escape_step"] == [100, 100, 100] and row["evaluation_interval"] == 100
    p, q = ABOVE[0]
    rate, hpi = chain_truth(p, q)
    row = a.measurements["cells"][cell_arm(p, q, BUDGETS[0])]
    assert row["deviation_nats"] == pytest.approx(rate - hpi, abs=1e-9)
    note = next(n for n in a.notes if n.startswith(f"({p:g}, {q:g})"))
    assert "Thm. 2 predicts H(π)" in note and f"{rate - hpi:+.4f} nats" in note


def test_the_reference_is_the_predictors_loss_on_the_same_batches(make_bridge_run):
    # The batches' Bayes loss is 0.008 below the population entropy rate and a member sits 0.003 above
    # it. Against the population rate that read as a disagreement; against its own batches it agrees.
    def refs(p, q, b):
        rate, hpi = chain_truth(p, q)
        return rate - 0.008, hpi - 0.008

    def curves(p, q, b):
        rate, hpi = chain_truth(p, q)
        v = (rate if p + q < 1 else hpi) - 0.008
        return [[math.log(2), v + d, v + d, v + d] for d in (0.002, 0.003, 0.004)]

    cfg, path = make_bridge_run(curves, refs=refs)
    a = MarkovBridge().analyse(cfg, Run(path))
    assert all(r.verdict == "holds" for r in _rows(a).values())
    r = _rows(a)[cell_arm(0.1, 0.4, B0)]
    assert r.measured.values == pytest.approx([0.002, 0.003, 0.004], abs=1e-9)
    assert a.measurements["cells"][cell_arm(0.1, 0.4, B0)]["final_bayes_loss"] == pytest.approx(
        [chain_truth(0.1, 0.4)[0] - 0.008] * 3
    )

    # The same final losses, but the batches' references at the population values + 0.03: 0.03 above the
    # members (whose loss is at the population value - 0.005), a gap the tolerance does not cover -> fails.
    cfg, path = make_bridge_run(curves, refs=lambda p, q, b: tuple(v + 0.03 for v in chain_truth(p, q)))
    assert all(r.verdict == "fails" for r in _rows(MarkovBridge().analyse(cfg, Run(path))).values())


def test_runs_without_reference_losses_use_the_population_values_and_say_so(make_bridge_run):
    cfg, path = make_bridge_run(_at("rate", offset=0.03), with_refs=False)
    a = MarkovBridge().analyse(cfg, Run(path))
    assert _rows(a)[cell_arm(0.5, 0.8, B0)].verdict == "fails" and _rows(a)[cell_arm(0.2, 0.3, B0)].verdict == "fails"
    assert _rows(a)[cell_arm(0.2, 0.3, B0)].mean == pytest.approx(0.03, abs=1e-9)
    assert any("did not record the reference predictors" in n for n in a.notes)


def test_mixed_members_are_not_resolved_and_the_note_says_how_many_left(make_bridge_run):
    # (0.5, 0.8) at the long budget: 1 member at H(pi), 1 escaped to the rate, 1 in between.
    def curves(p, q, b):
        rate, hpi = chain_truth(p, q)
        if (p, q, b) == (0.5, 0.8, B1):
            mid = (rate + hpi) / 2
            return [[0.69, hpi, hpi, hpi], [0.69, hpi, rate, rate], [0.69, hpi, mid, mid]]
        return _at("hpi" if p + q > 1 else "rate")(p, q, b)

    cfg, path = make_bridge_run(curves)
    a = MarkovBridge().analyse(cfg, Run(path))
    arm = cell_arm(0.5, 0.8, B1)
    c = _rows(a)[arm]
    assert c.verdict == "not resolved" and c.cause == "spread" and "straddles" in c.reason
    assert sum(r.verdict == "holds" for r in _rows(a).values()) == len(GRID) * len(BUDGETS) - 1
    assert _groups(a)[G_ABOVE].verdict == "not resolved" and _groups(a)[G_BELOW].verdict == "holds"
    row = a.measurements["cells"][arm]
    assert row["class"] == ["H(π)", "rate", "between"]
    assert row["plateau_escape_step"] == [None, 200, 200]
    table = a.measurements["table"]
    lines = table.splitlines()
    assert len(lines) == 2 + len(GRID) * len(BUDGETS)
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    mine = next(line for line in lines if line.startswith(f"| 0.5 | 0.8 | 1.30 | {B1} |"))
    assert "1/3 | 1/3 | 1/3" in mine and f"{G_ABOVE}/{arm}" in mine and "—, 200, 200" in mine
    note = next(n for n in a.notes if n.startswith(f"(0.5, 0.8), p+q=1.30, {B1} its"))
    assert "Thm. 2 predicts H(π)" in note and "2/3 members are each beyond the ±0.01 tolerance" in note
    assert "neither a hold nor a confirmed disagreement" in note


def test_an_end_state_still_moving_is_not_resolved(make_bridge_run):
    # (0.2, 0.3) at B1: at the Bayes loss at the end, but falling 0.02 nats per evaluation.
    def curves(p, q, b):
        rate, _hpi = chain_truth(p, q)
        if (p, q, b) == (0.2, 0.3, B1):
            return [[0.69, rate + 0.04 + d, rate + 0.02 + d, rate + d] for d in (-0.001, 0.0, 0.001)]
        return _at("hpi" if p + q > 1 else "rate")(p, q, b)

    cfg, path = make_bridge_run(curves)
    r = _rows(MarkovBridge().analyse(cfg, Run(path)))[cell_arm(0.2, 0.3, B1)]
    assert (
        r.verdict == "not resolved"
        and "still moving" in r.reason
        and r.measured.drift == pytest.approx(-0.04, rel=1e-6)
    )


def test_not_informative_cells_carry_no_claim_but_are_classified(make_bridge_run):
    grid = [(0.3, 0.7), (0.45, 0.52), (0.5, 0.8)]
    cfg, path = make_bridge_run(_at("hpi"), grid=grid)
    a = MarkovBridge().analyse(cfg, Run(path))
    assert list(_rows(a)) == [cell_arm(0.5, 0.8, b) for b in BUDGETS]
    g = _groups(a)
    assert g[G_BELOW].verdict == "not evaluable" and g[G_BELOW].cause == "no rows" and g[G_ABOVE].verdict == "holds"
    for p, q in grid[:2]:
        row = a.measurements["cells"][cell_arm(p, q, BUDGETS[0])]
        assert not row["informative"] and row["class"] == ["H(π)"] * 3
        assert any(n.startswith(f"({p:g}, {q:g})") and "not informative" in n for n in a.notes)
    assert "not informative" in a.measurements["table"]


def test_health_gate_and_trivial_error(make_bridge_run):
    exp = MarkovBridge()
    assert exp.trivial_error(exp.make_config("quick"), cell_arm(0.2, 0.3, 500)) == pytest.approx(math.log(2))

    # (0.2, 0.3) at B0 never moves off log 2: its row is not evaluable. A p+q>1 arm on the H(pi)
    # plateau is evaluated (a claim about not learning the bigram law).
    def curves(p, q, b):
        if (p, q, b) == (0.2, 0.3, B0):
            return [[math.log(2)] * 4 for _ in range(3)]
        return _at("hpi" if p + q > 1 else "rate")(p, q, b)

    cfg, path = make_bridge_run(curves)
    a = exp.analyse(cfg, Run(path))
    rows = _rows(a)
    assert (
        rows[cell_arm(0.2, 0.3, B0)].verdict == "not evaluable" and "not trained" in rows[cell_arm(0.2, 0.3, B0)].reason
    )
    assert rows[cell_arm(0.5, 0.8, B0)].verdict == "holds"
    note = next(n for n in a.notes if n.startswith(f"(0.2, 0.3), p+q=0.50, {B0} its"))
    assert "Thm. 8 predicts the entropy rate" in note and "none left the H(π) plateau" in note


def test_rebuild_writes_summary_and_figures(make_bridge_run):
    _cfg, path = make_bridge_run(_at("rate", offset=0.03))
    run = rebuild(path)
    s = run.summary
    assert s["status"] == "done"
    assert s["claims_total"] == 2 and s["claims_failed"] == 2
    groups = {g["id"]: g for g in s["claims"]}
    assert groups[G_BELOW]["counts"]["fails"] == len(BELOW) * len(BUDGETS)
    assert groups[G_ABOVE]["counts"]["fails"] == len(ABOVE) * len(BUDGETS)
    assert s["figures"] == ["figures/phase_diagram.png", "figures/loss_curves.png"]
    for f in s["figures"]:
        assert (path / f).stat().st_size > 5000
    assert s["measurements"]["table"].startswith("| p | q |")
    json.dumps(s)


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        ["train.steps=1234"],  # horizons come from budgets
        ["model.init=local-to-global"],
        ["grid=[[0.5, 0.8], [0.5, 0.8]]"],
        ["grid=[]"],
        ["budgets=[]"],
        ["grid=[[1.2, 0.3]]"],
    ],
)
def test_bad_configs_are_rejected(sets):
    with pytest.raises(ConfigError):
        MarkovBridge().make_config("quick", sets)


def test_profiles_validate_and_paper_is_table_2():
    exp = MarkovBridge()
    quick, paper = exp.make_config("quick"), exp.make_config("paper")
    assert paper.train.seq_len == 1024 and max(paper.budgets) == 8000 and paper.model.d == 8 and paper.members == 5
    assert len(paper.grid) > len(quick.grid) and len(paper.budgets) == len(quick.budgets) == 2
    for cfg in (quick, paper):
        sides = {p + q > 1 for p, q in cfg.grid}
        assert sides == {True, False}
        assert (0.5, 0.8) in cfg.grid and (0.7, 0.9) in cfg.grid
        assert cfg.model.arch == "sec2" and cfg.model.init == "standard"


def test_the_claims_speak_for_their_side_of_the_line_and_the_seeds_horizon(make_bridge_run):
    """A p+q>1 row trained for less than Table 2's 8000 iterations is ours (the statement is that the init stays
    at H(π); one still there at 2000 may leave later), a p+q<1 row is the seed's at any budget; a large init is
    outside σ² ≪ 1/√2, and a row on the wrong side of the line (a large init's p+q>1 cell, whose App. G basin
    is the global one) is ours."""
    cfg, path = make_bridge_run(_at("hpi"), budgets=[2000, B0])
    rows = _rows(MarkovBridge().analyse(cfg, Run(path)))
    for p, q in ABOVE:
        assert rows[cell_arm(p, q, 2000)].provenance == "ours" and rows[cell_arm(p, q, B0)].provenance == "paper"
        assert rows[cell_arm(p, q, 2000)].outside == [mb.PAPER_HORIZON_ROW.text]
    for p, q in BELOW:
        assert all(rows[cell_arm(p, q, b)].provenance == "paper" for b in (2000, B0))
    assert not mb.SMALL_INIT.met(MarkovBridge().make_config("quick", ["model.init_std=0.5"]))
    assert mb.SMALL_INIT.met(cfg)
    spec = next(s for s in mb.MarkovBridge.claims if s.id == G_BELOW)
    wrong_side = Row("x", Sample([0.0]), context={"p": 0.7, "q": 0.9, "budget": B0})
    assert spec.outside(cfg, wrong_side) == [BELOW_LINE_ROW.text]


# --- end to end -------------------------------------------------------------------------------


def test_tiny_end_to_end_run(runs_dir):
    exp = MarkovBridge()
    grid = [(0.2, 0.3), (0.7, 0.9)]
    cfg = exp.make_config(
        "quick",
        [
            _grid_set(grid),
            "budgets=[3, 6]",
            "train.seq_len=16",
            "train.eval_every=3",
            "train.eval_batches=1",
            "train.log_every=1",
            "model.d=4",
        ],
        members=2,
    )
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done" and s["claims_total"] == 2
    # 3 and 6 iterations: the p+q>1 rows are short of Table 2's 8000, so ours; that group has no deciding row
    above = next(g for g in s["claims"] if g["id"] == G_ABOVE)
    assert above["verdict"] == "not evaluable" and {r["provenance"] for r in above["rows"]} == {"ours"}
    assert {r["id"] for g in s["claims"] for r in g["rows"]} == {
        f"{G_BELOW}/{cell_arm(0.2, 0.3, b)}" for b in (3, 6)
    } | {f"{G_ABOVE}/{cell_arm(0.7, 0.9, b)}" for b in (3, 6)}
    cells = s["measurements"]["cells"]
    assert set(cells) == {cell_arm(p, q, b) for p, q in grid for b in (3, 6)}
    for arm, row in cells.items():
        assert len(row["final_test_loss"]) == 2 and all(math.isfinite(v) for v in row["final_test_loss"])
        assert (run.path / "arrays" / f"{arm.replace('/', '__')}.safetensors").is_file()
    df = run.metrics()
    assert set(df[df.arm == cell_arm(0.7, 0.9, 6)].step) >= {0, 3, 6}
    assert {"test_loss@bayes", "test_loss@unigram"} <= set(df.name)
    assert (run.path / "figures" / "phase_diagram.png").is_file() and (run.path / "report.html").is_file()
