"""icl-landscape (Fig. 4): the maps carry their Monte-Carlo error (delete-a-group jackknife over prompt
groups, tdlab.theory.icl_landscape) and the pre-LN valley its grid cell; the
minimiser distance is no longer a claim; every group holds and fails on synthetic maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.paper002_cross_attention.landscape import IclLandscape
from tdlab.report.measurement_tables import format_cell, measurement_tables
from tdlab.runner import execute
from tdlab.runs import staging_path
from tdlab.theory.icl import two_param_stationary
from tdlab.train.stopping import RunStopped

pytestmark = pytest.mark.usefixtures("one_thread")
PANELS = ("T10", "T5", "T5/preln")


@pytest.fixture(scope="module")
def tiny(s2):
    over = [
        "panels=[{depth: 10}, {depth: 5}, {depth: 5, pre_ln: true}]",
        "grid=21",
        "polish_evals=20",
        "population_prompts=256",
        "ln_prompts=8",
        "ln_context=20",
        "ln_grid=11",
        "ln_steps=3",
        "train.steps=30",
        "train.eval_prompts=8",
        "mc_groups=4",
    ]
    return s2.run_tiny(IclLandscape(), over, members=2)


def _valley_map(a_ax, b_ax, shift):
    """A synthetic loss with its valley at alpha = -beta + shift and its minimum at beta = -1/3."""
    A, B = np.meshgrid(a_ax, b_ax, indexing="ij")
    return np.exp(50 * (A + B - shift) ** 2 + (B + 1 / 3) ** 2)


def _patch(s2, run, base, shift_plain, shift_ln, gd_shift, noise=0.0):
    """Every panel's map (and its prompt groups: identical, or with relative ``noise`` between groups) replaced
    by a synthetic valley; GD ends at the closed-form stationary point (+ ``gd_shift``) or at the map minimiser."""
    arrays = {}
    rng = np.random.default_rng(1)
    for arm in PANELS:
        arr = run.arrays(arm)
        a_ax, b_ax = arr["alpha_axis"][0].numpy(), arr["beta_axis"][0].numpy()
        shift = shift_ln if arm.endswith("preln") else shift_plain
        loss = _valley_map(a_ax, b_ax, shift)
        G = arr["group_sizes"].shape[1]
        groups = loss[None] * np.exp(noise * rng.standard_normal((G, *loss.shape)))
        E = arr["alpha"].shape[0]
        mini = np.array([1 / 3 + shift, -1 / 3, 1.0])
        th = base.measurements[arm].get("theory_stationary")
        a_end = np.array([t[0] for t in th]) if th else np.full(E, mini[0])
        b_end = np.array([t[1] for t in th]) if th else np.full(E, mini[1])
        arrays[arm] = {
            "loss": np.repeat(loss[None], E, 0),
            "group_loss": np.repeat(groups[None], E, 0),
            "map_minimiser": np.repeat(mini[None], E, 0),
            "alpha": a_end + gd_shift,
            "beta": b_end,
        }
        if th:
            arrays[arm]["jackknife_minimisers"] = np.repeat(np.repeat(mini[None], G, 0)[None], E, 0)
    m = {(arm, "test_loss", None): 0.5 for arm in PANELS}
    m.update({(arm, "grad_norm", None): 0.0 for arm in PANELS})  # GD stopped on its gradient criterion
    return s2.Patched(run, m, arrays)


def test_landscape_groups_decide_the_papers_statements(tiny, s2):
    cfg, run = tiny
    exp = IclLandscape()
    base = exp.analyse(cfg, run)
    assert [g.id for g in base.paper] == [
        "valley-along-minus-beta",
        "valley-nearer-minus-beta-at-larger-T",
        "preln-ravine-similarly-located",
        "gd-reaches-stationary-point",
    ]
    assert [g.id for g in base.sanity_groups] == ["gd-matches-heatmap-minimiser", "map-valley-matches-closed-form"]
    assert base.measurements["T10"]["start_offset"] == [0.0, 0.0, 0.15, 0.15]  # on- and off-valley starts
    # the pre-LN ravine is known to one pre-LN grid cell and carries both maps' Monte-Carlo error
    ravine = s2.rows(s2.groups(base)["preln-ravine-similarly-located"])["T5"]
    assert ravine.measured.resolution == pytest.approx(0.6 / 10) and ravine.measured.mc_se > 0
    assert set(s2.rows(s2.groups(base)["preln-ravine-similarly-located"])) == {"T5"}  # no minimiser row
    assert all(r.provenance == "paper" for g in base.paper for r in g.rows)
    th = two_param_stationary(cfg.task.build(), 10, *base.measurements["T10"]["gd_start"][0])
    assert base.measurements["T10"]["theory_stationary"][0] == pytest.approx(th)

    good = s2.groups(exp.analyse(cfg, _patch(s2, run, base, 0.0, 0.0, 0.0)))
    bad = s2.groups(exp.analyse(cfg, _patch(s2, run, base, 0.2, -0.25, 0.1)))
    for gid in ("valley-along-minus-beta", "preln-ravine-similarly-located", "gd-reaches-stationary-point"):
        assert good[gid].verdict == "holds", (gid, [r.describe() for r in good[gid].rows])
        # the valley's and the ravine's widths are ours and uncalibrated (nothing to plant the other case from):
        # what they decide as failing stays not resolved; the GD claim's half cell is calibrated
        want = (
            ("fails", "decided") if gid == "gd-reaches-stationary-point" else ("not resolved", "uncalibrated threshold")
        )
        assert (bad[gid].verdict, bad[gid].cause) == want, (gid, [r.describe() for r in bad[gid].rows])
    # sanity: the closed-form valley is near alpha = -beta, so a valley shifted by 0.2 disagrees with it
    assert bad["map-valley-matches-closed-form"].verdict == "fails"


def test_the_valley_is_nearer_the_diagonal_at_larger_depth_on_the_same_prompts(tiny, s2):
    cfg, run = tiny
    exp = IclLandscape()
    base = exp.analyse(cfg, run)
    p = _patch(s2, run, base, 0.0, 0.0, 0.0)
    for arm, shift in (("T10", 0.01), ("T5", 0.05)):  # T = 10 nearer
        arr = run.arrays(arm)
        loss = _valley_map(arr["alpha_axis"][0].numpy(), arr["beta_axis"][0].numpy(), shift)
        p._a[arm]["loss"] = np.repeat(loss[None], 2 * len(cfg.off_valley), 0)
        p._a[arm]["group_loss"] = np.repeat(np.repeat(loss[None], 4, 0)[None], 2 * len(cfg.off_valley), 0)
    assert s2.groups(exp.analyse(cfg, p))["valley-nearer-minus-beta-at-larger-T"].verdict == "holds"
    p._a["T10"], p._a["T5"] = (
        {**p._a["T10"], "loss": p._a["T5"]["loss"], "group_loss": p._a["T5"]["group_loss"]},
        {**p._a["T5"], "loss": p._a["T10"]["loss"], "group_loss": p._a["T10"]["group_loss"]},
    )
    assert s2.groups(exp.analyse(cfg, p))["valley-nearer-minus-beta-at-larger-T"].verdict == "fails"


def test_a_noisy_map_leaves_the_ravine_unresolved(tiny, s2):
    cfg, run = tiny
    exp = IclLandscape()
    base = exp.analyse(cfg, run)
    row = s2.rows(
        s2.groups(exp.analyse(cfg, _patch(s2, run, base, 0.0, 0.04, 0.0, noise=0.5)))["preln-ravine-similarly-located"]
    )["T5"]
    # a ravine 0.04 away with tolerance 0.033, the map's groups disagreeing: neither holds nor fails
    assert row.measured.mc_se > 0.01 and row.verdict == "not resolved"


def test_a_landscape_run_stopped_anywhere_resumes_from_its_checkpoints_to_the_same_numbers(
    s2, tmp_path, stopped_everywhere
):
    """The paper profile's panels run for an hour each on a CPU, most of it the loss map and its polishes: the
    map's and polishes' evaluations (a CheckpointedMemo) and each panel's GD fit are checkpointed under the run's
    checkpoints/ folder, so a stop (SIGTERM, ``--until``) anywhere resumes there. Stopped after every single
    new evaluation or step until it finishes, the run ends with the numbers of a run never stopped."""
    exp = IclLandscape()
    over = [
        "panels=[{depth: 5}]",
        "grid=11",
        "polish_evals=10",
        "population_prompts=64",
        "train.steps=20",
        "train.eval_prompts=8",
        "mc_groups=2",
    ]
    cfg = exp.make_config("quick", over, members=2)
    whole = execute(exp, cfg, "quick", tmp_path / "whole", progress=False)

    def check_first(stop: RunStopped) -> None:
        assert stop.step == 1 and stop.label == "T5 loss map"  # the first map chunk, kept
        assert (staging_path(stop.run_dir) / "checkpoints" / "T5__maps.json").is_file()

    again, stops = stopped_everywhere(exp, cfg, tmp_path / "stopped", on_first=check_first)
    labels = [s.label for s in stops]  # every resume under an expired deadline adds one evaluation or one GD step
    # the map's chunks and the minimiser's polish, the GD fit, then the jackknife polishes: each stopped and resumed
    first, last = labels.index("T5"), len(labels) - 1 - labels[::-1].index("T5")
    assert labels.count("T5") == last - first + 1 >= 10  # the fit's stops, one run of them
    assert labels[:first].count("T5 loss map") >= 5 and labels[last + 1 :].count("T5 loss map") >= 5
    cols = ["step", "member", "name", "value"]
    a, b = (r.metrics().query("arm == 'T5'")[cols].reset_index(drop=True) for r in (whole, again))
    assert a.equals(b) and len(a)
    for k, v in whole.arrays("T5").items():
        assert torch.equal(v, again.arrays("T5")[k]), k


def test_the_minimisers_and_gd_end_points_are_one_table_not_notes(tiny):
    cfg, run = tiny
    a = IclLandscape().analyse(cfg, run)
    v = a.measurements
    (table,) = [t for t in measurement_tables(v)[0] if t.title == "minimisers"]
    assert table.columns == ("alpha", "beta", "jackknife_se_cells")
    expected = []
    for arm in PANELS:
        m, th = v[arm], v[arm].get("theory_stationary")
        se = format_cell(m["minimiser_jackknife_se_cells"]) if th else "—"
        expected.append((f"{arm}/map", [*map(format_cell, m["map_minimiser"]), se]))
        expected.append((f"{arm}/gd_end", [*(format_cell([p[i] for p in m["gd_end"]]) for i in (0, 1)), "—"]))
        if th:
            expected.append((f"{arm}/stationary", [*(format_cell([p[i] for p in th]) for i in (0, 1)), "—"]))
    assert table.rows == expected
    assert [name for name, _ in expected][-2:] == ["T5/preln/map", "T5/preln/gd_end"]  # no closed form with LN
    assert not any("map minimiser" in n or "GD end points" in n for n in a.notes)
    assert any(n.startswith("T5/preln: a Monte-Carlo map") for n in a.notes)  # what the table cannot say stays
