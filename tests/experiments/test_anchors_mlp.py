"""anchors-mlp (seed 001 Figs. 2B, 3, 10): the trainer snapshot of epoch 1 equals a 1-epoch fit, the embedding
measures on built embeddings, the Fig. 3B–C laws, every claim holding on a planted picture and failing
on its opposite, and a tiny end-to-end run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.anchors_mlp import AnchorsMlp, pair_spearman, reasoning_theory_cosines
from tdlab.experiments.anchors_training import GammaArms, epoch_train_config, fixed_data
from tdlab.models.emb_mlp import EmbMLP
from tdlab.tasks.anchors import Anchors
from tdlab.train.objectives import LastPosition
from tdlab.train.trainer import Trainer
from tdlab.experiments.runner import execute
from tdlab.runs import Run, RunWriter

TINY = ["task.key_min=21", "task.key_max=30", "task.n_train=600", "task.n_test=40", "model.d_m=12", "model.d_f=16",
        "schedule.epochs=3", "schedule.n_eval=60", "train.lr=0.003", "snapshot_epochs=[1]"]


def test_pair_spearman_and_the_theory_cosines_of_fig3c():
    a = torch.tensor([[1.0, 0.9, 0.1], [0.9, 1.0, 0.5], [0.1, 0.5, 1.0]])
    assert float(pair_spearman(a, a)) == pytest.approx(1.0)
    assert float(pair_spearman(-a, a)) == pytest.approx(-1.0)
    exp = AnchorsMlp()
    cfg = exp.make_config("quick")
    laws, cos = reasoning_theory_cosines(exp.task(cfg))
    assert laws.shape == (10, 200) and torch.allclose(laws.sum(1), torch.ones(10, dtype=laws.dtype))
    # neighbouring anchors' laws overlap most: cosines fall with |s_i - s_j| along every row
    for i in range(10):
        row = cos[i]
        assert all(row[j] >= row[j + 1] - 1e-12 for j in range(i, 9))
        assert all(row[j] >= row[j - 1] - 1e-12 for j in range(1, i + 1))


def _emb(kind: str, E=3, d=64, seed=0):
    """Built (E, vocab, d) embedding tables: "paper" = memory anchors near one vector, reasoning anchors on
    a smooth curve (cos falls with distance); "orthogonal" = independent random rows."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(E, 200, d, generator=g) * 0.01
    if kind == "orthogonal":
        return torch.randn(E, 200, d, generator=g)
    base = torch.randn(E, 1, d, generator=g)
    W[:, 1:11] = base + 0.05 * torch.randn(E, 10, d, generator=g)
    t = torch.arange(10, dtype=torch.float32)[None, :, None]
    centres = torch.arange(d, dtype=torch.float32)[None, None, :]
    W[:, 11:21] = torch.exp(-((centres - 1.2 * t) ** 2) / 12.0)  # Eq. 14-like bumps
    return W


def _planted(tmp_path, emb, acc, members=3, overrides=()):
    """A run with given final embeddings per γ (``emb[γ] -> (E, 200, d)``, the snapshot and init take the same
    table) and accuracy jump epochs ``acc[γ] = (mem_at, rsn_at, test_at)``."""
    exp = AnchorsMlp()
    cfg = exp.make_config("quick", [*TINY, "schedule.epochs=10", "snapshot_epochs=[2]", *overrides], members=members)
    spe = cfg.steps_per_epoch
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for g in cfg.gammas:
            arm = GammaArms.arm(g)
            rows = []
            for split, at in zip(("mem", "rsn_train", "test"), acc[g]):
                for m in range(members):
                    for e in range(11):
                        a = 0.9 if e >= at + (m % 2) else 0.05
                        rows += [(e * spe, m, f"{split}_acc", a), (e * spe, m, f"{split}_loss", 3.0 - 2.0 * a)]
            w.add_metrics(arm, rows)
            W = emb[g]
            for name in (arm, f"{arm}@init", f"{arm}@step{2 * spe}"):
                w.save_arrays(name, [{"W_emb": W[m]} for m in range(members)])
        run = w.finish()
    return exp, cfg, run


