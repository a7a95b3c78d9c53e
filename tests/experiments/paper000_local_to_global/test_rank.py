"""markov-rank: a tiny end-to-end run stores what the claims need and its measured values match an
independent numpy recomputation; on synthetic run directories whose weights and curves the test
chooses exactly, every claim group holds on App. C's structure and fails (or is not resolved) when the
weights or curves contradict it; claims "at convergence" are not evaluable on a member that did not
reach a minimum; the bias step is not evaluable where the bias is already optimal; Fig. 6 is a sanity
check at round-off; SGD rows are ours."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.claims import Measurements, judge
from tdlab.experiments.paper000_local_to_global.rank import AT_GLOBAL_MINIMUM, MarkovRank
from tdlab.probes.sec2_weights import MATRICES, bias_step_excess
from tdlab.runner import execute
from tdlab.runs import RunWriter

EXP = MarkovRank()
FIG3 = {
    "fig3-rank-one",
    "fig3-aligned-with-embedding",
    "fig3-embedding-on-hypercube",
    "fig3-other-matrices-rank-one",
    "fig3-converged",
}
APP_C = {
    "app-c-positions-along-e",
    "app-c-positions-half-e",
    "app-c-positions-constant",
    "app-c-w2-transpose-w1",
    "app-c-wo-wv-rank-one",
    "app-c-wo-wv-along-e",
    "app-c-wq-wk-rank-one",
    "app-c-wq-wk-along-e",
    "app-c-attention-off",
}
BIAS = "one-extra-bias-step-full-model"
SANITY = {"standard-init-not-rank-one", "rank-one-init-is-rank-one", "fig6-stays-rank-one"}


def chain_truth(p: float, q: float) -> tuple[float, float]:
    """(entropy rate, H(pi)) of the binary chain, in nats, from first principles."""
    h = lambda x: -x * math.log(x) - (1 - x) * math.log(1 - x)  # noqa: E731
    pi1 = p / (p + q)
    return (1 - pi1) * h(p) + pi1 * h(q), h(pi1)


def _np_ratio(w: np.ndarray) -> np.ndarray:
    s = np.linalg.svd(w, compute_uv=False)
    return s[:, 1] / s[:, 0]


def _np_right_cos(w: np.ndarray, e: np.ndarray) -> np.ndarray:
    _, _, vh = np.linalg.svd(w)
    return np.abs(np.sum(vh[:, 0, :] * e, 1)) / np.linalg.norm(e, axis=1)


def _np_best_cos(w: np.ndarray, e: np.ndarray) -> np.ndarray:
    u, _, vh = np.linalg.svd(w)
    en = e / np.linalg.norm(e, axis=1, keepdims=True)
    return np.maximum(np.abs(np.sum(u[:, :, 0] * en, 1)), np.abs(np.sum(vh[:, 0, :] * en, 1)))


# --- config --------------------------------------------------------------------------------------------


def test_default_optimiser_is_table_2_adamw_and_sgd_gets_its_own_step_size():
    t = EXP.make_config("quick").train
    assert (t.optimizer, t.lr, t.beta1, t.beta2, t.weight_decay, t.schedule) == (
        "adamw",
        1e-3,
        0.9,
        0.95,
        1e-3,
        "cosine",
    )
    assert EXP.make_config("quick", ["train.optimizer=sgd"]).train.lr == 0.3
    assert EXP.make_config("quick", ["train.optimizer=sgd", "train.lr=3.0"]).train.lr == 3.0


# --- tiny end-to-end run -------------------------------------------------------------------------------


def test_tiny_run_end_to_end_measurements_match_numpy_recomputation(runs_dir):
    cfg = EXP.make_config(
        "quick",
        [
            "train.steps=12",
            "train.seq_len=8",
            "train.eval_every=6",
            "train.eval_batches=1",
            "train.log_every=6",
            "probe_every=4",
        ],
        members=2,
    )
    run = execute(EXP, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done"
    assert {g["id"] for g in s["claims"]} == FIG3 | APP_C | {BIAS} and {g["id"] for g in s["sanity"]} == SANITY
    rows = {r["id"]: r for g in s["claims"] + s["sanity"] for r in g["rows"]}
    final = {k: v.double().numpy() for k, v in run.arrays("standard").items()}
    e = final["e"]
    assert rows["fig3-rank-one/W_V"]["measured"] == pytest.approx(_np_ratio(final[MATRICES["W_V"]]), rel=1e-9)
    assert rows["fig3-rank-one/W_1"]["measured"] == pytest.approx(_np_ratio(final[MATRICES["W_1"]]), rel=1e-9)
    assert rows["fig3-other-matrices-rank-one/W_Q"]["measured"] == pytest.approx(
        _np_ratio(final[MATRICES["W_Q"]]), rel=1e-9
    )
    assert rows["fig3-aligned-with-embedding/W_1"]["measured"] == pytest.approx(
        _np_right_cos(final[MATRICES["W_1"]], e), abs=1e-9
    )
    assert rows["fig3-aligned-with-embedding/W_V"]["measured"] == pytest.approx(
        _np_best_cos(final[MATRICES["W_V"]], e), abs=1e-9
    )
    mag = np.abs(e)
    assert rows["fig3-embedding-on-hypercube/e"]["measured"] == pytest.approx(mag.std(1) / mag.mean(1), rel=1e-9)
    df = run.metrics()
    loss = df[(df.arm == "standard") & (df.step == 12)].pivot(index="member", columns="name", values="value")
    assert rows["fig3-converged/standard"]["measured"] == pytest.approx(
        (loss["test_loss"] - loss["test_loss@bayes"]).tolist(), abs=1e-12
    )
    # 12 steps from σ = 0.001 reach no minimum: every claim "at convergence" is not evaluable, never failing.
    for rid in ("fig3-rank-one/W_V", "app-c-attention-off/standard"):
        assert rows[rid]["verdict"] == "not evaluable" and rows[rid]["cause"] in ("stage not reached", "not trained"), (
            rid
        )
    # Both arms were gated against log 2, the uniform predictor's loss.
    assert s["arms"]["standard"]["trivial_error"] == pytest.approx(math.log(2))
    # The trajectory was recorded every 4 steps from the initial weights on (the build that ctx.fit
    # makes for the initial parameters does not count), and the end-state rows carry its drift.
    traj = df[(df.arm == "rank-one") & (df.name == "sv_ratio/W_1")]
    assert sorted(traj.step.unique()) == [0, 4, 8] and sorted(traj.member.unique()) == [0, 1]
    assert rows["fig3-rank-one/W_V"]["drift"] is not None
    init = {k: v.double().numpy() for k, v in run.arrays("rank-one@init").items()}
    at0 = traj[traj.step == 0].sort_values("member").value.to_numpy()
    assert at0 == pytest.approx(_np_ratio(init[MATRICES["W_1"]]), abs=1e-9)
    worst = np.maximum.reduce(
        [
            _np_ratio(init[MATRICES["W_V"]]),
            _np_ratio(run.arrays("rank-one")[MATRICES["W_V"]].double().numpy()),
            df[(df.arm == "rank-one") & (df.name == "sv_ratio/W_V")].groupby("member").value.max().to_numpy(),
        ]
    )
    assert rows["fig6-stays-rank-one/W_V"]["measured"] == pytest.approx(worst, rel=1e-9)
    assert rows["fig6-stays-rank-one/W_V"]["verdict"] == "holds"  # by construction, to round-off
    # From σ = 0.001 the logits are ≈ b: one bias step of 4 is nearly Newton's on a 1-D logistic fit.
    assert rows[f"{BIAS}/standard/init"]["verdict"] == "holds" and rows[f"{BIAS}/standard/init"]["arms"] == [
        "standard@init"
    ]
    assert s["figures"] == ["figures/spectra.png", "figures/fig3_fig6_matrices.png", "figures/rank_evolution.png"]
    assert all((run.path / f).stat().st_size > 5000 for f in s["figures"])


# --- synthetic run directories: every group holds on App. C's structure and fails off it ----------------

STEPS = [0, 400, 720, 760, 800]


def _at_optimal_bias(cfg, states, planted):
    """The states with b set to argmin_b L(theta, b) on the analysis' sequences (an optimum is at its
    optimal bias; the planted weights are not otherwise trained)."""
    stacked = {k: torch.stack([st[k] for st in states]) for k in states[0]}
    b_star = bias_step_excess(cfg.arm_model(), stacked, planted.bias_tokens(cfg), 4.0)["b_star"]
    return [{**st, "b": torch.tensor(float(b), dtype=torch.float32)} for st, b in zip(states, b_star, strict=True)]


@pytest.fixture
def write_run(tmp_path, planted):
    """``write_run(name, final, gaps=None, init=None, trajectory=None, overrides=(), bias_offset=0.0)``.

    Per-arm member states ``final`` ({arm: [state, ...]}), initial states ``init`` (default: rank-one arm
    = its final states, standard = Gaussian), test-loss curves whose gap to the Bayes predictor on the
    same batches follows ``gaps`` ({arm: per-member curves over STEPS}, default flat 0; the unigram loss
    sits H(π) − rate above the Bayes loss), optional trajectory rows ({arm: rows}). Every stored bias is
    the optimal one for its weights, the final and initial ones shifted by ``bias_offset``."""

    def write(name, final, gaps=None, init=None, trajectory=None, overrides=(), bias_offset=0.0):
        rng = np.random.default_rng(123)
        members = len(final["standard"])
        cfg = EXP.make_config("quick", ["train.seq_len=8", *overrides], members=members)
        rate, hpi = chain_truth(cfg.task.p, cfg.task.q)
        with RunWriter(tmp_path / "synthetic", EXP.name, run_id=name) as w:
            w.write_config({"experiment": EXP.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
            for arm, sts in final.items():
                g = (gaps or {}).get(arm, [[0.0] * len(STEPS)] * members)
                rows = []
                for m in range(members):
                    for i, s in enumerate(STEPS):
                        bayes = rate + 0.002 * m  # the batches' own Bayes loss (finite-sample)
                        rows += [
                            (s, m, "test_loss@bayes", bayes),
                            (s, m, "test_loss@unigram", bayes + hpi - rate),
                            (s, m, "test_loss", 0.69 if s == 0 else bayes + g[m][i]),
                        ]
                w.add_metrics(arm, rows)
                shift = lambda sts: [{**st, "b": st["b"] + bias_offset} for st in _at_optimal_bias(cfg, sts, planted)]  # noqa: E731
                w.save_arrays(arm, shift(sts))
                default_init = sts if arm == "rank-one" else [planted.gaussian(8, 8, rng) for _ in sts]
                w.save_arrays(f"{arm}@init", shift((init or {}).get(arm, default_init)))
            for arm, rows in (trajectory or {}).items():
                w.add_metrics(arm, rows)
            run = w.finish()
        return cfg, run

    return write


def _analyse(cfg, run):
    a = EXP.analyse(cfg, run)
    return a, {g.id: g for g in a.groups}, {r.id: r for g in a.groups for r in g.rows}


@pytest.fixture
def good(planted):
    def make(n=3, seed=0):
        rng = np.random.default_rng(seed)
        return [planted.rank_one(8, 8, rng) for _ in range(n)]

    return make


def test_app_c_structure_holds_every_group(write_run, good):
    cfg, run = write_run("good", {"standard": good(), "rank-one": good(seed=1)})
    a, groups, rows = _analyse(cfg, run)
    assert set(groups) == FIG3 | APP_C | {BIAS} | SANITY
    assert {g.id for g in a.sanity_groups} == SANITY
    assert all(groups[g].verdict == "holds" for g in FIG3 | APP_C | SANITY), [
        r.describe() for r in rows.values() if not r.holds
    ]
    assert rows["fig3-rank-one/W_V"].measured.values == pytest.approx([0.0] * 3, abs=1e-6)
    assert rows["fig3-aligned-with-embedding/W_1"].measured.values == pytest.approx([1.0] * 3, abs=1e-6)
    # provenance: the standard arm under AdamW is the seed's; the rank-one arm (our init) is ours, and its
    # by-construction App. C statements are not measured
    assert (
        rows["app-c-attention-off/standard"].provenance == "paper"
        and rows["app-c-attention-off/rank-one"].provenance == "ours"
    )
    assert "app-c-wq-wk-rank-one/rank-one" not in rows and "app-c-wo-wv-along-e/rank-one" not in rows
    # every stored bias is at its optimum: there is nothing for one step to do, so no row is evaluable
    assert groups[BIAS].verdict == "not evaluable" and all(r.cause == "stage not reached" for r in groups[BIAS].rows)
    assert any("AdamW" in n for n in a.notes)
    assert any(n.startswith("standard: final test loss") and "|cos| with e — W_V" in n for n in a.notes)
    # the generic notes say each Fig. 3 statement's verdict: all 5 hold
    fig3 = [g for g in a.groups if g.id.startswith("fig3-")]
    assert len(fig3) == 5 and all(g.verdict == "holds" for g in fig3)
    assert all(
        any(n.startswith("Holds — ") and f"({g.id})" in n for n in a.notes)
        if g.kind == "paper"
        else any(n.startswith("Sanity checks: ") and g.id in n for n in a.notes)
        for g in fig3
    )
    assert any(n.startswith("Fig. 6: the rank-one init stays rank one by construction") for n in a.notes)
    assert any(
        n.startswith("standard, one extra bias step") and "leaves nothing for the step to do" in n for n in a.notes
    )


def _perturbed(good, which: str):
    """Every member made to contradict one statement, by about the same amount (a tight interval)."""
    bad = [dict(s) for s in good]
    for st in bad:
        e = st["e"].double().numpy()
        u1 = e / np.linalg.norm(e)
        if which == "rank":  # W_V, W_1, W_Q: second direction with sigma2/sigma1 = 0.5 exactly
            for name in ("W_V", "W_1", "W_Q"):
                w = st[MATRICES[name]].double().numpy()
                m, n = w.shape
                x = np.zeros(m)
                x[0] = 1.0
                y = np.eye(n)[1] - u1 * u1[1]
                y /= np.linalg.norm(y)
                x1 = np.zeros(m)
                x1[1] = 1.0
                st[MATRICES[name]] = torch.tensor(2.0 * np.outer(x1, u1) + 1.0 * np.outer(x, y), dtype=torch.float32)
        elif which == "align":  # rank one, but along a direction orthogonal to e
            ortho = np.zeros(8)
            ortho[0], ortho[1] = e[1], -e[0]
            st[MATRICES["W_1"]] = torch.tensor(np.outer(np.ones(32), ortho), dtype=torch.float32)
            st[MATRICES["W_V"]] = torch.tensor(np.outer(ortho, ortho), dtype=torch.float32)
        elif which == "cube":  # |e_i| alternately 0.6c and 1.4c: spread 0.4, |cos| with alpha still 0.93
            st["e"] = torch.tensor(e * np.array([0.6, 1.4] * 4), dtype=torch.float32)
    return bad


@pytest.mark.parametrize(
    "which,failing",
    [
        ("rank", {"fig3-rank-one", "fig3-other-matrices-rank-one"}),
        ("align", {"fig3-aligned-with-embedding"}),
        ("cube", {"fig3-embedding-on-hypercube"}),
    ],
)
def test_weights_that_contradict_fig3_fail_their_group(write_run, good, which, failing):
    cfg, run = write_run(which, {"standard": _perturbed(good(), which), "rank-one": good(seed=1)})
    _, groups, rows = _analyse(cfg, run)
    verdicts = {gid: g.verdict for gid, g in groups.items() if gid in FIG3}  # App. C's groups: tests below
    assert {gid for gid, v in verdicts.items() if v == "fails"} == failing, verdicts
    if which == "rank":
        assert rows["fig3-rank-one/W_V"].measured.values == pytest.approx([0.5] * 3, abs=1e-6)
        assert (
            rows["fig3-rank-one/W_V"].verdict == "fails" and rows["fig3-other-matrices-rank-one/W_2"].verdict == "holds"
        )
    if which == "align":
        assert max(rows["fig3-aligned-with-embedding/W_1"].measured.values) < 1e-6


def test_members_that_disagree_leave_the_rank_claim_not_resolved(write_run, good):
    g = good()
    mixed = [g[0], _perturbed(g, "rank")[1], g[2]]  # one member at 0.5, two at 0
    cfg, run = write_run("mixed", {"standard": mixed, "rank-one": good(seed=1)})
    _, _, rows = _analyse(cfg, run)
    assert rows["fig3-rank-one/W_V"].verdict == "not resolved"


def test_claims_at_convergence_need_a_minimum_first(write_run, good):
    rate, hpi = chain_truth(0.2, 0.3)
    # Stuck at H(π) (the local minimum): the Fig. 3 structure is judged (a minimum), fig3-converged is not
    # evaluable (still on the plateau: Thm. 8's global minimum may come later), App. C (global minima) neither.
    stuck = [[0.0] + [hpi - rate] * 4 for _ in range(3)]
    cfg, run = write_run("stuck", {"standard": good(), "rank-one": good(seed=1)}, gaps={"standard": stuck})
    _, groups, rows = _analyse(cfg, run)
    assert rows["fig3-rank-one/W_V"].verdict == "holds"
    assert (
        rows["fig3-converged/standard"].verdict == "not evaluable"
        and rows["fig3-converged/standard"].stage == "left-plateau"
    )
    assert (
        rows["app-c-attention-off/standard"].verdict == "not evaluable"
        and "global minimum" in rows["app-c-attention-off/standard"].reason
    )
    # Past the plateau but 0.05 nats above the Bayes loss: fig3-converged fails; Fig. 3's structure is not
    # evaluable (no minimum reached).
    between = [[0.0] + [0.05] * 4 for _ in range(3)]
    cfg, run = write_run("between", {"standard": good(), "rank-one": good(seed=1)}, gaps={"standard": between})
    _, groups, rows = _analyse(cfg, run)
    assert groups["fig3-converged"].verdict == "fails"
    assert rows["fig3-converged/standard"].measured.values == pytest.approx([0.05] * 3, abs=1e-12)
    assert rows["fig3-rank-one/W_V"].verdict == "not evaluable" and rows["fig3-rank-one/W_V"].stage == "at-a-minimum"
    # At the minimum but still falling fast over the end of training: not resolved, never a verdict.
    falling = [[0.0, 0.1, 0.05, 0.025, 0.0] for _ in range(3)]
    cfg, run = write_run("falling", {"standard": good(), "rank-one": good(seed=1)}, gaps={"standard": falling})
    _, groups, rows = _analyse(cfg, run)
    assert (
        groups["fig3-converged"].verdict == "not resolved" and "still moving" in rows["fig3-converged/standard"].reason
    )


def test_a_rank_spike_during_training_fails_the_stays_rank_one_sanity_check(write_run, good):
    g = good(3)
    # Init and final weights are exactly rank one; the recorded trajectory of W_1 rises to about 0.3 in
    # every member, that of W_O to 0.5; W_V stays at round-off.
    rows = [(s, m, "sv_ratio/W_1", 0.3 + 0.01 * m if s == 400 else 1e-7) for m in range(3) for s in (0, 400, 775)]
    rows += [(s, m, "sv_ratio/W_O", 0.5 if s == 400 else 1e-7) for m in range(3) for s in (0, 400, 775)]
    rows += [(s, m, "sv_ratio/W_V", 1e-7) for m in range(3) for s in (0, 400, 775)]
    cfg, run = write_run("spike", {"standard": g, "rank-one": g}, trajectory={"rank-one": rows})
    _, groups, r = _analyse(cfg, run)
    assert r["fig6-stays-rank-one/W_1"].measured.values == pytest.approx([0.3, 0.31, 0.32], abs=1e-9)
    assert r["fig6-stays-rank-one/W_1"].verdict == "fails" and r["fig6-stays-rank-one/W_O"].verdict == "fails"
    assert r["fig6-stays-rank-one/W_V"].holds and groups["fig6-stays-rank-one"].verdict == "fails"
    assert groups["fig6-stays-rank-one"].kind == "sanity"


def test_sanity_groups_fail_when_their_premise_is_false(write_run, good, planted):
    g = good()
    # The "standard" init is rank one already and the "rank-one" init is Gaussian: both sanity checks fail.
    rng = np.random.default_rng(5)
    cfg, run = write_run(
        "premise",
        {"standard": g, "rank-one": g},
        init={"standard": g, "rank-one": [planted.gaussian(8, 8, rng) for _ in g]},
    )
    _, groups, _ = _analyse(cfg, run)
    assert groups["standard-init-not-rank-one"].verdict == "fails"
    assert groups["rank-one-init-is-rank-one"].verdict == "fails"
    assert groups["fig6-stays-rank-one"].verdict == "fails"  # the max over training includes the init


def test_sgd_rows_are_ours_and_decide_no_paper_group(write_run, good):
    _, run = write_run("sgd", {"standard": good(), "rank-one": good(seed=1)})
    cfg = EXP.make_config("quick", ["train.seq_len=8", "train.optimizer=sgd"], members=3)
    a, groups, rows = _analyse(cfg, run)
    assert any("SGD at lr 0.3" in n and "not the seed's setting" in n for n in a.notes)
    assert rows["fig3-rank-one/W_V"].provenance == "ours" and rows["fig3-rank-one/W_V"].verdict == "holds"
    assert groups["fig3-rank-one"].verdict == "not evaluable" and groups["fig3-rank-one"].cause == "no paper rows"


# --- App. C's structure and the bias step: each group fails on weights that contradict it ---------------


def _contradict_app_c(good, which: str):
    """Every member made to contradict one App. C statement (the others left as planted)."""
    bad = []
    for st in good:
        st = dict(st)
        e = st["e"].double().numpy()
        alpha = e / np.linalg.norm(e)
        ortho = np.zeros(8)
        ortho[0], ortho[1] = alpha[1], -alpha[0]
        ortho /= np.linalg.norm(ortho)
        if which == "positions-sign":  # p_n = +(e/2) alpha: the right length, the wrong side
            st["wpe"] = -st["wpe"]
        elif which == "positions-half":  # p_n = -(e/5) alpha
            st["wpe"] = st["wpe"] * 0.4
        elif which == "positions-vary":  # p_n alternate between -0.1 e and -0.9 e: mean -e/2, spread 0.8
            st["wpe"] = st["wpe"] * torch.tensor([0.2, 1.8] * 4, dtype=torch.float32)[:, None]
        elif which == "w2-sign":  # W_2 = -W_1^T: App. D's p+q>1 structure on a p+q<1 chain
            st[MATRICES["W_2"]] = -st[MATRICES["W_2"]]
        elif which == "w2-random":  # W_1^T plus noise three times its size: cos_F ~ 0.3, still positive
            noise = 3.0 * np.random.default_rng(0).normal(size=(8, 32))
            st[MATRICES["W_2"]] = st[MATRICES["W_2"]] + torch.tensor(noise, dtype=torch.float32)
        elif which == "wo-wv-left":  # W_O writes along a direction orthogonal to e: W_O W_V = ortho v^T
            st[MATRICES["W_O"]] = torch.tensor(np.outer(ortho, e) / 8, dtype=torch.float32)
        elif which == "qk-left":  # W_Q reads along ortho: W_Q^T W_K = ortho (.)^T
            st[MATRICES["W_Q"]] = torch.tensor(np.outer(np.arange(1.0, 9.0), ortho), dtype=torch.float32)
        elif which == "attention-on":  # W_O W_V = alpha alpha^T: <v, alpha> = 1
            st[MATRICES["W_V"]] = torch.tensor(np.outer(e, e) / (e @ e) * 8, dtype=torch.float32)
            st[MATRICES["W_O"]] = torch.tensor(np.outer(alpha, alpha) / 8, dtype=torch.float32)
        bad.append(st)
    return bad


@pytest.mark.parametrize(
    "which,failing_rows",
    [
        ("positions-sign", {"app-c-positions-along-e/standard", "app-c-positions-half-e/standard"}),
        ("positions-half", {"app-c-positions-half-e/standard"}),
        ("positions-vary", {"app-c-positions-constant/standard"}),
        ("w2-sign", {"app-c-w2-transpose-w1/standard"}),
        ("w2-random", {"app-c-w2-transpose-w1/standard"}),
        ("wo-wv-left", {"app-c-wo-wv-along-e/standard"}),
        ("qk-left", {"app-c-wq-wk-along-e/standard/left"}),
        ("attention-on", {"app-c-attention-off/standard"}),
    ],
)
def test_weights_that_contradict_app_c_fail_exactly_their_rows(good, which, failing_rows):
    """Each contradiction leaves exactly its rows off App. C's structure: they fail, except against the one
    threshold nothing calibrates (<v, α> ≈ 0: no theory value for an attention that is "on"), where the
    contradiction is not resolved."""
    # The App. C rows read only the final weights: measured straight from a stacked state and judged
    # with the arm at the global minimum (the end-to-end path is test_app_c_structure_holds_every_group's).
    cfg = EXP.make_config("quick", ["train.seq_len=8"], members=3)
    bad = _contradict_app_c(good(), which)
    m = Measurements()
    m.stage("standard", AT_GLOBAL_MINIMUM, [0.0] * 3, cfg.claims.tol_nats)
    EXP._app_c(cfg, m, "standard", {k: torch.stack([st[k] for st in bad]) for k in bad[0]})
    app_c = {r.id: r for g in judge([s for s in EXP.claims if s.id in APP_C], m, cfg) for r in g.rows}
    uncalibrated = {"app-c-attention-off/standard"}
    off = {rid for rid, r in app_c.items() if r.verdict == "fails" or r.cause == "uncalibrated threshold"}
    assert off == failing_rows, {k: r.describe() for k, r in app_c.items()}
    for rid in failing_rows:
        want = ("not resolved", "uncalibrated threshold") if rid in uncalibrated else ("fails", "decided")
        assert (app_c[rid].verdict, app_c[rid].cause) == want, app_c[rid].describe()
    assert all(r.verdict == "holds" for rid, r in app_c.items() if rid not in failing_rows)


def test_the_w2_sign_follows_the_chain_that_ran(write_run, good):
    """Planted W_2 = +W_1^T is App. C's p+q<1 structure: on a p+q>1 chain (App. D: W_2 = -W_1^T) it fails."""
    cfg, run = write_run(
        "above", {"standard": good(), "rank-one": good(seed=1)}, overrides=["task.p=0.5", "task.q=0.8"]
    )
    _, _, rows = _analyse(cfg, run)
    assert rows["app-c-w2-transpose-w1/standard"].verdict == "fails"
    assert rows["app-c-w2-transpose-w1/standard"].measured.values == pytest.approx([-1.0] * 3, abs=1e-6)


def test_a_stale_bias_and_a_step_too_small_fail_the_bias_group(write_run, planted):
    """With the bias 1 off its optimum (stale: the stage passes) and an extra step of 1e-3, one step is not
    enough: fails. Weights of moderate size (logits O(1)), so the loss is curved in b."""
    rng = np.random.default_rng(9)
    moderate = [{k: 0.4 * v for k, v in planted.gaussian(8, 8, rng).items()} for _ in range(3)]
    arms = {"standard": moderate, "rank-one": moderate}
    cfg, run = write_run("off", arms, init=arms, overrides=["claims.bias_lr=0.001"], bias_offset=1.0)
    a, groups, rows = _analyse(cfg, run)
    row = rows[f"{BIAS}/standard/final"]
    assert row.stage == "stale-bias" and row.verdict == "fails" and min(row.measured.values) > 0.01, row.describe()
    assert groups[BIAS].verdict == "fails"
    assert a.measurements["standard"]["bias_step"]["final"]["excess_before"][0] > cfg.claims.tol_bias
