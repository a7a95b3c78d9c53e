"""``--decide``: rounds of more members on a run, with the looks' confidence, resumable, recorded.

A toy experiment whose "trainer" gives member ``i`` a value drawn from its seed alone (as tdlab's
trainers do) makes the rounds fast; one real experiment checks that a grown run has the numbers of a
run trained with its final members from the start.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from pydantic import Field

from tdlab import runner
from tdlab.claims import ClaimSpec, Measurements, Sample
from tdlab.claims.declare import Threshold
from tdlab.config import parse_duration
from tdlab.decide import DecidePlan
from tdlab.experiments import base
from tdlab.experiments.base import Experiment, ExperimentConfig
from tdlab.rounds import DRAWS_FIELDS, LENGTH_FIELDS, current_round
from tdlab.run_context import RunContext
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.train.trainer import FitResult

TOY = Threshold("paper", "the toy's own tolerance")  # a threshold that may make its claims fail


class ToyConfig(ExperimentConfig):
    mean: float = 0.0  # the members' true mean
    steps: int = 10  # the "training budget" (never extended by --decide)


class ToyTrainer:
    """Member with seed s ends at mean + N(0, 1) drawn from s; counts the members it trained."""

    trained: ClassVar[list[int]] = []  # shared by every instance: the test reads what all of them trained
    stop_after: int | None = None  # raise KeyboardInterrupt after this many members (an interrupted round)

    def __init__(self, cfg: ToyConfig) -> None:
        self.cfg = cfg
        self.checkpoint = self.config_hash = None

    def fit(self, build, seeds, task) -> FitResult:
        rows, states = [], []
        for i, s in enumerate(seeds):
            if ToyTrainer.stop_after is not None and len(ToyTrainer.trained) >= ToyTrainer.stop_after:
                raise KeyboardInterrupt
            ToyTrainer.trained.append(s)
            v = self.cfg.mean + float(np.random.default_rng(s).normal())
            rows += [(0, i, "test_loss", 10.0), (self.cfg.steps, i, "test_loss", 1.0 + 0.01 * abs(v))]
            states.append({"w": torch.tensor([v])})
        return FitResult(rows=rows, states=states, init_states=[{"w": torch.zeros(1)} for _ in states])


class Toy(Experiment):
    name = "toy-decide"
    paper = "none"
    figure = "none"
    description = "a toy for --decide"
    Config = ToyConfig
    claims = (
        ClaimSpec(
            id="near-zero",
            statement="the mean is within 1 of 0",
            test="value",
            relation="close",
            quantity="w",
            expected=0.0,
            tolerance=1.0,
            horizon="budget",
            threshold=TOY,
        ),
        ClaimSpec(
            id="sanity",
            statement="a check",
            kind="sanity",
            test="value",
            relation="close",
            quantity="w",
            expected=0.0,
            tolerance=100.0,
            horizon="budget",
        ),
    )

    def run(self, cfg: ToyConfig, ctx: RunContext) -> None:
        ctx.fit("a", ToyTrainer(cfg), lambda s: None, member_seeds(cfg.seed, cfg.members), None)
        ctx.writer.save_arrays("shared", [{"x": torch.ones(1)}])  # not per member: recomputed every round

    def measure(self, cfg: ToyConfig, run) -> Measurements:
        m = Measurements()
        w = run.arrays("a")["w"][:, 0].tolist()
        m.row("near-zero", "a", Sample(tuple(w)), arms=["a"])
        m.row("sanity", "a", Sample(tuple(w)), arms=["a"])
        return m

    def plot(self, cfg, run, analysis, figdir):
        return []


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    # what the toys' rounds grow: the decide layer's tables, by experiment name
    monkeypatch.setitem(LENGTH_FIELDS, "toy-slow", "steps")
    monkeypatch.setitem(LENGTH_FIELDS, "toy-slow-budget", "steps")
    monkeypatch.setitem(DRAWS_FIELDS, "toy-reference", "draws")
    ToyTrainer.trained, ToyTrainer.stop_after = [], None
    yield
    ToyTrainer.trained, ToyTrainer.stop_after = [], None


@pytest.fixture
def toy(monkeypatch):
    exp = Toy()
    monkeypatch.setattr(base, "get", lambda name: exp)  # a resume or rebuild reads it by name
    return exp


def _decide(toy, tmp_path, run_id="r", mean=0.0, looks=4, budget=3600.0):
    cfg = toy.make_config("quick", [f"mean={mean}"], members=3)
    return runner.execute(
        toy, cfg, "quick", tmp_path, progress=False, run_id=run_id, decide=DecidePlan(looks=looks, budget_s=budget)
    )


def test_rounds_add_members_train_only_the_new_ones_and_judge_at_the_looks_confidence(toy, tmp_path):
    run = _decide(toy, tmp_path)
    s = run.summary
    d = s["decide"]
    assert d["confidence"] == pytest.approx(1 - 0.05 / 4) and d["schedule"] == [3, 6, 12, 24]
    members = [r["members"] for r in d["rounds"]]
    assert members == d["schedule"][: len(members)] and len(members) >= 2
    assert s["members"] == members[-1] == run.config["config"]["members"]
    # each member trained once: the rounds extended the arm, they did not retrain it
    assert ToyTrainer.trained == member_seeds(0, members[-1])
    g = s["claims"][0]
    assert g["rows"][0]["confidence"] == pytest.approx(d["confidence"]) and g["rows"][0]["n"] == members[-1]
    assert d["stopped"] and d["rounds"][-1]["decided"] == d["decided"]
    # the grown run holds the numbers of a run trained with its final members from the start
    fresh = runner.execute(
        toy,
        toy.make_config("quick", ["mean=0.0"], members=members[-1]),
        "quick",
        tmp_path,
        progress=False,
        run_id="fresh",
    )
    assert Run(run.path).metrics().equals(Run(fresh.path).metrics())
    assert torch.equal(Run(run.path).arrays("a")["w"], Run(fresh.path).arrays("a")["w"])
    # the training budget is never extended
    assert run.config["config"]["steps"] == 10


def test_a_claim_settled_at_the_first_look_stops_the_rounds(toy, tmp_path):
    run = _decide(toy, tmp_path, mean=50.0)  # far outside: fails at once
    d = run.summary["decide"]
    assert len(d["rounds"]) == 1 and d["stopped"] == "every paper group is decided"
    assert run.summary["claims"][0]["verdict"] == "fails"


def test_the_budget_stops_the_rounds(toy, tmp_path, monkeypatch):
    import tdlab.decide as decide

    clock = iter(range(0, 10_000, 100))  # every round "takes" 100 s
    monkeypatch.setattr(decide.time, "perf_counter", lambda: float(next(clock)))
    run = _decide(toy, tmp_path, mean=0.0, budget=250.0)
    d = run.summary["decide"]
    assert d["stopped"].startswith("budget") and [r["members"] for r in d["rounds"]] == [3, 6]


def test_a_run_interrupted_in_a_round_resumes_to_the_same_numbers(toy, tmp_path):
    whole = _decide(toy, tmp_path / "a")
    ToyTrainer.trained = []
    ToyTrainer.stop_after = 3 + 3 + 2  # in the third round, two of its six new members trained
    with pytest.raises(KeyboardInterrupt):
        _decide(toy, tmp_path / "b")
    ToyTrainer.stop_after = None
    staged = Run.read_config(tmp_path / "b" / ".staging-r" / "config.yaml")
    assert staged["decide"]["rounds"][-1]["members"] == 6 and staged["config"]["members"] == 12
    resumed = runner.resume(tmp_path / "b" / "r", progress=False)
    a, b = whole.summary, resumed.summary
    assert [r["members"] for r in a["decide"]["rounds"]] == [r["members"] for r in b["decide"]["rounds"]]
    assert a["claims"] == b["claims"]
    assert Run(whole.path).metrics().equals(Run(resumed.path).metrics())


def test_report_rebuilds_a_decided_run_at_its_looks_confidence(toy, tmp_path):
    run = _decide(toy, tmp_path)
    before = run.summary["claims"]
    runner.rebuild(run.path)
    assert Run(run.path).summary["claims"] == before
    html = (run.path / "report.html").read_text()
    assert "Rounds (--decide)" in html and "0.9875" in html
    assert html.count("<tr><td>") >= len(run.summary["decide"]["rounds"])


def test_a_run_decided_before_rounds_recorded_their_training_length_still_rebuilds(toy, tmp_path):
    """Rounds written before ``length``/``longer`` existed (members-only rounds) report as "—", not a crash."""
    import json

    import yaml

    run = _decide(toy, tmp_path)
    conf = Run.read_config(run.path / "config.yaml")
    for r in conf["decide"]["rounds"]:
        r.pop("length", None), r.pop("longer", None)
    (run.path / "config.yaml").write_text(yaml.safe_dump(conf))
    summary = json.loads((run.path / "summary.json").read_text())
    for r in summary["decide"]["rounds"]:
        r.pop("length", None), r.pop("longer", None)
    (run.path / "summary.json").write_text(json.dumps(summary))
    runner.rebuild(run.path)
    html = (run.path / "report.html").read_text()
    assert "Rounds (--decide)" in html and html.count("<td>—</td>") >= len(summary["decide"]["rounds"])


def test_the_cli_runs_decide_and_refuses_bad_options_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from tdlab.cli import app

    for args, msg in ((["--budget", "soon"], "--budget:"), (["--looks", "9"], "--looks:")):
        res = CliRunner().invoke(app, ["run", "markov-init", "--decide", "--out", str(tmp_path / "o"), *args])
        assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("30m", 1800), ("1.5h", 5400), ("45", 45), ("4m10s", 250), ("1h30m", 5400), ("1h0.5m2s", 3632)],
)
def test_budget_parses(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "m", "-5m", "0", "ten", "2w", "nan", "inf", "1e9h", "10s4m", "4m 10s", "1hm", "169h"]
)
def test_a_bad_budget_is_one_line_naming_the_option(text):
    from tdlab.config import ConfigError

    with pytest.raises(ConfigError, match=r"^--budget: "):
        parse_duration(text)


def _grown_equals_fresh(name, sets, tmp_path, monkeypatch):
    """``name`` with 2 members, then a round to 4 (every fit trains only its 2 new members), equals 4 members
    from the start: every metric and array."""
    from tdlab.experiments.base import get
    from tdlab.runs import RunWriter
    from tdlab.train import trainer as trainer_mod

    exp = get(name)
    fitted: list[int] = []
    real_fit = trainer_mod.Trainer.fit
    monkeypatch.setattr(
        trainer_mod.Trainer, "fit", lambda self, b, seeds, t: fitted.append(len(seeds)) or real_fit(self, b, seeds, t)
    )

    def staged(run_id, members):
        w = RunWriter(tmp_path, exp.name, run_id)
        w.write_config(
            {"experiment": exp.name, "config": exp.make_config("quick", sets, members=members).model_dump(mode="json")}
        )
        return w

    grown = staged("grown", 2)
    ctx = RunContext(grown, progress=False)
    exp.run(exp.make_config("quick", sets, members=2), ctx)
    first = list(fitted)
    ctx.start_round()
    grown.write_config(
        {"experiment": exp.name, "config": exp.make_config("quick", sets, members=4).model_dump(mode="json")}
    )
    exp.run(exp.make_config("quick", sets, members=4), ctx)
    assert first and fitted == first + first  # the round trained the two new members of each fit only
    fresh = staged("fresh", 4)
    exp.run(exp.make_config("quick", sets, members=4), RunContext(fresh, progress=False))
    a, b = Run(grown.path).metrics(), Run(fresh.path).metrics()
    pd_cols = ["arm", "step", "member", "name"]
    a, b = a.sort_values(pd_cols).reset_index(drop=True), b.sort_values(pd_cols).reset_index(drop=True)
    assert a[pd_cols].equals(b[pd_cols])
    np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy(), rtol=1e-6, atol=1e-7)
    for f in sorted((fresh.path / "arrays").glob("*.safetensors")):
        x, y = Run(grown.path).arrays(f.stem), Run(fresh.path).arrays(f.stem)
        assert x.keys() == y.keys() and all(torch.allclose(x[k], y[k], rtol=1e-6, atol=1e-7) for k in x)
    grown.release(), fresh.release()
    return first


def test_a_real_round_trains_only_the_new_members_and_matches_a_fresh_run(tmp_path, monkeypatch):
    """markov-init (GPT, Trainer): 2 members, then a round to 4, equals 4 members from the start."""
    sets = ["train.steps=30", "train.seq_len=16", "train.eval_every=10", "train.eval_batches=1", "archs=[sec2]"]
    _grown_equals_fresh("markov-init", sets, tmp_path, monkeypatch)


def test_a_gamma_sweep_round_trains_only_the_new_members_and_matches_a_fresh_run(
    tmp_path, monkeypatch, anchors_tiny, one_thread
):
    """anchors-bias: its γ-sweep is one ensemble outside RunContext.fit (seed index major), and a round from
    2 to 4 seed indices trains only the 2 × 3 new (γ, seed) members."""
    assert _grown_equals_fresh("anchors-bias", anchors_tiny, tmp_path, monkeypatch) == [2 * 3]


def test_a_decided_run_keeps_the_identity_it_was_asked_for(toy, tmp_path):
    """A sweep finds a decided point again: the run's config hash is that of the config asked for (the
    first look's members) and its plan, not of the members its rounds reached."""
    from tdlab.runs import config_hash

    run = _decide(toy, tmp_path)
    conf = run.config
    assert conf["config"]["members"] > 3
    asked = {
        "experiment": conf["experiment"],
        "profile": "quick",
        "config": {**conf["config"], "members": 3},
        "decide": {**DecidePlan(budget_s=3600.0).model_dump(), "schedule": [3]},
    }
    assert config_hash(conf) == config_hash(asked)
    assert config_hash(conf) != config_hash({**asked, "decide": {**asked["decide"], "budget_s": 60.0}})
    assert config_hash(conf) != config_hash({k: v for k, v in asked.items() if k != "decide"})