def _rows(a):
    return {r.id: r for g in a.groups for r in g.rows}


def test_the_seeds_picture_holds_and_its_opposite_fails(tmp_path):
    emb = {0.8: _emb("paper"), 0.5: _emb("paper", seed=1), 0.3: _emb("orthogonal")}
    emb[0.5][:, 1:11] = _emb("orthogonal", seed=2)[:, 1:11] * 0.3 + emb[0.5][:, 1:11]  # memory less aligned at 0.5
    acc = {0.8: (9, 2, 3), 0.5: (6, 4, 5), 0.3: (4, 4, 99)}
    exp, cfg, run = _planted(tmp_path, emb, acc)
    a = exp.analyse(cfg, run)
    rows = _rows(a)
    paper = {r.id: r for g in a.paper for r in g.rows}
    bad = {k: r.describe() for k, r in paper.items() if r.verdict != "holds"}
    assert not bad, bad
    assert any(k.startswith("fig3a-memory-anchors-aligned/mem-cos/epoch2") for k in paper)
    assert any(k.startswith("fig3a-memory-anchors-aligned/mem-cos/end-epoch10") for k in paper)
    assert rows["fig3b-label-laws/memory-laws-equal"].verdict == "holds"
    assert rows["fig3b-label-laws/theory-rsn-rho"].verdict == "holds"
    # the opposite picture: γ = 0.8 orthogonal and memory-first, γ = 0.3 aligned and reasoning-first
    emb2 = {0.8: _emb("orthogonal"), 0.5: _emb("orthogonal", seed=3), 0.3: _emb("paper")}
    emb2[0.8][:, 11:21] = emb2[0.8][:, 11:21].flip(1)[:, torch.randperm(10, generator=torch.Generator().manual_seed(0))]
    acc2 = {0.8: (2, 7, 8), 0.5: (4, 4, 6), 0.3: (9, 2, 3)}
    exp, cfg, run = _planted(tmp_path / "b", emb2, acc2)
    rows = _rows(exp.analyse(cfg, run))
    for rid in ("emb-mlp-small-init-learns-reasoning-first/t50-rsn-train-before-mem",
                "emb-mlp-small-init-learns-reasoning-first/t50-rsn-test-before-mem",
                "emb-mlp-small-init-learns-reasoning-first/auc-rsn-test-above-mem",
                "emb-mlp-bias-larger-at-small-init/0.8-above-0.3",
                "fig3a-memory-anchors-aligned/mem-cos/end-epoch10",
                "fig3a-reasoning-anchors-ordered/rho/end-epoch10",
                "fig3c-embedding-follows-label-law/spearman/end-epoch10",
                "fig10-large-init-orthogonal/memory",
                "fig10-large-init-orthogonal/reasoning",
                "fig10-memory-alignment-grows-with-gamma/0.5-above-0.3"):
        assert rows[rid].verdict == "fails", (rid, rows[rid].describe())


def test_memory_accuracy_above_the_order_blind_ceiling_fails_the_sanity_row(tmp_path):
    emb = {g: _emb("paper", seed=i) for i, g in enumerate((0.3, 0.5, 0.8))}
    # 10 sequences per (key, memory tuple): the training-set ceiling is well below the planted 0.9
    exp, cfg, run = _planted(tmp_path, emb, {0.8: (1, 2, 3), 0.5: (6, 4, 5), 0.3: (4, 4, 99)}, overrides=["task.n_train=20000"])
    a = exp.analyse(cfg, run)
    ceil = a.measurements["order_blind_memory_ceiling"]
    assert all(0.5 < c < 0.75 for c in ceil)  # (10 + 90 E[max of 2 labels in 10 keys]/2)/100 ≈ 0.595, table-dependent
    assert all(c < 0.8 for c in a.measurements["order_blind_memory_ceiling_train_set"])
    rows = _rows(a)
    assert rows["emb-mlp-order-blind-ceiling/gamma=0.8"].verdict == "fails"  # planted 0.9 > ceiling


