"""anchors-labels (seed 001 Fig. 7): the memory-only splits, group ranges, per-group in-range shares on
built predictions, both claims on planted runs (hold, fail, not evaluable), bad configs, a tiny
end-to-end run."""

from __future__ import annotations

import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.anchors_labels import AnchorsLabels, group_in_range, memory_splits
from tdlab.experiments.runner import execute
from tdlab.models.gpt import GPT
from tdlab.runs import RunWriter
from tdlab.seeding import member_seeds

TINY = ["groups_task.key_min=21", "groups_task.key_max=30", "groups_task.n_train=600", "compare_task.key_min=21",
        "compare_task.key_max=30", "compare_task.n_train=600", "model.d=8", "model.d_attn=4", "model.d_ff=8",
        "schedule.epochs=10", "schedule.n_eval=60", "train.lr=0.003"]
SPE = 6  # 600 / batch 100


def test_group_in_range_against_a_loop():
    g = torch.Generator().manual_seed(0)
    ranges = [(30, 49), (30, 69), (30, 89), (30, 109)]
    pred = torch.randint(0, 200, (2, 300), generator=g)
    group = torch.randint(0, 4, (2, 300), generator=g)
    got = group_in_range(pred, group, ranges)
    for e in range(2):
        for k, (lo, hi) in enumerate(ranges):
            sel = [int(p) for p, q in zip(pred[e], group[e]) if int(q) == k]
            assert float(got[e, k]) == pytest.approx(sum(lo <= p <= hi for p in sel) / len(sel))
    assert torch.isnan(group_in_range(pred, torch.zeros_like(group), ranges)[:, 1:]).all()  # empty groups


