"""icl-unrestricted (Fig. 3; the whitening diagnostic: tests/probes/test_whitening.py): projections are
compared with the untied model's own optimum of l_(L_tr) (replicate draws), not alpha*; only App. H's
sigma_init = 0.1 rows decide the paper groups; arms that did not move from their alpha*-centred init are
not evaluable with the stage named; every group holds and fails on chosen measurements."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tdlab.experiments.paper002_cross_attention.unrestricted import (
    MOVED,
    IclUnrestricted,
)
from tdlab.run_context import init_arm
from tdlab.seeding import derive_seed
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star

APP_H = MultiModalPrompts()
A_STAR = alpha_star(APP_H)
SPREAD = np.array([-1.0, 0.0, 1.0])
ARMS = ["untied/sigma0.1", "full/sigma0.1", "untied/sigma0.01", "full/sigma0.01"]
pytestmark = pytest.mark.usefixtures("one_thread")
# a few GD steps on a few prompts, and a small whitening diagnostic
TINY_TRAINING = [
    "train.prompts=32",
    "train.steps=5",
    "train.eval_prompts=8",
    "whitening_prompts=16",
    "whitening_contexts=[50]",
    "claims.whitening_bootstrap=20",
]


@pytest.fixture(scope="module")
def tiny(s2):
    over = ["depth=3", "sigmas=[0.1,0.01]", "params=[untied, full]", *TINY_TRAINING]
    return s2.run_tiny(IclUnrestricted(), [*over, "claims.reference_prompts=4096", "claims.reference_draws=3"])


def test_the_reference_is_the_untied_optimum_of_the_setting(tiny, s2):
    cfg, run = tiny
    a = IclUnrestricted().analyse(cfg, run)
    assert [g.id for g in a.paper] == [
        "projections-cluster-around-alpha-star",
        "whitening-decreases-with-layer",
        "whitening-last-below-first",
    ]
    draws = (
        run.metrics()
        .query("arm == 'reference/untied' and name == 'alpha'")
        .groupby("member")["value"]
        .mean()
        .to_numpy()
    )
    row = s2.rows(s2.groups(a)["projections-cluster-around-alpha-star"])["untied/sigma0.01/alpha"]
    assert row.reference.n == 3 and sorted(row.reference.values) == pytest.approx(sorted(draws))
    assert row.expected == pytest.approx(draws.mean()) and abs(row.expected - A_STAR) > 0.05 * A_STAR  # not alpha*
    assert all(g < 1e-4 for g in a.measurements["untied_optimum"]["grad_norm"])  # each draw at a stationary point
    assert {r.id.split("/", 1)[1]: r.provenance for r in s2.groups(a)["whitening-decreases-with-layer"].rows} == {
        "untied/sigma0.1": "paper",
        "full/sigma0.1": "paper",
        "untied/sigma0.01": "ours",
        "full/sigma0.01": "ours",
    }


def _patch(s2, run, cfg, a, good: dict[str, bool], *, far: float = 1.0):
    """Every arm trained (test MSE 0.5) and moved ``far`` x its initial offset from (alpha*, -alpha*); projections
    at the untied optimum (good) or one alpha away from it (bad); whitening decreasing (good) or rising (bad)."""
    exp = IclUnrestricted()
    ref_a = np.mean(a.measurements["untied_optimum"]["alpha_layer_mean"])
    ref_b = np.mean(a.measurements["untied_optimum"]["beta_layer_mean"])
    m, arrays = {}, {}
    for arm in ARMS:
        ok = good[arm]
        m[(arm, "test_loss", None)] = 0.5
        for t in range(3):
            m[(arm, "alpha_hat", t)] = (ref_a if ok else 2 * ref_a) * (1 + 0.01 * SPREAD)
            m[(arm, "beta_hat", t)] = (ref_b if ok else ref_b - ref_a) + 0.01 * ref_a * SPREAD
        for t, w in enumerate([1.0, 0.9, 0.8, 0.7] if ok else [1.0, 0.5, 0.9, 0.95]):
            m[(arm, "whitening_median_L50", t)] = w * (1 + 1e-3 * SPREAD)
        param = arm.split("/")[0]
        init = {k: v.double().numpy() for k, v in run.arrays(init_arm(arm)).items()}
        centre = {"alpha": exp.centre(param, 3, APP_H.d, A_STAR), "beta": exp.centre(param, 3, APP_H.d, -A_STAR)}
        arrays[arm] = {k: init[k] + far * (init[k] - centre[k]) for k in centre}
    return s2.Patched(run, m, arrays)


def test_only_the_seeds_sigma_decides_the_paper_groups(tiny, s2, at_paper_length):
    cfg, run = tiny
    exp = IclUnrestricted()
    at_paper_length(IclUnrestricted)
    a = exp.analyse(cfg, run)
    gids = ("projections-cluster-around-alpha-star", "whitening-decreases-with-layer", "whitening-last-below-first")
    paper_good = {arm: arm.endswith("0.1") for arm in ARMS}  # sigma 0.1 right, sigma 0.01 (ours) wrong
    # the projections' 25 % and the whitening noise margin are ours and uncalibrated: a row they decide as failing
    # stays not resolved (it cannot refute the paper); the last-below-first direction is the paper's
    failed = {gid: "fails" if gid == "whitening-last-below-first" else "not resolved" for gid in gids}
    g = s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, a, paper_good)))
    for gid in gids:
        assert g[gid].verdict == "holds", gid
        assert {r.verdict for r in g[gid].rows if r.provenance == "ours"} == {failed[gid]}, gid
    paper_bad = {arm: not arm.endswith("0.1") for arm in ARMS}
    g = s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, a, paper_bad)))
    for gid in gids:
        assert g[gid].verdict == failed[gid], gid
        assert {r.verdict for r in g[gid].rows if r.provenance == "ours"} == {"holds"}, gid
        if failed[gid] == "not resolved":
            assert g[gid].cause == "uncalibrated threshold", gid


def test_a_rise_within_the_noise_is_none_and_an_arm_at_its_init_is_not_evaluable(tiny, s2):
    cfg, run = tiny
    exp = IclUnrestricted()
    a = exp.analyse(cfg, run)
    p = _patch(s2, run, cfg, a, {arm: True for arm in ARMS})
    noise = {arm: a.measurements[arm]["whitening_layer_noise"] for arm in ARMS}
    assert all(n > 0 for n in noise.values())
    small = 0.5 * cfg.claims.whitening_noise_z * min(noise.values())
    m = dict(p._m)
    for arm in ARMS:
        for t, w in enumerate([1.0, 0.8, 0.8 * (1 + small), 0.5]):
            m[(arm, "whitening_median_L50", t)] = w * (1 + 1e-4 * SPREAD)
    g = s2.groups(exp.analyse(cfg, s2.Patched(run, m, p._a)))
    assert g["whitening-decreases-with-layer"].verdict == "holds"
    still = s2.groups(exp.analyse(cfg, _patch(s2, run, cfg, a, {arm: True for arm in ARMS}, far=0.0)))
    for gid in ("projections-cluster-around-alpha-star", "whitening-decreases-with-layer"):
        assert {r.verdict for r in still[gid].rows} == {"not evaluable"}
        assert {r.cause for r in still[gid].rows} == {"stage not reached"} and still[gid].rows[0].stage == MOVED.id


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_stop_between_reference_draws_keeps_the_draws_stored_and_a_resume_draws_only_the_rest(
    s2, tmp_path, monkeypatch, lanes
):
    """The paper's reference draws take minutes each: a stop (``--until``, SIGTERM) starts no further draw,
    the draws that were running finish and are stored (one on one lane, two on two), and the resumed run
    draws only the missing ones, to the rows of an uninterrupted run."""
    import tdlab.experiments.paper002_cross_attention.unrestricted as mod
    from tdlab.run_context import RunContext
    from tdlab.runs import RunWriter
    from tdlab.train.lanes import limited_to
    from tdlab.train.stopping import RunStopped, request_stop, stopping

    exp = IclUnrestricted()
    cfg = exp.make_config("quick", ["depth=2", "claims.reference_prompts=1024", "claims.reference_draws=3"])
    real, calls, running = mod.untied_optimum, [], threading.Barrier(lanes)

    def counted(*args, **kw):
        calls.append(kw["seed"])
        if stop_after_first and len(calls) <= lanes:
            running.wait(timeout=60)  # every lane has its draw before the first one ends
        out = real(*args, **kw)
        if stop_after_first and len(calls) <= lanes:
            request_stop()
        return out

    monkeypatch.setattr(mod, "untied_optimum", counted)
    stop_after_first = False
    with RunWriter(tmp_path / "whole", exp.name) as whole, limited_to(lanes):
        exp._draw_reference(cfg, RunContext(whole, progress=False, live=None))
        want = whole.arm_rows(exp.REFERENCE)
        whole.keep = True
    assert len(calls) == 3 and ({m for _, m, _, _ in want}) == {0, 1, 2}

    calls.clear()
    stop_after_first = True
    writer = RunWriter(tmp_path / "cut", exp.name)
    writer.write_config({"experiment": exp.name})  # what a resume reopens
    with stopping(signals=False), pytest.raises(RunStopped), limited_to(lanes):
        exp._draw_reference(cfg, RunContext(writer, progress=False, live=None))
    kept = set(range(lanes))  # the draws running when the stop came
    assert sorted(calls) == sorted(derive_seed(cfg.seed, "untied-reference", r) for r in kept)
    assert {m for _, m, _, _ in writer.arm_rows(exp.REFERENCE)} == kept
    assert writer.keep and not RunContext(writer).done(exp.REFERENCE)
    writer.release()

    calls.clear()
    stop_after_first = False
    again = RunWriter.reopen(writer.final)
    with limited_to(lanes):
        exp._draw_reference(cfg, RunContext(again, progress=False, live=None))
    assert sorted(calls) == sorted(derive_seed(cfg.seed, "untied-reference", r) for r in range(lanes, 3))
    assert again.arm_rows(exp.REFERENCE) == want
    again.release()


def test_the_arms_train_on_lanes_to_the_numbers_of_one_lane_and_a_kill_before_their_diagnostics_is_measured_on_resume(
    tmp_path, monkeypatch, stored_fits
):
    """The arms are independent fits: on two one-thread lanes they end with the numbers of one lane, bit for
    bit. Their diagnostics (projections, whitening) are measured once every fit is stored, so a run killed in
    between keeps the fits, and the resume measures what is missing to the rows of a run never stopped."""
    from tdlab import runner
    from tdlab.costs.work import fit_arms
    from tdlab.runs import Run, arrays_file
    from tdlab.train.lanes import limited_to

    exp = IclUnrestricted()
    over = ["depth=2", "params=[untied, diagonal]", *TINY_TRAINING]
    cfg = exp.make_config("quick", [*over, "claims.reference_prompts=256", "claims.reference_draws=2"], members=2)

    def metrics(path):
        return Run(path).metrics().sort_values(["arm", "name", "member", "step"]).reset_index(drop=True)

    with limited_to(1):
        one = runner.execute(exp, cfg, "quick", tmp_path / "one", progress=False)
    with limited_to(2):
        two = runner.execute(exp, cfg, "quick", tmp_path / "two", progress=False)
    assert one.summary["status"] == two.summary["status"] == "done"
    assert metrics(one.path).equals(metrics(two.path))
    trained = {f"{p}/sigma{s:g}" for p in cfg.params for s in cfg.sigmas}
    assert trained <= set(metrics(one.path)["arm"]) and len(trained) == 4
    # the fits it declares (a stopped run's pace, tdlab batch) are those it stores, less the references it computes
    references = {exp.REFERENCE.replace("/", "__"), "tied-reference"}
    assert stored_fits(one) - references == {a.replace("/", "__") for a in fit_arms(exp, cfg)}

    real, measured = IclUnrestricted._diagnostics, []

    def killed(*args, **kw):
        if not measured:
            measured.append(args[1])
            raise KeyboardInterrupt  # as a kill between the stored fits and their diagnostics
        return real(*args, **kw)

    monkeypatch.setattr(IclUnrestricted, "_diagnostics", staticmethod(killed))
    with limited_to(2), pytest.raises(KeyboardInterrupt):
        runner.execute(exp, cfg, "quick", tmp_path / "cut", progress=False, run_id="r")
    staged = tmp_path / "cut" / ".staging-r"
    assert measured and all(arrays_file(staged, arm).is_file() for arm in trained)  # every fit kept
    assert not any(n == "alpha_hat" for n in Run(staged).metrics()["name"])  # no diagnostics yet
    monkeypatch.setattr(IclUnrestricted, "_diagnostics", staticmethod(real))
    resumed = runner.resume(tmp_path / "cut" / "r", progress=False)
    assert resumed.summary["status"] == "done" and metrics(resumed.path).equals(metrics(one.path))
    assert resumed.summary["claims"] == one.summary["claims"]
