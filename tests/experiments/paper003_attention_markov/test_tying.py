"""markov-tying (seed 003 Part I): every declared claim judged on synthetic metrics (holds on faithful
ones, fails on a wrong measurement); provenance (the p+q<1 control never decides a paper group); the
escape-step direction is an exact sign test on discrete, censored steps (three members never decide it,
six can; both arms censored is not resolved, never "fails"); the p+q<1 end state needs the plateau
left; a tiny end-to-end run."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tdlab.claims import judge
from tdlab.experiments.paper003_attention_markov.tying import MarkovTying, chain_tag
from tdlab.run_view import RunView
from tdlab.runner import execute, rebuild
from tdlab.runs import RunWriter
from tdlab.tasks.markov import entropy_rate, marginal_entropy
from tdlab.theory import markov_tying as th

EXP = MarkovTying()
OVERRIDES = [
    "landscape.chains=[[0.5, 0.8], [0.2, 0.3]]",
    "landscape.dims=[2, 3]",
    "landscape.others=[zero]",
    "grid=[[0.5, 0.8], [0.2, 0.3], [0.5, 0.5]]",
    "train.steps=600",
    "train.eval_every=100",
]
STEPS = list(range(0, 601, 100))
ABOVE, BELOW = chain_tag(0.5, 0.8), chain_tag(0.2, 0.3)


def _curve(p, q, leave_at, end="rate", spread=0.0):
    """Test-loss curve: log 2 at step 0, H(π) until ``leave_at`` (None: never), then the entropy rate."""
    h_pi, rate = marginal_entropy(p, q), entropy_rate(p, q)
    out = [math.log(2)]
    for s in STEPS[1:]:
        out.append((rate if end == "rate" else h_pi) if leave_at is not None and s >= leave_at else h_pi)
    return [v + spread for v in out]


def faithful_curves(p, q, tied, m):
    """Tied members leave the plateau late or never (censored), untied early; p+q<1 both reach the rate."""
    if p + q > 1:
        return _curve(p, q, [None, 500, None][m % 3] if tied else [100, 200, 100][m % 3])
    return _curve(p, q, 100, spread=0.001 * m)


def synthetic_run(tmp_path, cfg, curves=faithful_curves, landscape=None):
    """Metrics as a faithful run would store them. ``landscape(tag, tying, values) -> values`` may
    change the landscape metrics; ``curves(p, q, tied, member)`` gives each training curve over STEPS."""
    rows: dict[str, list] = {}
    ls = cfg.landscape
    for p, q in ls.chains:
        c = th.switching_curvature(p, q)
        for tied in (True, False):
            t = "tied" if tied else "untied"
            for d in ls.dims:
                P = 50 + 10 * d
                spec = th.theta_pi_spectrum(p, q, d, tied, P)
                vals = {
                    "loss": marginal_entropy(p, q),
                    "grad_max": 1e-17,
                    "eig_min": float(spec[0]),
                    "eig_max": float(spec[-1]),
                    "num_params": P,
                    "probe_random": 0.0 if tied and c > 0 else 1e-7,
                    "probe_bottom": 0.0 if tied and c > 0 else -abs(c) * ls.radius**2 / 2 * (2 if tied else 1),
                    "spectrum_err": 1e-16,
                }
                if landscape is not None:
                    vals = landscape(chain_tag(p, q), t, dict(vals))
                rows[f"landscape/{chain_tag(p, q)}/{t}/zero/d{d}"] = [(0, 0, k, v) for k, v in vals.items()]
    for p, q in cfg.grid:
        for tied in (True, False):
            t = "tied" if tied else "untied"
            arm_rows = []
            for m in range(cfg.members):
                arm_rows += [(s, m, "test_loss", v) for s, v in zip(STEPS, curves(p, q, tied, m), strict=True)]
                arm_rows += [(s, m, "test_loss@bayes", entropy_rate(p, q)) for s in STEPS]
                arm_rows += [(s, m, "test_loss@unigram", marginal_entropy(p, q)) for s in STEPS]
            rows[f"train/{t}/{chain_tag(p, q)}"] = arm_rows
    with RunWriter(tmp_path, EXP.name) as w:
        w.write_config({"experiment": EXP.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm, r in rows.items():
            w.add_metrics(arm, r)
        return w.finish()


def rows_of(analysis) -> dict:
    return {r.id: r for g in analysis.groups for r in g.rows}


def groups_of(analysis) -> dict:
    return {g.id: g for g in analysis.groups}


@pytest.fixture
def cfg():
    return EXP.make_config("quick", OVERRIDES, members=3)


@pytest.fixture
def cfg6():
    """Six members: the fewest with which an exact sign test can decide a direction at 95 % (2/64 < 0.05)."""
    return EXP.make_config("quick", OVERRIDES, members=6)


def test_faithful_metrics_hold_every_group(tmp_path, cfg6):
    a = EXP.analyse(cfg6, synthetic_run(tmp_path, cfg6))
    g = groups_of(a)
    assert [x.id for x in a.groups if x.kind == "paper"] == [
        "theta-pi-stationary",
        "tied-theta-pi-local-minimum",
        "theta-pi-saddle",
        "tied-leaves-plateau-later",
        "below-line-reaches-entropy-rate",
    ]
    assert [x.id for x in a.groups if x.kind == "sanity"] == ["theta-pi-loss-is-H(pi)", "theta-pi-canonical-spectrum"]
    assert all(x.verdict == "holds" for x in a.groups), [r.describe() for r in rows_of(a).values() if not r.holds]
    r = rows_of(a)
    assert set(r) >= {
        f"theta-pi-stationary/{ABOVE}",
        f"tied-theta-pi-local-minimum/{ABOVE}/hessian-psd",
        f"tied-theta-pi-local-minimum/{ABOVE}/no-descent-direction",
        f"theta-pi-saddle/{ABOVE}/untied/hessian-negative",
        f"theta-pi-saddle/{BELOW}/tied/hessian-negative",
        f"theta-pi-saddle/{BELOW}/untied/descent-direction",
        f"tied-leaves-plateau-later/{ABOVE}",
        f"below-line-reaches-entropy-rate/{BELOW}/tied",
        f"below-line-reaches-entropy-rate/{BELOW}/untied",
    }
    # no local-minimum row for the p+q<1 chain: the closed form makes it a saddle there
    assert not any(k.startswith(f"tied-theta-pi-local-minimum/{BELOW}") for k in r)
    assert all(x.measured.deterministic for x in g["theta-pi-stationary"].rows + g["theta-pi-saddle"].rows)
    # the theorem's hypothesis is p+q>1: the control's rows are ours, the Fig. 4 chain's the seed's; the talk's
    # saddle is the untied one above the line
    assert (
        r[f"theta-pi-stationary/{BELOW}"].provenance == "ours"
        and r[f"theta-pi-stationary/{ABOVE}"].provenance == "paper"
    )
    assert r[f"theta-pi-saddle/{ABOVE}/untied/hessian-negative"].provenance == "paper"
    assert r[f"theta-pi-saddle/{BELOW}/tied/hessian-negative"].provenance == "ours"
    assert all(x.horizon == "static" for x in g["theta-pi-saddle"].rows)
    # the direction claim: discrete, censored at the last evaluation, an exact sign test over 6 paired members
    later = r[f"tied-leaves-plateau-later/{ABOVE}"]
    assert later.paired and "sign test" in later.reason and later.p_hold == pytest.approx(2 / 64)
    assert later.measured.values == (600.0, 500.0, 600.0) * 2 and later.reference.values == (100.0, 200.0, 100.0) * 2
    assert later.measured.censored == (True, False, True) * 2 and later.measured.resolution == 100.0
    assert later.learning_required is False and later.arms == (f"train/tied/{ABOVE}", f"train/untied/{ABOVE}")
    assert later.horizon == "budget"
    t = a.measurements["training"]
    assert t[ABOVE]["tied"]["plateau_escape_step"] == [None, 500, None] * 2
    assert t[ABOVE]["tied"]["stuck_fraction"] == pytest.approx(2 / 3)
    assert t["p0.5_q0.5"]["tied"]["stuck_fraction"] is None  # i.i.d. chain: not informative
    assert "| (0.5, 0.8) | p+q>1 |" in a.measurements["stuck_table"]
    assert any("censored" in n and "sign test" in n for n in a.notes)
    # the end-state row reads the gap to the Bayes predictor on the same batches, and its stage
    below = r[f"below-line-reaches-entropy-rate/{BELOW}/untied"]
    assert below.measured.values == pytest.approx([0.001 * m for m in range(6)], abs=1e-12)
    assert below.stage == "left-plateau" and below.measured.drift == pytest.approx(0.0, abs=1e-12)


def test_three_members_never_decide_the_direction(tmp_path, cfg):
    # 3/3 members with tied later (two censored): p = 2/8 = 0.25, not a certain "holds"; the count is the limit
    later = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path, cfg)))[f"tied-leaves-plateau-later/{ABOVE}"]
    assert later.verdict == "not resolved" and later.cause == "members" and later.p_hold == pytest.approx(0.25)


@pytest.mark.parametrize(
    "group,row,change",
    [
        ("theta-pi-loss-is-H(pi)", ABOVE, lambda tag, t, v: {**v, "loss": v["loss"] + 1e-6} if tag == ABOVE else v),
        (
            "theta-pi-canonical-spectrum",
            f"{ABOVE}/untied",
            lambda tag, t, v: {**v, "spectrum_err": 1e-5} if t == "untied" else v,
        ),
        ("theta-pi-stationary", ABOVE, lambda tag, t, v: {**v, "grad_max": 1e-4} if tag == ABOVE else v),
        (
            "tied-theta-pi-local-minimum",
            f"{ABOVE}/hessian-psd",
            lambda tag, t, v: {**v, "eig_min": -0.01} if t == "tied" else v,
        ),
        (
            "tied-theta-pi-local-minimum",
            f"{ABOVE}/no-descent-direction",
            lambda tag, t, v: {**v, "probe_random": -1e-6} if t == "tied" else v,
        ),
        (
            "theta-pi-saddle",
            f"{ABOVE}/untied/hessian-negative",
            lambda tag, t, v: {**v, "eig_min": 0.0} if t == "untied" else v,
        ),
        (
            "theta-pi-saddle",
            f"{ABOVE}/untied/descent-direction",
            lambda tag, t, v: {**v, "probe_bottom": 0.0} if tag == ABOVE and t == "untied" else v,
        ),
    ],
)
def test_each_landscape_group_fails_on_a_wrong_measurement(tmp_path, cfg, group, row, change):
    a = EXP.analyse(cfg, synthetic_run(tmp_path, cfg, landscape=change))
    assert rows_of(a)[f"{group}/{row}"].verdict == "fails"
    assert groups_of(a)[group].verdict == "fails"


def test_the_control_below_the_line_never_decides_a_paper_group(tmp_path, cfg):
    # ∇L ≠ 0 at the p+q<1 control: its (ours) row fails, the talk's statement (p+q>1) still holds
    a = EXP.analyse(
        cfg, synthetic_run(tmp_path, cfg, landscape=lambda tag, t, v: {**v, "grad_max": 1e-4} if tag == BELOW else v)
    )
    assert rows_of(a)[f"theta-pi-stationary/{BELOW}"].verdict == "fails"
    assert groups_of(a)["theta-pi-stationary"].verdict == "holds"


def test_direction_fails_when_tied_leaves_first_and_is_unresolved_when_neither_leaves(tmp_path, cfg6):
    def tied_first(p, q, tied, m):
        return _curve(p, q, 100 if tied else 400) if p + q > 1 else faithful_curves(p, q, tied, m)

    later = rows_of(EXP.analyse(cfg6, synthetic_run(tmp_path / "a", cfg6, tied_first)))[
        f"tied-leaves-plateau-later/{ABOVE}"
    ]
    assert later.verdict == "fails" and later.p_fail == pytest.approx(2 / 64)

    def never(p, q, tied, m):  # both censored at the last evaluation: nothing is known of the direction
        return _curve(p, q, None) if p + q > 1 else faithful_curves(p, q, tied, m)

    later = rows_of(EXP.analyse(cfg6, synthetic_run(tmp_path / "b", cfg6, never)))[f"tied-leaves-plateau-later/{ABOVE}"]
    assert later.verdict == "not resolved" and later.cause == "censored"

    def one_interval(p, q, tied, m):  # tied one evaluation later in every member: within the resolution
        return _curve(p, q, 200 if tied else 100) if p + q > 1 else faithful_curves(p, q, tied, m)

    later = rows_of(EXP.analyse(cfg6, synthetic_run(tmp_path / "c", cfg6, one_interval)))[
        f"tied-leaves-plateau-later/{ABOVE}"
    ]
    assert later.verdict == "not resolved" and later.cause == "resolution"


def test_below_line_fails_past_the_plateau_is_not_evaluable_on_it_and_not_resolved_while_falling(tmp_path, cfg):
    rate, h_pi = entropy_rate(0.2, 0.3), marginal_entropy(0.2, 0.3)

    def stuck(p, q, tied, m):  # the tied arm never leaves H(π): the budget, not Thm. 8, set its end
        return _curve(p, q, None, spread=0.001 * m) if p + q < 1 and tied else faithful_curves(p, q, tied, m)

    r = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path / "a", cfg, stuck)))
    row = r[f"below-line-reaches-entropy-rate/{BELOW}/tied"]
    assert row.verdict == "not evaluable" and row.cause == "stage not reached" and "unigram stage" in row.reason
    assert r[f"below-line-reaches-entropy-rate/{BELOW}/untied"].verdict == "holds"

    def short(p, q, tied, m):  # past the plateau but stopped 0.05 nats short of the rate, flat: a finding
        if p + q < 1 and tied:
            return [math.log(2)] + [rate + 0.05 + 0.001 * m] * (len(STEPS) - 1)
        return faithful_curves(p, q, tied, m)

    assert rate + 0.05 < h_pi - 0.25 * (h_pi - rate)
    r = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path / "b", cfg, short)))
    assert r[f"below-line-reaches-entropy-rate/{BELOW}/tied"].verdict == "fails"

    def falling(p, q, tied, m):  # ends at the rate but still falling by 0.03 nats over the last 100 steps
        if p + q < 1 and not tied:
            return [math.log(2)] + [rate + 0.03 * (600 - s) / 100 + 0.001 * m for s in STEPS[1:]]
        return faithful_curves(p, q, tied, m)

    row = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path / "c", cfg, falling)))[
        f"below-line-reaches-entropy-rate/{BELOW}/untied"
    ]
    assert row.verdict == "not resolved" and "still moving" in row.reason


def test_gate_trivial_error_is_log_2_for_training_arms(tmp_path, cfg):
    assert EXP.trivial_error(cfg, f"train/tied/{ABOVE}") == pytest.approx(math.log(2))
    assert EXP.trivial_error(cfg, f"landscape/{ABOVE}/tied/zero/d2") is None

    def untrained(p, q, tied, m):  # the p+q<1 untied arm never moves off log 2
        return [math.log(2)] * len(STEPS) if p + q < 1 and not tied else faithful_curves(p, q, tied, m)

    run = rebuild(synthetic_run(tmp_path, cfg, untrained).path)
    s = run.summary
    rows = {r["id"]: r for g in s["claims"] for r in g["rows"]}
    assert rows[f"below-line-reaches-entropy-rate/{BELOW}/untied"]["verdict"] == "not evaluable"
    assert rows[f"below-line-reaches-entropy-rate/{BELOW}/tied"]["verdict"] == "holds"
    assert s["arms"][f"train/untied/{BELOW}"]["status"] == "not trained"
    assert s["sanity_total"] == 2 and s["claims_total"] == 5


# A run of seconds: one chain's landscape at d = 2, four training steps of a d = 4 model.
TINY = [
    "landscape.chains=[[0.5, 0.8]]",
    "landscape.dims=[2]",
    "landscape.seq_len=3",
    "landscape.directions=2",
    "grid=[[0.5, 0.8]]",
    "model.d=4",
    "train.steps=4",
    "train.seq_len=8",
    "train.batch=4",
    "train.eval_every=2",
    "train.eval_batches=1",
]


def test_tiny_end_to_end_run(tmp_path):
    cfg = EXP.make_config("quick", TINY, members=2)
    run = execute(EXP, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done"
    rows = {r["id"]: r for g in s["claims"] + s["sanity"] for r in g["rows"]}
    # The landscape claims are exact whatever the training length.
    for rid in (
        "theta-pi-loss-is-H(pi)/p0.5_q0.8",
        "theta-pi-stationary/p0.5_q0.8",
        "tied-theta-pi-local-minimum/p0.5_q0.8/hessian-psd",
        "theta-pi-saddle/p0.5_q0.8/untied/hessian-negative",
        "theta-pi-canonical-spectrum/p0.5_q0.8/tied",
    ):
        assert rows[rid]["verdict"] == "holds", rows[rid]
    assert "tied-leaves-plateau-later/p0.5_q0.8" in rows
    assert all((run.path / f).is_file() for f in s["figures"]) and len(s["figures"]) == 3


def test_a_run_stopped_between_landscape_arms_resumes_to_the_numbers_of_one_never_stopped(tmp_path, stopped_everywhere):
    """The paper grid's landscape (exact Hessians, perturbation probes) takes many minutes before any training:
    a stop there (SIGTERM, ``--until``) takes effect after the arm in progress is stored, and a resumed run skips
    the stored arms. Stopped after every landscape arm and then after every training step, it ends with the
    numbers of a run never stopped."""
    over = [*TINY, "landscape.dims=[2, 3]"]
    cfg = EXP.make_config("quick", over, members=2)
    whole = execute(EXP, cfg, "quick", tmp_path / "whole", progress=False)
    again, stops = stopped_everywhere(EXP, cfg, tmp_path / "stopped", limit=100)
    labels = [s.label for s in stops]
    landscape = [a for a in labels if a.startswith("landscape/")]
    assert str(stops[0]) == f"stopped on request after {landscape[0]}, which is stored"
    # one stop after each landscape arm: (tied, untied) x (keep, zero) x d
    assert len(landscape) == len(set(landscape)) == 2 * 2 * 2
    assert labels.index(landscape[-1]) == len(landscape) - 1  # every landscape stop came before training's
    cols = ["arm", "step", "member", "name", "value"]
    a, b = (r.metrics().sort_values(cols[:4])[cols].reset_index(drop=True) for r in (whole, again))
    assert a.equals(b) and len(a)
    assert again.summary["claims"] == whole.summary["claims"]


def test_a_stop_in_training_writes_no_checkpoint_for_the_fits_not_started(tmp_path, stored_fits):
    """The seed's grid is 50 fits: a stop in the first must not start the other 49 for a step each (a
    checkpoint apiece, 12 MB of a state carried between machines). On one lane the fit in progress checkpoints
    and no other; the rest start on the resume, and the run ends with the numbers of one never stopped."""
    from tdlab.runner import resume
    from tdlab.train.lanes import limited_to
    from tdlab.train.stopping import RunStopped, stopping

    cfg = EXP.make_config("quick", [*TINY, "grid=[[0.5, 0.8], [0.2, 0.3], [0.7, 0.6]]"], members=2)
    whole = execute(EXP, cfg, "quick", tmp_path / "whole", progress=False)
    from tdlab.costs.work import fit_arms  # what tdlab batch reads of a stopped run

    assert stored_fits(whole) == {a.replace("/", "__") for a in fit_arms(EXP, cfg)}  # the six fits it declares
    with limited_to(1):
        with stopping(until_s=0, signals=False), pytest.raises(RunStopped) as stop:
            execute(EXP, cfg, "quick", tmp_path / "stopped", progress=False)
        run_dir = stop.value.run_dir
        while stop.value.label.startswith("landscape/"):  # the landscape stops arm by arm first
            with stopping(until_s=0, signals=False), pytest.raises(RunStopped) as stop:
                resume(run_dir, progress=False)
        staging = run_dir.with_name(f".staging-{run_dir.name}")
        started = [p.stem for p in (staging / "checkpoints").glob("train__*.json")]
        assert started == [stop.value.label.replace("/", "__")]  # one of the six fits
        again = resume(run_dir, progress=False)
    cols = ["arm", "step", "member", "name", "value"]
    a, b = (r.metrics().sort_values(cols[:4])[cols].reset_index(drop=True) for r in (whole, again))
    assert a.equals(b) and len(a)


def test_rows_outside_the_talks_hypotheses_are_ours_whatever_measure_marks(tmp_path, cfg6):
    # the theorem's p + q > 1, the saddle's "not tied": read off each row's own chain and key, so a row of the
    # p + q < 1 control or a tied saddle row is ours even where its stored provenance says "paper"
    run = synthetic_run(tmp_path, cfg6)
    a = EXP.analyse(cfg6, run)
    r = rows_of(a)
    saddle = groups_of(a)["theta-pi-saddle"].spec
    assert r[f"theta-pi-saddle/{BELOW}/tied/hessian-negative"].outside == [h.text for h in saddle.hypotheses]
    assert r[f"theta-pi-saddle/{BELOW}/untied/hessian-negative"].outside == [saddle.hypotheses[0].text]
    assert not r[f"theta-pi-saddle/{ABOVE}/untied/hessian-negative"].outside
    assert r[f"theta-pi-stationary/{BELOW}"].outside and not r[f"theta-pi-stationary/{ABOVE}"].outside
    assert not r[f"below-line-reaches-entropy-rate/{BELOW}/tied"].outside
    measured = EXP.measure(cfg6, RunView(run))
    measured.rows["theta-pi-saddle"] = [replace(x, provenance="paper") for x in measured.rows["theta-pi-saddle"]]
    groups = {g.id: g for g in judge(EXP.claims, measured, cfg6)}
    assert {x.id: x.provenance for x in groups["theta-pi-saddle"].rows} == {
        x.id: "paper" if not x.outside else "ours" for x in groups["theta-pi-saddle"].rows
    }
    assert {x.id: x.provenance for x in groups["theta-pi-saddle"].rows}[
        f"theta-pi-saddle/{BELOW}/tied/hessian-negative"
    ] == "ours"
