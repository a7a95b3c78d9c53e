"""anchors-bias (seed 001 Fig. 2A): the γ-sweep as one ensemble (per-member γ, shared data), the T50/AUC
measures on hand-made curves, every claim on planted runs that satisfy and that violate it, the
training-set health gate, and a tiny end-to-end run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.anchors_bias import AnchorsBias
from tdlab.experiments.anchors_training import GammaArms, anchor_splits, auc, gamma_gpt, t50
from tdlab.experiments.runner import execute
from tdlab.models.gpt import GPT
from tdlab.runs import Run, RunWriter
from tdlab.seeding import generators
from tdlab.tasks.anchors import KIND_MEM, KIND_RSN_TRAIN, Anchors, AnchorsConfig
from tdlab.train.data import DATASET, FixedDataset

TINY = ["task.key_min=21", "task.key_max=30", "task.n_train=600", "task.n_test=40", "model.d=8", "model.d_attn=4",
        "model.d_ff=8", "schedule.epochs=2", "schedule.n_eval=60", "train.lr=0.003", "snapshot_epochs=[1]"]


# --- measures --------------------------------------------------------------------------------------

def test_t50_is_the_first_epoch_at_or_above_the_threshold_and_censored_at_the_horizon():
    epochs = np.array([0, 1, 2, 3, 4])
    acc = np.array([[0.0, 0.2, 0.5, 0.9, 0.4],   # reaches exactly 0.5 at epoch 2
                    [0.0, 0.1, 0.2, 0.3, 0.49],  # never: censored
                    [0.6, 0.7, 0.8, 0.9, 1.0]])  # already at init
    assert t50(epochs, acc, horizon=5) == [2.0, 5.0, 0.0]
    assert t50(epochs, acc, horizon=5, threshold=0.85) == [3.0, 5.0, 3.0]


def test_auc_is_the_mean_accuracy_after_epoch_zero():
    epochs = np.array([0, 1, 2, 3])
    acc = np.array([[0.9, 0.0, 0.5, 1.0], [0.0, 0.3, 0.3, 0.3]])
    assert auc(epochs, acc) == pytest.approx([0.5, 0.3])
    with pytest.raises(ValueError, match="no evaluation"):
        auc(np.array([0]), np.array([[0.1]]))


# --- the γ-sweep ensemble ---------------------------------------------------------------------------

def test_members_of_a_gamma_sweep_equal_one_member_models_of_their_own_gamma(one_thread):
    exp = AnchorsBias()
    cfg = exp.make_config("quick", TINY, members=2)
    arms = GammaArms.make(7, [0.3, 0.5, 0.8], 2)
    assert len(set(arms.seeds)) == 6 and arms.arms == ["gamma=0.3", "gamma=0.5", "gamma=0.8"]
    mcfg = cfg.model_for_task()
    model = gamma_gpt(mcfg, list(arms.seeds), arms.gamma_of)
    for e, s in enumerate(arms.seeds):
        g = arms.gamma_of[s]
        alone = GPT(mcfg.updated({"init_gamma": g}), [s])
        for (name, p), (_, q) in zip(model.named_parameters(), alone.named_parameters(), strict=True):
            assert torch.equal(p[e], q[0]), (name, e)
    # the γ sets the scale: embedding std d^-γ (B.4), here d = 8
    wte = model.wte.detach()
    for e, s in enumerate(arms.seeds):
        assert float(wte[e].std()) == pytest.approx(8 ** -arms.gamma_of[s], rel=0.1)
    # a chunk of members (as the trainer may hand it) keeps each member's γ
    part = gamma_gpt(mcfg, list(arms.seeds[3:5]), arms.gamma_of)
    assert torch.equal(part.wte[0], model.wte[3]) and torch.equal(part.wte[1], model.wte[4])


def test_arms_of_one_seed_index_share_their_data_and_splits_are_what_they_say():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, n_train=500, n_test=40))
    arms = GammaArms.make(3, [0.3, 0.8], 2)
    make = anchor_splits(task, 500, 50, 40)
    data = FixedDataset(make, 50, eval_splits=("mem", "rsn_train", "test"), data_seeds=arms.data_seeds).bind(list(arms.seeds), "cpu")
    tok = data.splits["train"]["tokens"]
    assert torch.equal(tok[0], tok[2]) and torch.equal(tok[1], tok[3]) and not torch.equal(tok[0], tok[1])
    # splits rebuilt from the member's data generator, independently
    g = generators([arms.seeds[1]], DATASET)[0]
    full = task.dataset(g, 500, "train")
    mem_rows = full["tokens"][full["kind"] == KIND_MEM][:50]
    rsn_rows = full["tokens"][full["kind"] == KIND_RSN_TRAIN][:50]
    assert torch.equal(data.splits["mem"]["tokens"][1], mem_rows)
    assert torch.equal(data.splits["rsn_train"]["tokens"][1], rsn_rows)
    # held-out: every test sequence carries a tuple of M, and its label is z_p + Σa
    test = data.splits["test"]["tokens"][1]
    anchors = test[(test >= 11) & (test <= 20)].reshape(-1, 2)
    assert {tuple(a) for a in anchors.tolist()} <= {(11, 13), (13, 11)}
    assert len(anchors) == 40


# --- claims on planted runs -------------------------------------------------------------------------

EPOCHS = list(range(0, 11))
SPE = 6  # steps per epoch of the planted config (n_train 600 / batch 100)


def _ramp(at: float, top: float = 1.0, start: float = 0.05) -> list[float]:
    """An accuracy curve that jumps from ``start`` to ``top`` at epoch ``at``."""
    return [start if e < at else top for e in EPOCHS]


def _arm(mem_at, rsn_at, test_at, test_top=0.95, test_loss=None, members=3, jitter=(0.0, 0.3, -0.3)):
    """Per-metric member curves of one planted arm; jitter shifts the jump epochs per member."""
    out = {}
    for split, at, top in (("mem", mem_at, 1.0), ("rsn_train", rsn_at, 1.0), ("test", test_at, test_top)):
        out[f"{split}_acc"] = [_ramp(at + j, top) for j in jitter[:members]]
        out[f"{split}_loss"] = [[3.0 - 2.5 * a for a in c] for c in out[f"{split}_acc"]]
    if test_loss is not None:
        out["test_loss"] = [test_loss] * members
    return out


def _paper_arms():
    flat = [3.0] * len(EPOCHS)
    return {
        "gamma=0.8": _arm(mem_at=8, rsn_at=2, test_at=3),
        "gamma=0.5": _arm(mem_at=6, rsn_at=3, test_at=5, test_top=0.6),
        "gamma=0.3": _arm(mem_at=4, rsn_at=4, test_at=99, test_top=0.0, test_loss=flat),
    }


def _planted(tmp_path, arms, overrides=(), members=3):
    exp = AnchorsBias()
    cfg = exp.make_config("quick", [*TINY, "schedule.epochs=10", *overrides], members=members)
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm, metrics in arms.items():
            rows = [(e * SPE, m, name, float(v)) for name, curves in metrics.items()
                    for m, c in enumerate(curves) for e, v in zip(EPOCHS, c, strict=True)]
            w.add_metrics(arm, rows)
        run = w.finish()
    assert cfg.steps_per_epoch == SPE
    return exp, cfg, run


def _rows(analysis):
    return {r.id: r for g in analysis.groups for r in g.rows}


def test_the_papers_picture_holds_every_claim(tmp_path):
    exp, cfg, run = _planted(tmp_path, _paper_arms())
    a = exp.analyse(cfg, run)
    assert [g.id for g in a.paper] == ["small-init-learns-reasoning-first", "large-init-memorises",
                                      "reasoning-bias-grows-with-gamma"]
    rows = _rows(a)
    assert all(r.verdict == "holds" for r in rows.values()), {k: (r.verdict, r.describe()) for k, r in rows.items()}
    m = a.measurements["gamma=0.8"]
    assert m["T50_mem"] == [8.0, 9.0, 8.0] and m["T50_rsn_train"] == [2.0, 3.0, 2.0]  # jitter: 8.3 -> 9, 7.7 -> 8
    assert m["AUC_test"] == pytest.approx([0.95 * 8 / 10 + 0.05 * 2 / 10, 0.95 * 7 / 10 + 0.05 * 3 / 10, 0.95 * 8 / 10 + 0.05 * 2 / 10])
    assert a.measurements["gamma=0.3"]["test_loss_min_ratio"] == [1.0, 1.0, 1.0]
    assert rows["small-init-learns-reasoning-first/t50-rsn-train-before-mem"].paired


def test_each_claim_fails_on_a_run_that_violates_it(tmp_path):
    arms = _paper_arms()
    # γ = 0.8 learns memory first and does not generalise; γ = 0.3 generalises and memorises much later
    arms["gamma=0.8"] = _arm(mem_at=2, rsn_at=5, test_at=9, test_top=0.5)
    arms["gamma=0.3"] = _arm(mem_at=9, rsn_at=2, test_at=3, test_top=0.9)
    exp, cfg, run = _planted(tmp_path, arms)
    rows = _rows(exp.analyse(cfg, run))
    for rid in ("small-init-learns-reasoning-first/t50-rsn-train-before-mem",
                "small-init-learns-reasoning-first/t50-rsn-test-before-mem",
                "small-init-learns-reasoning-first/auc-rsn-test-above-mem",
                "small-init-learns-reasoning-first/final-acc-rsn-test",
                "large-init-memorises/t50-mem-vs-rsn-train",
                "large-init-memorises/test-loss-stays",
                "large-init-memorises/final-acc-rsn-test",
                "reasoning-bias-grows-with-gamma/0.8-above-0.5"):
        assert rows[rid].verdict == "fails", (rid, rows[rid].describe())
    assert rows["large-init-memorises/t50-mem-vs-rsn-train"].mean == pytest.approx(
        np.mean([math.log(9 / 2), math.log(10 / 3), math.log(9 / 2)]))


def test_seeds_that_disagree_leave_a_direction_not_resolved(tmp_path):
    arms = _paper_arms()
    arms["gamma=0.8"] = _arm(mem_at=5, rsn_at=5, test_at=5, jitter=(-2.0, 2.0, 0.0))
    arms["gamma=0.8"]["mem_acc"] = [_ramp(7), _ramp(3), _ramp(4)]  # mem before rsn in one seed, after in another
    exp, cfg, run = _planted(tmp_path, arms)
    rows = _rows(exp.analyse(cfg, run))
    assert rows["small-init-learns-reasoning-first/t50-rsn-train-before-mem"].verdict == "not resolved"


def test_health_gate_reads_the_training_data_not_the_held_out_set(tmp_path):
    from tdlab.experiments.runner import rebuild

    arms = _paper_arms()
    never = {k: [[3.0] * len(EPOCHS)] * 3 for k in ("mem_loss", "rsn_train_loss", "test_loss")}
    never.update({k: [[0.05] * len(EPOCHS)] * 3 for k in ("mem_acc", "rsn_train_acc", "test_acc")})
    arms["gamma=0.5"] = never
    exp, cfg, run = _planted(tmp_path, arms)
    health = exp.health(cfg, run)
    assert health["gamma=0.3"].trained  # its held-out loss never fell, its training loss did
    assert not health["gamma=0.5"].moved and "final loss not below" in " ".join(health["gamma=0.5"].reasons)
    s = rebuild(run.path).summary
    groups = {g["id"]: g for g in s["claims"]}
    grow = {r["id"]: r for r in groups["reasoning-bias-grows-with-gamma"]["rows"]}
    assert all(r["verdict"] == "not evaluable" for r in grow.values())  # both rows need γ = 0.5
    large = {r["id"]: r for r in groups["large-init-memorises"]["rows"]}
    assert all(r["verdict"] == "holds" for r in large.values())
    assert s["figures"] == ["figures/fig2a_loss_accuracy.png", "figures/fig8_examples.png"]


# --- config -----------------------------------------------------------------------------------------

def test_bad_configs_are_refused_naming_the_field():
    exp = AnchorsBias()
    with pytest.raises(ConfigError, match="gammas"):
        exp.make_config("quick", ["gammas=[0.3,0.3]"])
    with pytest.raises(ConfigError, match="model.init_gamma"):
        exp.make_config("quick", ["model.init_gamma=0.5"])
    with pytest.raises(ConfigError, match="model.init"):
        exp.make_config("quick", ["model.init=standard"])
    with pytest.raises(ConfigError, match="snapshot_epochs"):
        exp.make_config("quick", ["snapshot_epochs=[12]"])
    with pytest.raises(ConfigError, match="test_tuples"):
        exp.make_config("quick", ["task.test_tuples=[[1,2]]"])
    paper = exp.make_config("paper")
    assert (paper.train.lr, paper.train.batch, paper.train.grad_clip, paper.schedule.epochs) == (1e-5, 100, 1.0, 1000)
    assert (paper.model.d, paper.model.d_attn, paper.model.d_ff, paper.model.norm, paper.task.n_train) == (200, 64, 512, "post", 198_000)
    quick = exp.make_config("quick")
    assert (quick.task.q, quick.task.L, quick.task.d_vob, quick.gammas) == (2, 9, 200, [0.3, 0.5, 0.8])
    assert (quick.model.layers, quick.model.norm, quick.train.beta2, quick.train.weight_decay) == (2, "post", 0.999, 0.01)


# --- end to end -------------------------------------------------------------------------------------

def test_tiny_run_end_to_end_writes_per_gamma_arms_and_verdicts(runs_dir, one_thread):
    exp = AnchorsBias()
    cfg = exp.make_config("quick", TINY, members=2)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done"
    assert sorted(s["arms"]) == ["gamma=0.3", "gamma=0.5", "gamma=0.8"]
    assert {g["id"] for g in s["claims"]} == {"small-init-learns-reasoning-first", "large-init-memorises",
                                             "reasoning-bias-grows-with-gamma"}
    df = run.metrics()
    names = set(df[df.arm == "gamma=0.8"].name)
    assert {"mem_acc", "rsn_train_acc", "test_acc", "mem_loss", "test_loss"} <= names
    assert sorted(df[(df.name == "test_acc")].step.unique().tolist()) == [0, 6, 12]  # every epoch of 6 steps
    arrays = Run(run.path).arrays("gamma=0.3")
    init = Run(run.path).arrays("gamma=0.3@init")
    assert arrays["wte"].shape == (2, 200, 8) and init["wte"].shape == (2, 200, 8)
    assert float(init["wte"].std()) == pytest.approx(8 ** -0.3, rel=0.1)
    snap = Run(run.path).arrays("gamma=0.3@step6")  # after epoch 1 of 6 steps
    assert snap["wte"].shape == (2, 200, 8) and not torch.equal(snap["wte"], arrays["wte"])
    assert not torch.equal(snap["wte"], init["wte"])
