"""markov-landscape / markov-landscape-3d: tiny end-to-end runs whose claims hold for the default
chains; the verdicts are computed from the stored arrays (a changed (p, q) moves the expected basin,
and tampered endpoints make a claim fail)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from tdlab.experiments.markov_landscape import MarkovLandscape, MarkovLandscape3D, chain_arm
from tdlab.experiments.runner import execute
from tdlab.runs import Run

TINY = ["n_random=150", "n_gaussian=60", "sigmas=[0.05]", "n_traj=2", "traj_points=40", "traj_t_end=20"]


def _claims(run):
    return {c["id"]: c for c in run.summary["claims"]}


def test_landscape_2d_end_to_end_defaults_hold(runs_dir):
    exp = MarkovLandscape()
    cfg = exp.make_config("quick", TINY, members=1)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done" and s["claims_total"] == 6 and s["claims_failed"] == 0, [c["id"] for c in s["claims"] if not c["holds"]]
    c = _claims(run)
    # p + q < 1: a small init goes to a global minimum; p + q > 1: to the local minimum (quadrature ~0 / ~1).
    assert c["p0.2_q0.3/gaussian-sigma0.05"]["expected"] < 1e-6 and c["p0.2_q0.3/gaussian-sigma0.05"]["measured"] == [0.0]
    assert c["p0.5_q0.8/gaussian-sigma0.05"]["expected"] > 1 - 1e-6 and c["p0.5_q0.8/gaussian-sigma0.05"]["measured"] == [1.0]
    assert c["p0.5_q0.8/energy-conserved"]["measured"][0] < 1e-8
    assert c["p0.2_q0.3/basins-match-theorem"]["measured"][0] >= 0.99
    assert (run.path / "figures" / "fig1_landscape.png").stat().st_size > 5000

    # The verdict is computed from the stored endpoints: move every small-init endpoint of the
    # p + q > 1 chain off the local minimum and its Gaussian claim fails.
    arm = chain_arm(0.5, 0.8)
    f = run.path / "arrays" / f"{arm}.safetensors"
    arrays = load_file(str(f))
    fin = torch.empty_like(arrays["gauss_final"])
    fin[..., 0], fin[..., 1] = 1.0, -3.0  # off the w-axis: not the local minimum
    arrays["gauss_final"] = fin
    save_file(arrays, str(f))
    a = exp.analyse(cfg, Run(run.path))
    by_id = {cl.id: cl for cl in a.claims}
    assert not by_id[f"{arm}/gaussian-sigma0.05"].holds
    assert by_id["p0.2_q0.3/gaussian-sigma0.05"].holds


@pytest.mark.parametrize("p,q,local", [(0.6, 0.7, True), (0.3, 0.2, False)])
def test_landscape_2d_expected_basin_follows_p_plus_q(runs_dir, p, q, local):
    exp = MarkovLandscape()
    cfg = exp.make_config("quick", [*TINY, "n_random=60", f"chains=[{{p: {p}, q: {q}}}]"], members=1)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    c = _claims(run)[f"{chain_arm(p, q)}/gaussian-sigma0.05"]
    assert c["holds"] and (c["expected"] > 0.999 if local else c["expected"] < 1e-3)
    assert c["measured"] == [1.0 if local else 0.0]


def test_landscape_3d_end_to_end_attract_and_repel(runs_dir):
    exp = MarkovLandscape3D()
    cfg = exp.make_config("quick", [*TINY[1:], "wide_t_end=5"], members=1)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done" and s["claims_failed"] == 0, [c["id"] for c in s["claims"] if not c["holds"]]
    m = s["measurements"]
    assert m["p0.2_q0.3"]["expected_kind"] == "GLOBAL_MIN"  # origin on Theta_max: repels
    assert m["p0.5_q0.8"]["expected_kind"] == "LOCAL_MIN"  # origin on Theta_min: attracts
    assert m["p0.5_q0.8"]["target_loss"] == pytest.approx(m["p0.5_q0.8"]["marginal_entropy"])
    assert m["p0.2_q0.3"]["target_loss"] == pytest.approx(m["p0.2_q0.3"]["entropy_rate"])
    assert sorted(s["figures"]) == ["figures/fig2_flow_3d.png", "figures/fig5_near_origin.png"]

    # Swap the chains' endpoints: the p + q > 1 chain's endpoints (on the local-minimum plane) are
    # not at a global minimum of the p + q < 1 chain, so its claims fail.
    f_small = run.path / "arrays" / "p0.2_q0.3.safetensors"
    small = load_file(str(f_small))
    big = load_file(str(run.path / "arrays" / "p0.5_q0.8.safetensors"))
    small["gauss_final"] = big["gauss_final"].clone()
    save_file(small, str(f_small))
    by_id = {cl.id: cl for cl in exp.analyse(cfg, Run(run.path)).claims}
    assert not by_id["p0.2_q0.3/gaussian-sigma0.05/limit-set"].holds
    assert not by_id["p0.2_q0.3/gaussian-sigma0.05/final-loss"].holds
    assert by_id["p0.5_q0.8/gaussian-sigma0.05/limit-set"].holds


def test_config_rejects_iid_chain():
    from tdlab.config import ConfigError

    with pytest.raises((ConfigError, ValueError)):
        MarkovLandscape().make_config("quick", ["chains=[{p: 0.3, q: 0.7}]"])
