"""markov-tying (seed 003 Part I): every claim group of ``analyse`` on synthetic metrics (holds on
faithful ones, fails on a wrong measurement), the censored escape-step direction claim, and a tiny
end-to-end run."""

from __future__ import annotations

import math

import pytest

from tdlab.experiments.markov_tying import MarkovTying, chain_tag, normalised_position
from tdlab.experiments.runner import execute, rebuild
from tdlab.runs import RunWriter
from tdlab.tasks.markov import entropy_rate, marginal_entropy, stationary
from tdlab.theory import markov_tying as th

EXP = MarkovTying()
OVERRIDES = ["landscape.chains=[[0.5, 0.8], [0.2, 0.3]]", "landscape.dims=[2, 3]", "landscape.others=[zero]",
             "grid=[[0.5, 0.8], [0.2, 0.3], [0.5, 0.5]]", "train.steps=600", "train.eval_every=100"]
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
        return _curve(p, q, [None, 500, None][m] if tied else [100, 200, 100][m])
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
                vals = {"loss": marginal_entropy(p, q), "grad_max": 1e-17, "eig_min": float(spec[0]), "eig_max": float(spec[-1]),
                        "num_params": P, "probe_random": 0.0 if tied and c > 0 else 1e-7,
                        "probe_bottom": 0.0 if tied and c > 0 else -abs(c) * ls.radius**2 / 2 * (2 if tied else 1),
                        "spectrum_err": 1e-16}
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


def test_faithful_metrics_hold_every_group(tmp_path, cfg):
    a = EXP.analyse(cfg, synthetic_run(tmp_path, cfg))
    g = groups_of(a)
    assert [x.id for x in a.paper] == ["theta-pi-stationary", "tied-theta-pi-local-minimum", "theta-pi-saddle",
                                       "tied-leaves-plateau-later", "below-line-reaches-entropy-rate"]
    assert [x.id for x in a.sanity_groups] == ["theta-pi-loss-is-H(pi)", "theta-pi-canonical-spectrum"]
    assert all(x.verdict == "holds" for x in a.groups), [r.describe() for r in rows_of(a).values() if not r.holds]
    r = rows_of(a)
    assert set(r) >= {f"theta-pi-stationary/{ABOVE}", f"tied-theta-pi-local-minimum/{ABOVE}/hessian-psd",
                      f"tied-theta-pi-local-minimum/{ABOVE}/no-descent-direction",
                      f"theta-pi-saddle/{ABOVE}/untied/hessian-negative", f"theta-pi-saddle/{BELOW}/tied/hessian-negative",
                      f"theta-pi-saddle/{BELOW}/untied/descent-direction",
                      f"tied-leaves-plateau-later/{ABOVE}", f"below-line-reaches-entropy-rate/{BELOW}/tied",
                      f"below-line-reaches-entropy-rate/{BELOW}/untied"}
    # no local-minimum row for the p+q<1 chain: the closed form makes it a saddle there
    assert not any(k.startswith(f"tied-theta-pi-local-minimum/{BELOW}") for k in r)
    assert all(x.deterministic for x in g["theta-pi-stationary"].rows + g["theta-pi-saddle"].rows)
    # the direction claim: censored at the horizon, paired
    later = r[f"tied-leaves-plateau-later/{ABOVE}"]
    horizon = cfg.train.steps + cfg.train.eval_every
    assert later.paired and later.measured == [float(horizon), 500.0, float(horizon)] and later.reference == [100.0, 200.0, 100.0]
    assert later.learning_required is False and later.arms == [f"train/tied/{ABOVE}", f"train/untied/{ABOVE}"]
    assert a.measurements["training"][ABOVE]["tied"]["plateau_escape_step"] == [None, 500, None]
    assert a.measurements["training"][ABOVE]["tied"]["stuck_fraction"] == pytest.approx(2 / 3)
    assert a.measurements["training"]["p0.5_q0.5"]["tied"]["stuck_fraction"] is None  # i.i.d. chain: not informative
    assert "| (0.5, 0.8) | p+q>1 |" in a.measurements["stuck_table"]
    assert any("censored" in n for n in a.notes)
    # the end-state row reads the gap to the Bayes predictor on the same batches
    assert r[f"below-line-reaches-entropy-rate/{BELOW}/untied"].measured == pytest.approx([0.0, 0.001, 0.002], abs=1e-12)