# ------------------------------------------------------------------------------------------------
# Training longer: claims judged at convergence that are still moving.


class SlowConfig(ToyConfig):
    steps: int = 10
    moving: float = 1.0  # end drift × steps: a member has drifted by moving / steps at the end


class Slow(Toy):
    """A toy whose members settle as they train longer: the end drift is ``moving / steps``."""

    name = "toy-slow"
    Config = SlowConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"quick": {}, "paper": {"steps": 80}}
    claims = (
        ClaimSpec(
            id="settles",
            statement="the mean is within 10 of 0 at convergence",
            test="value",
            relation="close",
            quantity="w",
            expected=0.0,
            tolerance=10.0,
            drift_tolerance=0.03,
            horizon="convergence",
            threshold=TOY,
        ),
    )

    def measure(self, cfg: SlowConfig, run) -> Measurements:
        m = Measurements()
        w = run.arrays("a")["w"][:, 0].tolist()
        m.row("settles", "a", Sample(tuple(w), drift=cfg.moving / cfg.steps), arms=["a"])
        return m


class SlowWithBudget(Slow):
    name = "toy-slow-budget"
    claims = (
        *Slow.claims,
        ClaimSpec(
            id="at-budget",
            statement="within 10 at the budget",
            test="value",
            relation="close",
            quantity="w",
            expected=0.0,
            tolerance=10.0,
            horizon="budget",
            threshold=TOY,
        ),
    )

    def measure(self, cfg, run) -> Measurements:
        m = super().measure(cfg, run)
        m.row("at-budget", "a", Sample(tuple(run.arrays("a")["w"][:, 0].tolist())), arms=["a"])
        return m


