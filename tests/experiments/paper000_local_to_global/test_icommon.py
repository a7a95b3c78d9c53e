"""markov-icommon: the members' initial points lie in I_common and are the same in every cell (App. D's
canonical point in the full model and A.3.2's proposed point: tests/models/test_init.py); a tiny
end-to-end run stores what the claims need; on synthetic run directories every group holds when the stored numbers say so and fails when they contradict it, and the reaching
and basin claims are not evaluable where the members stay on the H(π) plateau or the descents have not
settled."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.paper000_local_to_global.icommon import MarkovICommon, cell_arm, initial_points
from tdlab.runner import execute
from tdlab.runs import RunWriter
from tdlab.seeding import member_seeds
from tdlab.theory.markov_landscape import CriticalKind
from tdlab.theory.markov_regions import in_icommon

EXP = MarkovICommon()
GLOBAL, LOCAL = int(CriticalKind.GLOBAL_MIN), int(CriticalKind.LOCAL_MIN)


def chain_truth(p: float, q: float) -> tuple[float, float]:
    """(entropy rate, H(pi)) in nats, from first principles."""
    h = lambda x: -x * math.log(x) - (1 - x) * math.log(1 - x)  # noqa: E731
    pi1 = p / (p + q)
    return (1 - pi1) * h(p) + pi1 * h(q), h(pi1)


def test_initial_points_are_in_icommon_per_member():
    cfg = EXP.make_config("quick", members=6)
    seeds = member_seeds(0, 6)
    pts = initial_points(seeds, cfg.region)
    assert pts.shape == (6, 2) and in_icommon(pts, cfg.region.energy_margin).all()
    assert torch.equal(initial_points(seeds[2:4], cfg.region), pts[2:4])  # a member's point is its seed's alone


def test_config_refuses_cells_on_the_line_and_bad_regions():
    with pytest.raises(ConfigError, match="p \\+ q != 1"):
        EXP.make_config("quick", ["grid=[[0.4, 0.6]]"])
    with pytest.raises(ConfigError, match="w_lo"):
        EXP.make_config("quick", ["region.w_lo=-0.01"])
    with pytest.raises(ConfigError, match="model"):
        EXP.make_config("quick", ["model.arch=gpt2"])


# --- tiny end-to-end run -----------------------------------------------------------------------------


def test_tiny_run_stores_what_the_claims_read(runs_dir, one_thread, stored_fits):
    cfg = EXP.make_config(
        "quick",
        [
            "grid=[[0.2, 0.3], [0.7, 0.9]]",
            "train.steps=6",
            "train.seq_len=8",
            "train.eval_every=3",
            "train.eval_batches=1",
            "train.log_every=3",
            "bias_step.points=20",
            "bias_step.steps=50",
            "bias_step.flow_points=3",
            "bias_step.flow_time=200",
        ],
        members=2,
    )
    run = execute(EXP, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done"
    from tdlab.costs.work import fit_arms  # what tdlab batch reads of a stopped run

    assert stored_fits(run) == {a.replace("/", "__") for a in fit_arms(EXP, cfg)}  # the fits it declares
    assert {g["id"] for g in s["claims"]} == {"icommon-reaches-entropy-rate", "one-extra-bias-step-suffices"}
    assert {g["id"] for g in s["sanity"]} == {"sampled-points-in-icommon", "starts-above-entropy-rate"}
    rows = {r["id"]: r for g in s["claims"] + s["sanity"] for r in g["rows"]}
    assert set(rows) >= {
        f"icommon-reaches-entropy-rate/{cell_arm(0.2, 0.3)}",
        f"one-extra-bias-step-suffices/{cell_arm(0.7, 0.9)}",
    }
    assert rows[f"one-extra-bias-step-suffices/{cell_arm(0.2, 0.3)}"]["trials"] == 20
    assert s["measurements"]["cells"][cell_arm(0.7, 0.9)]["icommon_points"] == 2 + 3
    assert rows[f"sampled-points-in-icommon/{cell_arm(0.7, 0.9)}"]["measured"] == [0.0]
    # The same initial points in both cells: the trained members' embeddings start with the same norm |e|.
    pts = initial_points(member_seeds(cfg.seed, 2), cfg.region)
    for p, q in cfg.grid:
        init = run.arrays(f"{cell_arm(p, q)}@init")
        assert torch.allclose(init["e"].double().norm(dim=1), pts[:, 0].abs(), atol=1e-6)
    df = run.metrics()
    gap_rows = df[(df.arm == cell_arm(0.2, 0.3)) & (df.name.isin(["test_loss", "test_loss@bayes"])) & (df.step == 6)]
    gap = gap_rows.pivot(index="member", columns="name", values="value")
    assert rows[f"icommon-reaches-entropy-rate/{cell_arm(0.2, 0.3)}"]["measured"] == pytest.approx(
        (gap["test_loss"] - gap["test_loss@bayes"]).tolist(), abs=1e-12
    )
    assert s["figures"] == ["figures/icommon_loss.png", "figures/icommon_points.png"]


# --- synthetic run directories -----------------------------------------------------------------------

STEPS = [0, 100, 800, 900, 1000]
GRID = [(0.2, 0.3), (0.7, 0.9)]


def _write(tmp_path, name, *, final_gap=None, start_gap=0.5, k1=None, flow=None, members=4, points=200):
    """A run directory with chosen numbers: per cell test-loss curves whose gap to the Bayes loss goes
    from ``start_gap`` to ``final_gap[cell]`` (per member), canonical basins where descent with one
    extra step agrees with profile descent except where ``k1[cell]`` says, and flow basins
    ``flow[cell]`` (default all global)."""
    cfg = EXP.make_config("quick", ["grid=[[0.2, 0.3], [0.7, 0.9]]"], members=members)
    with RunWriter(tmp_path / "synthetic", EXP.name, run_id=name) as w:
        w.write_config({"experiment": EXP.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        pts = initial_points(member_seeds(cfg.seed, members), cfg.region)
        w.add_metrics(
            "init-points", [(0, m, f"theta0/{k}", float(pts[m, i])) for m in range(members) for i, k in enumerate("ew")]
        )
        for p, q in GRID:
            arm = cell_arm(p, q)
            rate, _ = chain_truth(p, q)
            fg = (final_gap or {}).get(arm, [0.0003 * (m - 1) for m in range(members)])
            rows = []
            for m in range(members):
                for _i, s in enumerate(STEPS):
                    g = start_gap if s == 0 else fg[m]
                    rows += [(s, m, "test_loss@bayes", rate + 0.001 * m), (s, m, "test_loss", rate + 0.001 * m + g)]
            w.add_metrics(arm, rows)
            prof = np.where(np.arange(points) % 3 == 0, LOCAL, GLOBAL)
            k1_codes = (k1 or {}).get(arm, prof)
            can = [
                (0, i, f"basin/{k}", float(v[i]))
                for k, v in (("theory", prof), ("k0", prof), ("k1", k1_codes), ("profile", prof))
                for i in range(points)
            ]
            fb = (flow or {}).get(arm, [GLOBAL] * (members + 3))
            can += [(0, i, "flow/basin", float(v)) for i, v in enumerate(fb)]
            can += [(0, i, "flow/in_icommon", 1.0) for i in range(len(fb))]
            w.add_metrics(f"canonical/{arm}", can)
        run = w.finish()
    return cfg, run


def _analyse(cfg, run):
    a = EXP.analyse(cfg, run)
    return a, {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}


def test_every_group_holds_on_agreeing_numbers(tmp_path):
    cfg, run = _write(tmp_path, "good")
    a, groups, rows = _analyse(cfg, run)
    assert {g: groups[g].verdict for g in groups} == {
        "icommon-reaches-entropy-rate": "holds",
        "one-extra-bias-step-suffices": "holds",
        "sampled-points-in-icommon": "holds",
        "starts-above-entropy-rate": "holds",
    }
    assert rows[f"one-extra-bias-step-suffices/{cell_arm(0.2, 0.3)}"].measured.proportion
    assert rows[f"one-extra-bias-step-suffices/{cell_arm(0.2, 0.3)}"].stage == "descent-settled"
    assert rows[f"icommon-reaches-entropy-rate/{cell_arm(0.7, 0.9)}"].stage == "left-plateau"
    assert all(r.provenance == "paper" for r in rows.values())
    # the flow's 7 points are the canonical arm's first members: the other 193 are not read as points
    assert a.measurements["cells"][cell_arm(0.2, 0.3)]["icommon_points"] == 4 + 3
    assert any("outside I_common" in n for n in a.notes)
    assert any("canonical" in n and "hardly tells one extra step from none" in n for n in a.notes)


def test_members_off_the_rate_fail_and_members_on_the_plateau_are_not_evaluable(tmp_path):
    rate, hpi = chain_truth(0.7, 0.9)
    # past the plateau, 0.03 nats above the Bayes loss: a finding
    cfg, run = _write(tmp_path, "off", final_gap={cell_arm(0.7, 0.9): [0.03 + 0.0005 * m for m in range(4)]})
    _, groups, rows = _analyse(cfg, run)
    assert rows[f"icommon-reaches-entropy-rate/{cell_arm(0.7, 0.9)}"].verdict == "fails"
    assert rows[f"icommon-reaches-entropy-rate/{cell_arm(0.2, 0.3)}"].verdict == "holds"
    assert groups["icommon-reaches-entropy-rate"].verdict == "fails"
    # at H(π): the members have not left the unigram stage — not evaluable, the stage named, never failing
    cfg, run = _write(tmp_path, "stuck", final_gap={cell_arm(0.7, 0.9): [hpi - rate + 0.0005 * m for m in range(4)]})
    _, groups, rows = _analyse(cfg, run)
    row = rows[f"icommon-reaches-entropy-rate/{cell_arm(0.7, 0.9)}"]
    assert (
        row.verdict == "not evaluable" and row.cause == "stage not reached" and "left the unigram stage" in row.reason
    )
    # "irrespective of the switching" speaks of every cell: one not evaluable leaves the statement open
    g = groups["icommon-reaches-entropy-rate"]
    assert (g.verdict, g.cause) == ("not resolved", "rows not evaluable")


def test_one_extra_step_that_often_ends_elsewhere_is_off_the_bias_claim_but_cannot_refute_it(tmp_path):
    """20% of the points elsewhere is beyond our reading of "usually" (agree_min = 0.95), but nothing calibrates
    that reading (the seed gives "usually" no number): the row is not resolved, never a refutation."""
    points = 200
    prof = np.where(np.arange(points) % 3 == 0, LOCAL, GLOBAL)
    bad = np.where(np.arange(points) % 5 == 0, GLOBAL + LOCAL - prof, prof)  # 20% of the points in the other basin
    cfg, run = _write(tmp_path, "bias", k1={cell_arm(0.2, 0.3): bad}, points=points)
    _, groups, rows = _analyse(cfg, run)
    row = rows[f"one-extra-bias-step-suffices/{cell_arm(0.2, 0.3)}"]
    assert row.mean == pytest.approx(0.8)
    assert (row.verdict, row.cause) == ("not resolved", "uncalibrated threshold")
    assert groups["one-extra-bias-step-suffices"].verdict == "not resolved"


def test_sanity_groups_fail_when_their_premise_is_false(tmp_path):
    cfg, run = _write(tmp_path, "premise", start_gap=0.001, flow={cell_arm(0.2, 0.3): [GLOBAL, LOCAL] + [GLOBAL] * 5})
    _, groups, _ = _analyse(cfg, run)
    assert groups["sampled-points-in-icommon"].verdict == "fails"
    assert groups["starts-above-entropy-rate"].verdict == "fails"


def test_descents_that_have_not_settled_leave_the_bias_claim_not_evaluable(tmp_path):
    points = 200
    prof = np.where(np.arange(points) % 3 == 0, LOCAL, GLOBAL)
    unsettled = np.where(np.arange(points) % 10 == 0, int(CriticalKind.NONE), prof)  # 10 % end away from every set
    cfg, run = _write(tmp_path, "unsettled", k1={cell_arm(0.2, 0.3): unsettled}, points=points)
    a, groups, rows = _analyse(cfg, run)
    row = rows[f"one-extra-bias-step-suffices/{cell_arm(0.2, 0.3)}"]
    assert row.verdict == "not evaluable" and row.cause == "stage not reached"
    assert a.measurements["cells"][cell_arm(0.2, 0.3)]["bias_step"]["unsettled_fraction"] == pytest.approx(0.1)
    assert groups["one-extra-bias-step-suffices"].verdict == "holds"  # the other cell decides