def test_groups_task_is_the_documented_make_up_and_labels_lie_in_range():
    exp = AnchorsLabels()
    cfg = exp.make_config("quick", TINY)
    task = cfg.task_of("groups")
    assert (cfg.groups_task.mix, cfg.groups_task.mem_max, cfg.groups_task.memory_groups) == ("memory", 20, 4)
    assert [task.group_range(k) for k in range(4)] == [(30, 49), (30, 69), (30, 89), (30, 109)]
    gen = torch.Generator().manual_seed(3)
    d = memory_splits(task, 600, 60)(gen)
    assert d["train"]["tokens"].shape == (600, 9) and torch.equal(d["mem"]["tokens"], d["train"]["tokens"][:60])
    full = task.dataset(torch.Generator().manual_seed(3), 600, "train")
    grp = (full["anchors"][:, 0] - 1) // 5
    assert torch.equal(grp, (full["anchors"][:, 1] - 1) // 5)  # tuples within one group
    share = group_in_range(full["label"][None], grp[None], [task.group_range(k) for k in range(4)])
    assert torch.equal(share, torch.ones(1, 4, dtype=torch.float64))
    # (b): the two arms differ only in their label law
    m1, m2 = cfg.task_of("mem1"), cfg.task_of("mem2")
    assert (m1.cfg.memory_labels, m2.cfg.memory_labels) == ("uniform", "window")
    a = m1.dataset(torch.Generator().manual_seed(5), 200, "train")
    b = m2.dataset(torch.Generator().manual_seed(5), 200, "train")
    assert torch.equal(a["tokens"], b["tokens"]) and not torch.equal(a["label"], b["label"])
    S = b["anchors"].sum(1)
    assert bool(((b["label"] >= b["key"] - S) & (b["label"] <= b["key"] + S)).all())


def _curve(at: int, top: float = 0.9, n: int = 11) -> list[float]:
    return [0.02 if e < at else top for e in range(n)]


def _planted(tmp_path, favourite: int, groups_acc: float, mem1_at: tuple, mem2_at: tuple):
    exp = AnchorsLabels()
    cfg = exp.make_config("quick", TINY, members=3)
    seeds = member_seeds(cfg.seed, 3)
    model = GPT(cfg.model_for(cfg.groups_task), seeds)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["lm_head"].zero_()
    state["lm_bias"].zero_()
    state["lm_bias"][:, favourite] = 50.0  # every prediction is `favourite`
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        w.save_arrays("groups", [{k: v[e] for k, v in state.items()} for e in range(3)])
        rows = [(e * SPE, m, "mem_acc", v) for m in range(3) for e, v in enumerate([0.01, groups_acc])]
        rows += [(e * SPE, m, "mem_loss", v) for m in range(3) for e, v in enumerate([5.3, 3.0])]
        w.add_metrics("groups", rows)
        for arm, ats in (("mem1", mem1_at), ("mem2", mem2_at)):
            rows = [(e * SPE, m, "mem_acc", v) for m, at in enumerate(ats) for e, v in enumerate(_curve(at))]
            rows += [(e * SPE, m, "mem_loss", 5.3 - 4 * v) for m, at in enumerate(ats) for e, v in enumerate(_curve(at))]
            w.add_metrics(arm, rows)
        run = w.finish()
    return exp, cfg, run


def _rows(a):
    return {r.id: r for g in a.groups for r in g.rows}


def test_planted_run_where_fig7_holds(tmp_path, one_thread):
    exp, cfg, run = _planted(tmp_path, favourite=35, groups_acc=0.1, mem1_at=(8, 9, 7), mem2_at=(3, 4, 3))
    a = exp.analyse(cfg, run)
    rows = _rows(a)
    assert all(r.verdict == "holds" for r in rows.values()), {k: r.describe() for k, r in rows.items()}
    assert a.measurements["mem2"]["T50"] == [3.0, 4.0, 3.0]
    assert a.measurements["groups"]["in_range"] == [[1.0] * 4] * 3


def test_planted_run_where_fig7_fails(tmp_path, one_thread):
    # predictions 60: outside group 1's range 30..49 only; F_mem,1 learnt first
    exp, cfg, run = _planted(tmp_path, favourite=60, groups_acc=0.1, mem1_at=(3, 4, 3), mem2_at=(8, 9, 7))
    rows = _rows(exp.analyse(cfg, run))
    assert rows["fig7-left-predictions-in-label-range/group1"].verdict == "fails"
    assert all(rows[f"fig7-left-predictions-in-label-range/group{k}"].verdict == "holds" for k in (2, 3, 4))
    assert rows["fig7-right-window-labels-learnt-faster/t50"].verdict == "fails"
    assert rows["fig7-right-window-labels-learnt-faster/auc"].verdict == "fails"


def test_late_snapshot_and_censored_t50_are_not_evaluable(tmp_path, one_thread):
    exp, cfg, run = _planted(tmp_path, favourite=35, groups_acc=0.6, mem1_at=(99, 99, 99), mem2_at=(99, 99, 99))
    rows = _rows(exp.analyse(cfg, run))
    g1 = rows["fig7-left-predictions-in-label-range/group1"]
    assert g1.verdict == "not evaluable" and "not early" in g1.reason
    t = rows["fig7-right-window-labels-learnt-faster/t50"]
    assert t.verdict == "not evaluable" and "censored" in t.reason


def test_bad_configs_are_refused_naming_the_field():
    exp = AnchorsLabels()
    with pytest.raises(ConfigError, match="groups_task.mix"):
        exp.make_config("quick", ["groups_task.mix=reasoning"])
    with pytest.raises(ConfigError, match="groups_task: .*overlap"):
        exp.make_config("quick", ["groups_task.mix=both"])  # anchors 1..20 would overlap the reasoning anchors
    with pytest.raises(ConfigError, match="memory_groups"):
        exp.make_config("quick", ["groups_task.memory_groups=3"])  # 3 does not divide 20 anchors
    with pytest.raises(ConfigError, match="compare_task.memory_labels"):
        exp.make_config("quick", ["compare_task.memory_labels=window"])
    with pytest.raises(ConfigError, match="memory_labels='window'"):
        exp.make_config("quick", ["compare_task.mem_max=15"])  # z - Σa < 0 for the window arm


def test_tiny_end_to_end_run(tmp_path, one_thread):
    exp = AnchorsLabels()
    cfg = exp.make_config("quick", [*TINY, "schedule.epochs=2"], members=2)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = run.summary
    assert s["status"] == "done"
    ids = {r["id"] for g in s["claims"] for r in g["rows"]}
    assert {"fig7-left-predictions-in-label-range/group4", "fig7-right-window-labels-learnt-faster/auc"} <= ids
    assert s["figures"] == ["figures/fig7_label_distribution.png"]