def _decide_exp(exp, monkeypatch, tmp_path, sets=(), members=3, budget=3600.0, run_id="r"):
    monkeypatch.setattr(base, "get", lambda name: exp)  # a resume or rebuild reads it by name
    cfg = exp.make_config("quick", list(sets), members=members)
    return runner.execute(
        exp, cfg, "quick", tmp_path, progress=False, run_id=run_id, decide=DecidePlan(budget_s=budget)
    )


def test_a_claim_still_moving_at_convergence_trains_longer_every_member_anew(monkeypatch, tmp_path):
    run = _decide_exp(Slow(), monkeypatch, tmp_path)
    d, g = run.summary["decide"], run.summary["claims"][0]
    # 10 steps: drift 0.1 > 0.03 (still moving); 20: 0.05; 40: 0.025 settles -> holds
    assert [r["length"] for r in d["rounds"]] == [10, 20, 40]
    assert [r["longer"] for r in d["rounds"]] == [False, True, True]
    assert [r["members"] for r in d["rounds"]] == [3, 3, 3]  # nothing for members to settle: they do not grow
    assert d["rounds"][0]["training"] == ["settles"] and g["verdict"] == "holds"
    assert ToyTrainer.trained == member_seeds(0, 3) * 3  # every member trained anew at each length
    assert run.config["config"]["steps"] == 40 and d["first_length"] == {"steps": 10}
    html = (run.path / "report.html").read_text()
    assert "longer training for" in html and "(longer: every member anew)" in html
    from tdlab.report.findings import decided_by

    assert "steps 10 → 40" in decided_by(run.summary)


