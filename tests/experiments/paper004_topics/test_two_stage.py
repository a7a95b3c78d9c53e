"""topics-two-stage (the two-stage lag on hand-made norm curves: tests/probes/test_curves.py): a setting decided on synthetic stored runs (holds when W^K, W^Q lag by half of the horizon,
fails when they grow with W^V, not evaluable when they never double), each setting gated on its own members; the
claim is an existence over the grid (one setting showing the stages holds it; it fails only when every setting is
evaluable and none does); each batch size is its own arm and reaches its trainer; a tiny training run ends with
a verdict; per-member lr and init reach the right members; bad configs are refused."""

from __future__ import annotations

import numpy as np
import pytest

from tdlab.config import ConfigError
from tdlab.experiments.paper004_topics.common import training
from tdlab.experiments.paper004_topics.two_stage import TopicsTwoStage, member_settings, setting_name
from tdlab.run_view import RunView
from tdlab.runner import execute
from tdlab.runs import RunWriter

STEPS = np.arange(0, 11) * 100  # 0, 100, ..., 1000


def _ramp(start, end, t0, t1, lo=0.05):
    """A norm that sits at ``lo`` (or ``start``) until step ``t0``, rises linearly to ``end`` at ``t1``, then stays."""
    x = np.clip((STEPS - t0) / (t1 - t0), 0.0, 1.0)
    return lo + (end - lo) * x if start is None else start + (end - start) * x


# Fig. 4's picture: V rises over steps 0-300, K and Q over 350-1000.
V_OK = _ramp(None, 30.0, 0, 300)
K_OK = _ramp(None, 20.0, 350, 1000)
Q_OK = _ramp(None, 25.0, 350, 1000)


def _synthetic_run(tmp_path, K, tag: str, extra_settings: bool = False, batches=(16,), K40=None):
    """A stored run of Adam at lr 0.01, init 1e-3 (the headline's 3 members in the quick profile) at each batch of
    ``batches`` (with ``extra_settings`` also lr 0.03: 3 members that never learn), norms over Fig. 4's 1000 steps;
    W^K follows ``K`` (``K40`` at batch 40, when given); nothing trained."""
    exp = TopicsTwoStage()
    lrs = "[0.01,0.03]" if extra_settings else "[0.01]"
    b = "[" + ",".join(str(x) for x in batches) + "]"
    cfg = exp.make_config("quick", ["optimizers=[adam]", f"lrs={lrs}", "inits=[0.001]", f"batches={b}"])
    with RunWriter(tmp_path / "synthetic", exp.name, run_id=f"synthetic-{tag}") as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm in exp.arms(cfg):
            rows = []
            k = K40 if K40 is not None and arm.endswith("/b40") else K
            for m, s in enumerate(member_settings(cfg, arm)):
                scale = 1.0 + 0.01 * m
                for name, curve in (("norm_K", k), ("norm_Q", Q_OK), ("norm_V", V_OK)):
                    rows += [(int(st), m, name, float(v * scale)) for st, v in zip(STEPS, curve, strict=True)]
                end = 4.61 if s.lr == 0.03 else 3.5
                rows += [(int(st), m, "test_loss", 4.6 + (end - 4.6) * st / 1000) for st in STEPS]
            w.add_metrics(arm, rows)
        run = w.finish()
    return exp, cfg, RunView(run)


@pytest.mark.parametrize("K, verdict", [(K_OK, "holds"), (_ramp(None, 20.0, 0, 300), "fails")], ids=["lag", "together"])
def test_a_setting_is_decided_on_stored_norms(tmp_path, K, verdict):
    exp, cfg, run = _synthetic_run(tmp_path, K, verdict)
    a = exp.analyse(cfg, run)
    name = setting_name("adam", 0.01, 0.001, 16)
    [g] = a.paper
    assert g.id == "value-grows-first" and g.verdict == verdict and g.spec.form == "existence"
    [row] = g.rows
    assert row.provenance == "paper" and row.arms == (name,) and row.stage == "kq-grew"
    assert row.measured.resolution == pytest.approx(0.1)  # one logging interval of the 1000-step horizon
    assert row.measured.values == pytest.approx([0.5 if verdict == "holds" else 0.0] * 3)
    assert a.measurements["settings"][name]["t_half_V"] == [200.0] * 3
    assert row.context["batch"] == 16 and row.context["lr"] == 0.01


