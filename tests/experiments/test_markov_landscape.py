"""markov-landscape / markov-landscape-3d: tiny end-to-end runs whose claims hold for the default
chains; every claim group is computed from the stored arrays (a changed (p, q) moves the expected
basin, and tampered trajectories or endpoints make each group fail)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from tdlab.experiments.markov_landscape import MarkovLandscape, MarkovLandscape3D, chain_arm
from tdlab.experiments.runner import execute
from tdlab.runs import Run

TINY = ["n_random=250", "n_gaussian=120", "sigmas=[0.05]", "n_traj=2", "traj_points=40", "traj_t_end=20"]


def _rows(groups) -> dict:
    """``{row id: row}`` over the summary's groups (dicts) or an analysis' groups (objects)."""
    out = {}
    for g in groups:
        for r in (g["rows"] if isinstance(g, dict) else g.rows):
            out[r["id"] if isinstance(r, dict) else r.id] = r
    return out


def _tamper(path, arm, **change):
    f = path / "arrays" / f"{arm.replace('/', '__')}.safetensors"
    arrays = load_file(str(f))
    for k, fn in change.items():
        arrays[k] = fn(arrays[k])
    save_file(arrays, str(f))


@pytest.fixture(scope="module")
def run2d(tmp_path_factory):
    exp = MarkovLandscape()
    cfg = exp.make_config("quick", TINY, members=2)
    return exp, cfg, execute(exp, cfg, "quick", tmp_path_factory.mktemp("runs2d"), progress=False)


def test_landscape_2d_end_to_end_defaults_hold(run2d):
    _, _, run = run2d
    s = run.summary
    assert s["status"] == "done"
    assert [g["id"] for g in s["claims"]] == ["basins-match-theorem", "small-gaussian-init"]
    assert [g["id"] for g in s["sanity"]] == ["energy-conserved"]
    assert s["claims_total"] == 2 and s["claims_held"] == 2, [g["verdict"] for g in s["claims"]]
    assert s["sanity_failed"] == 0
    c = _rows(s["claims"])
    # p + q < 1: a small init goes to a global minimum; p + q > 1: to the local minimum (quadrature ~0 / ~1).
    low, high = c["small-gaussian-init/p0.2_q0.3/sigma0.05"], c["small-gaussian-init/p0.5_q0.8/sigma0.05"]
    assert low["expected"] < 1e-6 and high["expected"] > 1 - 1e-6
    # measured: the per-point indicators, pooled over members (a proportion's interval)
    assert low["trials"] == high["trials"] == 2 * 120 and (low["successes"], high["successes"]) == (0, 2 * 120)
    basin = c["basins-match-theorem/p0.2_q0.3"]
    assert basin["trials"] == 2 * 250 and basin["mean"] >= 0.99 and basin["verdict"] == "holds"
    e = _rows(s["sanity"])["energy-conserved/p0.5_q0.8"]
    assert e["test"] == "every" and max(e["measured"]) < 1e-8 and e["verdict"] == "holds"
    assert (run.path / "figures" / "fig1_landscape.png").stat().st_size > 5000


def test_landscape_2d_each_group_fails_on_wrong_arrays(run2d, tmp_path):
    import shutil

    exp, cfg, run = run2d
    path = tmp_path / "copy"
    shutil.copytree(run.path, path)
    arm = chain_arm(0.5, 0.8)

    def off_axis(x):  # off the w-axis and not on Theta_*: no critical set, not the local minimum
        y = torch.empty_like(x)
        y[..., 0], y[..., 1] = 1.0, -3.0
        return y

    def kicked(tr):  # energy jumps half-way along every trajectory
        tr = tr.clone()
        tr[:, tr.shape[1] // 2:, :, 0] += 0.5
        return tr

    _tamper(path, arm, gauss_final=off_axis, random_final=off_axis, traj=kicked)
    a = exp.analyse(cfg, Run(path))
    r = _rows(a.groups)
    assert r[f"small-gaussian-init/{arm}/sigma0.05"].verdict == "fails"
    assert r[f"basins-match-theorem/{arm}"].verdict == "fails"
    assert r[f"energy-conserved/{arm}"].verdict == "fails"
    assert r[f"energy-conserved/{arm}"].per_member == ["fails", "fails"]
    # the other chain is untouched
    assert r["small-gaussian-init/p0.2_q0.3/sigma0.05"].verdict == "holds"
    assert r["basins-match-theorem/p0.2_q0.3"].verdict == "holds"
    assert {g.id: g.verdict for g in a.groups} == {"energy-conserved": "fails", "basins-match-theorem": "fails",
                                                   "small-gaussian-init": "fails"}


def test_landscape_2d_a_proportion_near_the_boundary_is_not_resolved(run2d, tmp_path):
    # 5 of 500 basin endpoints moved off their set: agreement 0.99 exactly, its Wilson interval
    # [0.977, 0.996] straddles 0.99.
    import shutil

    exp, cfg, run = run2d
    path = tmp_path / "copy"
    shutil.copytree(run.path, path)
    arm = chain_arm(0.2, 0.3)

    def three_off(x):
        y = x.clone()
        y[0, :5, 0], y[0, :5, 1] = 1.0, 3.0
        return y

    _tamper(path, arm, random_final=three_off)
    row = _rows(exp.analyse(cfg, Run(path)).groups)[f"basins-match-theorem/{arm}"]
    assert row.mean == pytest.approx(0.99) and row.verdict == "not resolved"


@pytest.mark.parametrize("p,q,local", [(0.6, 0.7, True), (0.3, 0.2, False)])
def test_landscape_2d_expected_basin_follows_p_plus_q(runs_dir, p, q, local):
    exp = MarkovLandscape()
    # one member: 250 Gaussian endpoints resolve a proportion of 1 (or 0) within prob_tol = 0.02
    cfg = exp.make_config("quick", [*TINY, "n_random=60", "n_gaussian=250", f"chains=[{{p: {p}, q: {q}}}]"], members=1)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    c = _rows(run.summary["claims"])[f"small-gaussian-init/{chain_arm(p, q)}/sigma0.05"]
    assert c["verdict"] == "holds" and (c["expected"] > 0.999 if local else c["expected"] < 1e-3)
    assert c["successes"] == (c["trials"] if local else 0) and c["trials"] == 250


def test_landscape_3d_end_to_end_attract_and_repel_and_failures(runs_dir):
    exp = MarkovLandscape3D()
    # one member: 400 endpoints per σ resolve a fraction of 1 against min_fraction = 0.99 (Wilson lower 0.9905)
    cfg = exp.make_config("quick", [*TINY[1:], "n_gaussian=400", "wide_t_end=5"], members=1)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done" and s["claims_failed"] == 0 and s["sanity_failed"] == 0
    assert [g["id"] for g in s["claims"]] == ["small-init-limit"] and [g["id"] for g in s["sanity"]] == ["energy-conserved"]
    assert s["claims"][0]["verdict"] == "holds" and len(s["claims"][0]["rows"]) == 4
    m = s["measurements"]
    assert m["p0.2_q0.3"]["expected_kind"] == "GLOBAL_MIN"  # origin on Theta_max: repels
    assert m["p0.5_q0.8"]["expected_kind"] == "LOCAL_MIN"  # origin on Theta_min: attracts
    assert m["p0.5_q0.8"]["target_loss"] == pytest.approx(m["p0.5_q0.8"]["marginal_entropy"])
    assert m["p0.2_q0.3"]["target_loss"] == pytest.approx(m["p0.2_q0.3"]["entropy_rate"])
    assert sorted(s["figures"]) == ["figures/fig2_flow_3d.png", "figures/fig5_near_origin.png"]

    # Swap the chains' endpoints: the p + q > 1 chain's endpoints (on the local-minimum plane) are
    # not at a global minimum of the p + q < 1 chain, so its rows fail; a kicked trajectory breaks energy.
    big = load_file(str(run.path / "arrays" / "p0.5_q0.8.safetensors"))

    def kicked(tr):
        tr = tr.clone()
        tr[:, tr.shape[1] // 2:, :, 2] += 0.3
        return tr

    _tamper(run.path, "p0.2_q0.3", gauss_final=lambda _: big["gauss_final"].clone(), wide=kicked)
    r = _rows(exp.analyse(cfg, Run(run.path)).groups)
    assert r["small-init-limit/p0.2_q0.3/sigma0.05/limit-set"].verdict == "fails"
    assert r["small-init-limit/p0.2_q0.3/sigma0.05/final-loss"].verdict == "fails"
    assert r["small-init-limit/p0.5_q0.8/sigma0.05/limit-set"].verdict == "holds"
    assert r["energy-conserved/p0.2_q0.3"].verdict == "fails" and r["energy-conserved/p0.5_q0.8"].verdict == "holds"


def test_config_rejects_iid_chain():
    from tdlab.config import ConfigError

    with pytest.raises((ConfigError, ValueError)):
        MarkovLandscape().make_config("quick", ["chains=[{p: 0.3, q: 0.7}]"])