def test_training_stops_when_it_brings_nothing_closer_and_never_passes_the_seeds_length(monkeypatch, tmp_path):
    run = _decide_exp(Slow(), monkeypatch, tmp_path, sets=["moving=100.0"])  # drifts 10, 5, ... never settles
    d = run.summary["decide"]
    assert [r["length"] for r in d["rounds"]] == [10, 20, 40]  # two longer rounds that brought it no closer
    assert run.summary["claims"][0]["verdict"] == "not resolved" and "decided nothing new" in d["stopped"]
    capped = _decide_exp(Slow(), monkeypatch, tmp_path, sets=["moving=100.0", "steps=80"], run_id="capped")
    assert [r["length"] for r in capped.summary["decide"]["rounds"]] == [80]  # the paper profile's length: no longer
    assert "the paper profile's" in capped.summary["decide"]["stopped"]


def test_an_experiment_with_a_budget_claim_trains_longer_only_up_to_the_seeds_length(monkeypatch, tmp_path):
    """A claim judged at the seed's budget no longer stops the rounds from training longer: they grow towards
    the seed's length (the paper profile's 80 steps) and never past it."""
    run = _decide_exp(SlowWithBudget(), monkeypatch, tmp_path)
    d = run.summary["decide"]
    assert any(r["longer"] for r in d["rounds"]) and max(r["length"] for r in d["rounds"]) <= 80
    assert 10 < run.config["config"]["steps"] <= 80