def test_training_set_ceiling_matches_a_slow_count_and_exceeds_the_population_one():
    import collections

    from tdlab.seeding import generators
    from tdlab.train.data import DATASET

    exp = AnchorsMlp()
    cfg = exp.make_config("quick", TINY, members=2)
    population, training = exp.memory_ceilings(cfg)
    task, arms = exp.task(cfg), exp.gamma_arms(cfg)
    for i in range(2):
        d = task.dataset(generators([arms.seeds[i]], DATASET)[0], cfg.task.n_train, "train")
        counts: dict = collections.defaultdict(collections.Counter)
        for k, a, y, kind in zip(d["key"].tolist(), d["anchors"].tolist(), d["label"].tolist(), d["kind"].tolist()):
            if kind == 0:
                counts[(k, tuple(sorted(a)))][y] += 1
        slow = sum(max(c.values()) for c in counts.values()) / sum(sum(c.values()) for c in counts.values())
        assert training[i] == pytest.approx(slow, abs=1e-12)
        assert training[i] > population[i]  # few sequences per (key, tuple): majorities beat the population


def test_bad_configs_are_refused():
    exp = AnchorsMlp()
    with pytest.raises(ConfigError, match="snapshot_epochs"):
        exp.make_config("quick", ["snapshot_epochs=[40]"])
    with pytest.raises(ConfigError, match="model.gamma"):
        exp.make_config("quick", ["model.gamma=0.5"])
    paper = exp.make_config("paper")
    assert (paper.train.lr, paper.task.L, paper.task.n_train + paper.task.n_test, paper.model.d_m, paper.model.d_f) == (
        5e-6, 3, 1_000_000, 200, 512)


def test_tiny_run_end_to_end_with_a_snapshot_equal_to_a_short_fits_end(runs_dir, one_thread):
    exp = AnchorsMlp()
    cfg = exp.make_config("quick", TINY, members=2)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    s = run.summary
    assert s["status"] == "done" and sorted(s["arms"]) == ["gamma=0.3", "gamma=0.5", "gamma=0.8"]
    ids = {g["id"] for g in s["claims"]}
    assert {"emb-mlp-small-init-learns-reasoning-first", "fig3a-memory-anchors-aligned", "fig10-large-init-orthogonal"} <= ids
    r = Run(run.path)
    snap, end, init = r.arrays(f"gamma=0.8@step{cfg.steps_per_epoch}")["W_emb"], r.arrays("gamma=0.8")["W_emb"], r.arrays("gamma=0.8@init")["W_emb"]
    assert snap.shape == end.shape == init.shape == (2, 200, 12)
    assert not torch.equal(snap, end) and not torch.equal(snap, init)
    # the trainer's snapshot after epoch 1 is a 1-epoch fit's end (constant lr): the same table
    arms, mcfg = exp.gamma_arms(cfg), cfg.model_for_task()
    tcfg = epoch_train_config(cfg.train, cfg.schedule, cfg.task.n_train, 3, epochs=1)
    data = fixed_data(exp.task(cfg), arms, cfg.task.n_train, cfg.schedule, cfg.task.n_test, cfg.train.batch,
                      view=Anchors.emb_mlp_view)
    gam = arms.gamma_of
    one = Trainer(tcfg, progress=False, objective=LastPosition()).fit(
        lambda s: EmbMLP(mcfg, s, [gam[x] for x in s]), list(arms.seeds), data)
    assert torch.equal(torch.stack([st["W_emb"] for st in one.states[4:6]]), snap)  # members of γ = 0.8
    assert np.isfinite(s["wall_time_s"])