def test_the_claim_is_an_existence_over_the_grid(tmp_path):
    """One setting of the grid shows the two stages (batch 16) and the other does not (batch 40): it holds; neither
    does: it fails; one fails and the other never reaches stage 2: not resolved, the grid not covered."""
    together, flat = _ramp(None, 20.0, 0, 300), _ramp(0.05, 0.09, 400, 1000, lo=0.05)
    exp, cfg, run = _synthetic_run(tmp_path, K_OK, "some", batches=(16, 40), K40=together)
    g = exp.analyse(cfg, run).result("value-grows-first")
    assert [r.verdict for r in g.rows] == ["holds", "fails"] and g.verdict == "holds"
    assert "1 of 2 settings" in g.reason
    exp, cfg, run = _synthetic_run(tmp_path, together, "none", batches=(16, 40))
    g = exp.analyse(cfg, run).result("value-grows-first")
    assert g.verdict == "fails" and g.cause == "decided"
    exp, cfg, run = _synthetic_run(tmp_path, flat, "half", batches=(16, 40), K40=together)
    g = exp.analyse(cfg, run).result("value-grows-first")
    assert g.rows[0].cause == "stage not reached" and g.rows[1].verdict == "fails"
    assert g.verdict == "not resolved" and g.cause == "grid not covered"


def test_no_stage_2_is_not_evaluable_and_each_setting_is_gated_on_its_own_members(tmp_path):
    exp, cfg, run = _synthetic_run(tmp_path, _ramp(0.05, 0.09, 400, 1000, lo=0.05), "flat", extra_settings=True)
    a = exp.analyse(cfg, run)
    rows = {r.id.split("/", 1)[1]: r for r in a.result("value-grows-first").rows}
    head = rows[setting_name("adam", 0.01, 0.001, 16)]
    assert head.verdict == "not evaluable" and head.cause == "stage not reached" and "double" in head.reason
    other = rows[setting_name("adam", 0.03, 0.001, 16)]
    assert other.provenance == "paper" and other.verdict == "not evaluable" and other.cause == "not trained"
    assert a.health[setting_name("adam", 0.01, 0.001, 16)].trained  # the headline's own members trained
    assert a.result("value-grows-first").verdict == "not evaluable"


def test_tiny_run_through_the_runner_ends_with_verdicts(tmp_path, monkeypatch):
    batches = {}

    class Recording(training.Trainer):
        def __init__(self, cfg, *args, label="", **kw):
            batches[label] = cfg.batch
            super().__init__(cfg, *args, label=label, **kw)

    monkeypatch.setattr(training, "Trainer", Recording)
    exp = TopicsTwoStage()
    cfg = exp.make_config(
        "quick",
        [
            "train.steps=12",
            "train.eval_every=6",
            "train.eval_batches=1",
            "optimizers=[sgd,adam]",
            "batches=[2,3]",
            "headline_members=2",
            "lrs=[0.01,0.03]",
            "inits=[0.001]",
            "horizon=12",
        ],
        members=1,
    )
    r = execute(exp, cfg, "quick", tmp_path, progress=False)
    s = r.summary
    assert s["status"] == "done"
    assert batches == {"sgd/b2": 2, "sgd/b3": 3, "adam/b2": 2, "adam/b3": 3}  # each batch size its own arm
    assert [g["id"] for g in s["claims"]] == ["value-grows-first"]
    assert s["claims"][0]["verdict"] in ("holds", "fails", "not resolved", "not evaluable")
    table = s["measurements"]["settings"]
    assert set(table) == {setting_name(o, lr, 0.001, b) for o in ("sgd", "adam") for lr in (0.01, 0.03) for b in (2, 3)}
    assert table[setting_name("adam", 0.01, 0.001, 3)]["members"] == 2
    df = r.metrics()
    norms = df[(df["arm"] == "adam/b2") & (df["name"] == "norm_V")]
    assert sorted(norms["step"].unique()) == list(range(13))  # logged every step
    # each member started from its own U[0, init) scale: ‖W_0‖ ≈ init · V/√3 for a V x V matrix
    v0 = norms[norms["step"] == 0]["value"].to_numpy()
    np.testing.assert_allclose(v0, 0.001 * 101 / np.sqrt(3), rtol=0.05)
    assert any("eps" in n for n in s["notes"])  # AdamW's damped first steps of W^K, W^Q, measured
    for f in ("fig4_norms.png", "two_stage_lag_per_setting.png"):
        assert (r.path / "figures" / f).stat().st_size > 5000