def test_a_run_that_trained_longer_keeps_the_identity_it_was_asked_for(monkeypatch, tmp_path):
    from tdlab.runs import config_hash

    conf = _decide_exp(Slow(), monkeypatch, tmp_path).config
    asked = {**conf, "config": {**conf["config"], "steps": 10}}
    assert conf["config"]["steps"] == 40 and config_hash(conf) == config_hash(asked)
    plain = {k: v for k, v in asked.items() if k != "decide"}
    assert config_hash(conf) != config_hash(plain)


def test_a_longer_round_interrupted_resumes_to_the_same_numbers(monkeypatch, tmp_path):
    whole = _decide_exp(Slow(), monkeypatch, tmp_path / "a")
    ToyTrainer.trained = []
    ToyTrainer.stop_after = 3 + 3 + 1  # in the third round (40 steps), one member trained
    with pytest.raises(KeyboardInterrupt):
        _decide_exp(Slow(), monkeypatch, tmp_path / "b")
    ToyTrainer.stop_after = None
    staged = Run.read_config(tmp_path / "b" / ".staging-r" / "config.yaml")
    assert staged["config"]["steps"] == 40 and staged["decide"]["rounds"][-1]["length"] == 20
    resumed = runner.resume(tmp_path / "b" / "r", progress=False)
    a, b = whole.summary["decide"]["rounds"], resumed.summary["decide"]["rounds"]
    assert [(r["members"], r["length"], r["longer"]) for r in a] == [
        (r["members"], r["length"], r["longer"]) for r in b
    ]
    assert whole.summary["claims"] == resumed.summary["claims"]
    assert Run(whole.path).metrics().equals(Run(resumed.path).metrics())


def test_real_experiments_say_how_they_may_train_longer():
    """The training-length field comes from the experiment; the cap is its paper profile's (the seed's length):
    an experiment with claims at the seed's budget trains longer up to that budget, never past it."""
    from tdlab.config import read_field
    from tdlab.decide import training_extension
    from tdlab.experiments.base import get

    heads = get("markov-icl-heads")
    ext = training_extension(heads, heads.make_config("quick"))
    assert ext.field == "train.steps"
    assert ext.current == read_field(heads.make_config("quick"), "train.steps")
    assert ext.cap == read_field(heads.make_config("paper"), "train.steps") > ext.current
    assert ext.next() == min(ext.cap, 2 * ext.current)
    init = get("markov-init")  # a budget claim (standard-init-leaves-plateau-later): 2000 -> 4000, capped at 8000
    budget = training_extension(init, init.make_config("quick"))
    assert (budget.current, budget.cap, budget.next()) == (2000, 8000, 4000)
    assert training_extension(init, init.make_config("quick", ["train.steps=8000"])).next() is None
    landscape = get("markov-landscape")  # no training-length field (a flow's time)
    assert training_extension(landscape, landscape.make_config("quick")) is None


# ------------------------------------------------------------------------------------------------
# A Monte-Carlo reference whose draws widen the interval: more draws, each computed once.


class DrawsConfig(ToyConfig):
    draws: int = Field(4, ge=2, le=32)  # replicate draws of the reference
    ref_sd: float = 1.5  # one draw's spread around the true reference, 0


