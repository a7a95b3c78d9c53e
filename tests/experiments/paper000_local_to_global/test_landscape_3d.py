"""markov-landscape-3d: a tiny end-to-end run (the origin attracts small inits for p + q > 1 and repels
them for p + q < 1); each group fails on stored endpoints or trajectories that contradict it, and
endpoints that have not reached a critical set leave the rows not evaluable."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tdlab.experiments.paper000_local_to_global.landscape_3d import MarkovLandscape3D
from tdlab.runner import execute
from tdlab.runs import Run
from tdlab.theory import markov_landscape as ml
from tdlab.theory.markov_landscape import CriticalKind as CK

TINY = ["n_gaussian=120", "sigmas=[0.05]", "n_traj=2", "traj_points=40", "traj_t_end=20"]


@pytest.fixture(scope="module")
def run3d(tmp_path_factory):
    exp = MarkovLandscape3D()
    # one member: 400 endpoints per σ resolve a fraction of 1 against min_fraction = 0.99 (Wilson lower 0.9905)
    cfg = exp.make_config("quick", [*TINY, "n_gaussian=400", "wide_t_end=5"], members=1)
    return exp, cfg, execute(exp, cfg, "quick", tmp_path_factory.mktemp("runs3d"), progress=False)


def test_landscape_3d_end_to_end_attract_and_repel(run3d, rows_of):
    _, _, run = run3d
    s = run.summary
    assert s["status"] == "done" and s["claims_failed"] == 0 and s["sanity_failed"] == 0
    assert [g["id"] for g in s["claims"]] == ["small-init-limit", "small-init-final-loss"]
    assert [g["id"] for g in s["sanity"]] == ["energy-conserved"]
    assert all(g["verdict"] == "holds" and len(g["rows"]) == 2 for g in s["claims"])
    m = s["measurements"]
    assert m["p0.2_q0.3"]["expected_kind"] == "GLOBAL_MIN"  # origin on Θ_max: repels
    assert m["p0.5_q0.8"]["expected_kind"] == "LOCAL_MIN"  # origin on Θ_min: attracts
    assert m["p0.5_q0.8"]["target_loss"] == pytest.approx(m["p0.5_q0.8"]["marginal_entropy"])
    assert m["p0.2_q0.3"]["target_loss"] == pytest.approx(m["p0.2_q0.3"]["entropy_rate"])
    r = rows_of(s["claims"])
    assert r["small-init-limit/p0.5_q0.8/sigma0.05"]["trials"] == 400
    assert r["small-init-final-loss/p0.5_q0.8/sigma0.05"]["successes"] == 400
    assert sorted(s["figures"]) == ["figures/fig2_flow_3d.png", "figures/fig5_near_origin.png"]


def test_landscape_3d_each_group_fails_on_contradicting_arrays(run3d, copy_run, rows_of, tamper):
    # Swap the chains' endpoints: the p + q > 1 chain's endpoints (on the local-minimum plane) are not
    # at a global minimum of the p + q < 1 chain, so its rows fail; a kicked trajectory breaks energy.
    exp, cfg, run = run3d
    path = copy_run(run)
    big = load_file(str(path / "arrays" / "p0.5_q0.8.safetensors"))
    codes = ml.classify_critical(big["gauss_final"][0, 0], 0.2, 0.3, atol=cfg.limit_atol)
    assert not bool((codes == int(CK.NONE)).any())  # settled on the p+q<1 chain's sets too: a finding, not a stage

    def kicked(tr):
        tr = tr.clone()
        tr[:, tr.shape[1] // 2 :, :, 2] += 0.3
        return tr

    tamper(path, "p0.2_q0.3", gauss_final=lambda _: big["gauss_final"].clone(), wide=kicked)
    r = rows_of(exp.analyse(cfg, Run(path)).groups)
    assert r["small-init-limit/p0.2_q0.3/sigma0.05"].verdict == "fails"
    assert r["small-init-final-loss/p0.2_q0.3/sigma0.05"].verdict == "fails"
    assert r["small-init-limit/p0.5_q0.8/sigma0.05"].verdict == "holds"
    assert r["energy-conserved/p0.2_q0.3"].verdict == "fails" and r["energy-conserved/p0.5_q0.8"].verdict == "holds"


def test_landscape_3d_unsettled_endpoints_are_not_evaluable(run3d, copy_run, rows_of, tamper):
    exp, cfg, run = run3d
    path = copy_run(run)

    def some_off(x):  # 3 of 400 endpoints (0.75 % < 1 %) moved off every critical set
        y = x.clone()
        y[0, 0, :3] = torch.tensor([1.0, -3.0, 0.5], dtype=y.dtype)
        return y

    assert int(ml.classify_critical(torch.tensor([1.0, -3.0, 0.5], dtype=torch.float64), 0.5, 0.8, atol=1e-3)) == int(
        CK.NONE
    )
    tamper(path, "p0.5_q0.8", gauss_final=some_off)
    a = exp.analyse(cfg, Run(path))
    r = rows_of(a.groups)
    # within the tolerated share: judged (397/400 on Wilson's interval straddles 0.99)
    for g in ("small-init-limit", "small-init-final-loss"):
        row = r[f"{g}/p0.5_q0.8/sigma0.05"]
        assert row.mean == pytest.approx(397 / 400) and row.verdict == "not resolved" and row.cause == "spread", g

    def many_off(x):  # 10 of 400: the flow has not settled
        y = x.clone()
        y[0, 0, :10] = torch.tensor([1.0, -3.0, 0.5], dtype=y.dtype)
        return y

    tamper(path, "p0.5_q0.8", gauss_final=many_off)
    r = rows_of(exp.analyse(cfg, Run(path)).groups)
    for g in ("small-init-limit", "small-init-final-loss"):
        row = r[f"{g}/p0.5_q0.8/sigma0.05"]
        assert row.verdict == "not evaluable" and row.cause == "stage not reached" and row.stage == "flow-settled"