@pytest.mark.parametrize("group,row,change", [
    ("theta-pi-loss-is-H(pi)", ABOVE, lambda tag, t, v: {**v, "loss": v["loss"] + 1e-6} if tag == ABOVE else v),
    ("theta-pi-canonical-spectrum", f"{ABOVE}/untied", lambda tag, t, v: {**v, "spectrum_err": 1e-5} if t == "untied" else v),
    ("theta-pi-stationary", BELOW, lambda tag, t, v: {**v, "grad_max": 1e-4} if tag == BELOW else v),
    ("tied-theta-pi-local-minimum", f"{ABOVE}/hessian-psd", lambda tag, t, v: {**v, "eig_min": -0.01} if t == "tied" else v),
    ("tied-theta-pi-local-minimum", f"{ABOVE}/no-descent-direction",
     lambda tag, t, v: {**v, "probe_random": -1e-6} if t == "tied" else v),
    ("theta-pi-saddle", f"{ABOVE}/untied/hessian-negative", lambda tag, t, v: {**v, "eig_min": 0.0} if t == "untied" else v),
    ("theta-pi-saddle", f"{BELOW}/tied/descent-direction", lambda tag, t, v: {**v, "probe_bottom": 0.0} if tag == BELOW else v),
])
def test_each_landscape_group_fails_on_a_wrong_measurement(tmp_path, cfg, group, row, change):
    a = EXP.analyse(cfg, synthetic_run(tmp_path, cfg, landscape=change))
    assert rows_of(a)[f"{group}/{row}"].verdict == "fails"
    assert groups_of(a)[group].verdict == "fails"


def test_direction_fails_when_tied_leaves_first_or_neither_leaves(tmp_path, cfg):
    def tied_first(p, q, tied, m):
        return _curve(p, q, 100 if tied else 400) if p + q > 1 else faithful_curves(p, q, tied, m)

    a = EXP.analyse(cfg, synthetic_run(tmp_path / "a", cfg, tied_first))
    assert rows_of(a)[f"tied-leaves-plateau-later/{ABOVE}"].verdict == "fails"

    def never(p, q, tied, m):  # both censored at the horizon: no difference, not "later"
        return _curve(p, q, None) if p + q > 1 else faithful_curves(p, q, tied, m)

    a = EXP.analyse(cfg, synthetic_run(tmp_path / "b", cfg, never))
    later = rows_of(a)[f"tied-leaves-plateau-later/{ABOVE}"]
    assert later.verdict == "fails" and later.interval.center == 0.0

    def mixed(p, q, tied, m):  # tied later in two members, earlier in one: the paired interval straddles 0
        if p + q > 1:
            return _curve(p, q, [500, 300, 100][m] if tied else [100, 100, 400][m])
        return faithful_curves(p, q, tied, m)

    a = EXP.analyse(cfg, synthetic_run(tmp_path / "c", cfg, mixed))
    assert rows_of(a)[f"tied-leaves-plateau-later/{ABOVE}"].verdict == "not resolved"


def test_below_line_fails_at_h_pi_and_is_not_resolved_while_falling(tmp_path, cfg):
    def stuck(p, q, tied, m):
        return _curve(p, q, None, spread=0.001 * m) if p + q < 1 and tied else faithful_curves(p, q, tied, m)

    r = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path / "a", cfg, stuck)))
    assert r[f"below-line-reaches-entropy-rate/{BELOW}/tied"].verdict == "fails"
    assert r[f"below-line-reaches-entropy-rate/{BELOW}/untied"].verdict == "holds"

    def falling(p, q, tied, m):  # ends at the rate but still falling by 0.03 nats over the last 100 steps
        if p + q < 1 and not tied:
            rate = entropy_rate(p, q)
            return [math.log(2)] + [rate + 0.03 * (600 - s) / 100 + 0.001 * m for s in STEPS[1:]]
        return faithful_curves(p, q, tied, m)

    row = rows_of(EXP.analyse(cfg, synthetic_run(tmp_path / "b", cfg, falling)))[f"below-line-reaches-entropy-rate/{BELOW}/untied"]
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


def test_normalised_position():
    p, q = 0.5, 0.8
    assert normalised_position(marginal_entropy(p, q), p, q) == pytest.approx(1.0)
    assert normalised_position(entropy_rate(p, q), p, q) == pytest.approx(0.0)
    assert stationary(p, q)[1] == pytest.approx(0.5 / 1.3)


def test_tiny_end_to_end_run(tmp_path):
    cfg = EXP.make_config("quick", ["landscape.chains=[[0.5, 0.8]]", "landscape.dims=[2]", "landscape.seq_len=3",
                                    "landscape.directions=2", "grid=[[0.5, 0.8]]", "model.d=4", "train.steps=4",
                                    "train.seq_len=8", "train.batch=4", "train.eval_every=2", "train.eval_batches=1"], members=2)
    run = execute(EXP, cfg, "quick", tmp_path, progress=False)
    s = run.summary
    assert s["status"] == "done"
    rows = {r["id"]: r for g in s["claims"] + s["sanity"] for r in g["rows"]}
    # The landscape claims are exact whatever the training length.
    for rid in ("theta-pi-loss-is-H(pi)/p0.5_q0.8", "theta-pi-stationary/p0.5_q0.8",
                "tied-theta-pi-local-minimum/p0.5_q0.8/hessian-psd", "theta-pi-saddle/p0.5_q0.8/untied/hessian-negative",
                "theta-pi-canonical-spectrum/p0.5_q0.8/tied"):
        assert rows[rid]["verdict"] == "holds", rows[rid]
    assert "tied-leaves-plateau-later/p0.5_q0.8" in rows
    assert all((run.path / f).is_file() for f in s["figures"]) and len(s["figures"]) == 3