def test_member_lr_and_init_reach_the_right_members(tmp_path):
    """Per-member learning rates and init scales: the members of an lr-0.03 setting move 3x as far in the
    first SGD step as those of lr 0.01 (one step is linear in lr), and init 1e-2 starts 10x larger."""
    exp = TopicsTwoStage()
    cfg = exp.make_config(
        "quick",
        [
            "train.steps=1",
            "train.eval_every=1",
            "batches=[2]",
            "train.eval_batches=1",
            "optimizers=[sgd]",
            "headline_optimizer=sgd",
            "headline_members=1",
            "lrs=[0.01,0.03]",
            "inits=[0.001,0.01]",
            "horizon=2",
        ],
        members=1,
    )
    r = execute(exp, cfg, "quick", tmp_path, progress=False)
    init = r.arrays("sgd/b2@init")["W_V"].double()
    final = r.arrays("sgd/b2")["W_V"].double()
    per = [(s.lr, s.init) for s in member_settings(cfg, "sgd/b2")]
    assert per == [(0.01, 0.001), (0.01, 0.01), (0.03, 0.001), (0.03, 0.01)]
    n0 = init.flatten(1).norm(dim=1)
    np.testing.assert_allclose((n0[1] / n0[0]).item(), 10.0, rtol=0.05)
    assert float(init[0].max()) < 0.001 and float(init[0].min()) >= 0.0
    moved = (final - init).flatten(1).norm(dim=1)
    assert moved.min() > 0
    # members draw their own documents (own seeds), so the step sizes compare only roughly: x3 in lr, > 1.5x moved
    assert float(moved[2:].mean() / moved[:2].mean()) > 1.5


@pytest.mark.parametrize(
    "override, field",
    [
        (["headline_lr=0.02"], "headline"),
        (["model.init=normal"], "model.init"),
        (["model.onehot=false"], "model"),
        (["lrs=[]"], "lrs"),
        (["batches=[16,16]"], "batches"),
        (["train.batch=16"], "batches"),
        (["claims.half=1.5"], "half"),
    ],
)
def test_bad_config_is_refused(override, field):
    with pytest.raises(ConfigError, match=field):
        TopicsTwoStage().make_config("quick", override)


def test_headline_only_trains_one_setting_off_the_grid(tmp_path):
    """``headline_only`` (the atlas's points): a headline outside the lists is accepted, the run has the headline
    optimiser's arm at each batch alone with its members at the headline lr and init, and its rows are the grid's;
    without it the same headline is refused."""
    over = ["headline_optimizer=sgd", "headline_lr=0.2", "headline_init=0.005", "headline_members=2"]
    with pytest.raises(ConfigError, match="headline"):
        TopicsTwoStage().make_config("quick", over)
    exp = TopicsTwoStage()
    cfg = exp.make_config(
        "quick",
        [
            *over,
            "headline_only=true",
            "train.steps=2",
            "train.eval_every=1",
            "batches=[2]",
            "train.eval_batches=1",
            "horizon=2",
        ],
    )
    assert exp.arms(cfg) == ["sgd/b2"]
    assert [(s.lr, s.init) for s in member_settings(cfg, "sgd/b2")] == [(0.2, 0.005)] * 2
    r = execute(exp, cfg, "quick", tmp_path, progress=False)
    init = r.arrays("sgd/b2@init")["W_V"].double()
    assert float(init.min()) >= 0.0 and float(init.max()) < 0.005 and float(init.max()) > 0.001  # U[0, 0.005)
    (row,) = next(g for g in r.summary["claims"] if g["id"] == "value-grows-first")["rows"]
    assert row["id"].endswith(setting_name("sgd", 0.2, 0.005, 2)) and row["provenance"] == "paper"


def test_the_atlas_searches_optimiser_lr_init_and_authors_compat():
    decl = TopicsTwoStage.atlas_axes
    assert [a.field for a in decl.axes] == ["headline_lr", "headline_init", "headline_optimizer", "authors_compat"]
    assert decl.set == {"headline_only": True}
    assert set(decl.axes[2].range("quick")) == {"sgd", "adam"} and set(decl.axes[3].range("paper")) == {False, True}