class WithReference(Toy):
    """Members sit near 0 (spread 0.1); the claim compares them with a reference estimated from ``draws``
    replicate draws of spread ``ref_sd``: the reference, not the members, sets the interval's width."""

    name = "toy-reference"
    Config = DrawsConfig
    computed: ClassVar[list[int]] = []  # the draw indices computed, over every round
    claims = (
        ClaimSpec(
            id="matches-reference",
            statement="the mean is within 1 of the reference",
            test="value",
            relation="close",
            quantity="w",
            tolerance=1.0,
            horizon="budget",
            threshold=TOY,
        ),
    )

    def run(self, cfg: DrawsConfig, ctx: RunContext) -> None:
        super().run(cfg, ctx)
        values, kept = [], current_round()
        for r in range(cfg.draws):
            if ("ref", r) not in kept.memo:
                WithReference.computed.append(r)
                kept.memo[("ref", r)] = cfg.ref_sd * float(np.random.default_rng(1000 + r).normal())
            values.append(kept.memo[("ref", r)])
        kept.unit_seconds["reference draw"] = 0.001
        ctx.writer.add_metrics("reference", [(0, r, "draw", v) for r, v in enumerate(values)])
        ctx.writer.save_arrays("reference", [{"done": torch.ones(1)} for _ in values])

    def measure(self, cfg: DrawsConfig, run) -> Measurements:
        m = Measurements()
        w = [0.1 * v for v in run.arrays("a")["w"][:, 0].tolist()]
        ref = run.metrics().query("arm == 'reference' and name == 'draw'").sort_values("member")["value"]
        m.row("matches-reference", "a", Sample(tuple(w)), Sample(tuple(ref.tolist())), arms=["a"])
        return m


def test_a_reference_that_sets_the_width_is_drawn_more_often_and_each_draw_is_computed_once(monkeypatch, tmp_path):
    WithReference.computed = []
    run = _decide_exp(WithReference(), monkeypatch, tmp_path)
    d, g = run.summary["decide"], run.summary["claims"][0]
    # 3 members: the t quantile binds too, so members and draws grow together, and the third look decides
    assert [(r["members"], r["draws"]) for r in d["rounds"]] == [(3, 4), (6, 8), (12, 16)]
    assert d["rounds"][0]["sharpening"] == ["matches-reference"] and not d["rounds"][0]["not_helped"]
    assert g["verdict"] == "holds" and d["stopped"] == "every paper group is decided"
    last = d["rounds"][-1]["draws"]
    assert WithReference.computed == list(range(last))  # every draw once: a round computes only the new ones
    assert ToyTrainer.trained == member_seeds(0, 12)  # every member once
    # the decided run is the plain run with its final draws
    plain = runner.execute(
        WithReference(),
        WithReference().make_config("quick", [f"draws={last}"], members=12),
        "quick",
        tmp_path / "plain",
        progress=False,
        run_id="p",
    )
    assert plain.summary["claims"][0]["rows"][0]["reference"] == g["rows"][0]["reference"]
    from tdlab.report.findings import decided_by

    assert "reference draws 4 → 16" in decided_by(run.summary)
    assert "<td>8 (matches-reference)</td>" in (run.path / "report.html").read_text()


def test_without_a_draws_field_the_rounds_stop_and_say_the_reference_binds(monkeypatch, tmp_path):
    class NoField(WithReference):
        name = "toy-reference-fixed"  # not in the draws table

    run = _decide_exp(NoField(), monkeypatch, tmp_path)
    d = run.summary["decide"]
    # members grow while the t quantile of a few members binds; at 12 the reference's error alone sets the width
    assert [r["members"] for r in d["rounds"]] == [3, 6, 12] and run.summary["claims"][0]["verdict"] == "not resolved"
    assert "no undecided paper group" in d["stopped"]
    assert d["rounds"][-1]["not_helped"] == {
        "matches-reference": "the reference's Monte-Carlo error, not the members' spread, sets the interval's width"
    }
    assert "would have to grow by" in d["stopped"]


def test_icl_lsa_vs_lca_names_its_reference_draws_with_their_bound():
    from tdlab.decide import draws_extension
    from tdlab.experiments.base import get

    exp = get("icl-lsa-vs-lca")
    d = draws_extension(exp, exp.make_config("quick"))
    assert (d.field, d.current, d.cap) == ("claims.reference_draws", 4, 256)
    assert draws_extension(get("markov-init"), get("markov-init").make_config("quick")) is None
