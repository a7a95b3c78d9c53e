"""anchors-embedding (seed 001 Figs. 4, 9, 11): Eq. 14 cosines and error by distance on built inputs,
every claim on planted runs (holds, fails, not evaluable without the snapshot), the from_run source
check, and a tiny end-to-end run that reads an anchors-bias run."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.anchors_bias import AnchorsBias
from tdlab.experiments.anchors_embedding import AnchorsEmbedding, eq14_member_cosines, error_by_distance
from tdlab.experiments.runner import execute
from tdlab.runs import Run, RunWriter
from tdlab.theory.anchors import eq14_cosine, eq14_vectors

TINY = ["task.key_min=21", "task.key_max=30", "task.n_train=600", "task.n_test=40", "model.d=8", "model.d_attn=4",
        "model.d_ff=8", "schedule.epochs=2", "schedule.n_eval=60", "train.lr=0.003", "snapshot_epochs=[1]"]
PLANT = [t for t in TINY if not t.startswith("model.d=")] + ["model.d=48", "fig4a_epochs=[1, 2]", "n_probe=50"]


def test_eq14_member_cosines_without_noise_match_the_closed_form():
    c = eq14_member_cosines([20, 22, 25], 200, gamma=50.0, seeds=[1, 2])  # d^-50: no noise
    assert c.shape == (2, 3, 3)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        d = abs([20, 22, 25][i] - [20, 22, 25][j])
        assert float(c[0, i, j]) == pytest.approx(float(eq14_cosine(d, 200)), abs=1e-6)
    noisy = eq14_member_cosines([20, 22, 25], 200, gamma=0.3, seeds=[1, 2])
    assert not torch.allclose(noisy[0], noisy[1])  # one draw per member


def test_error_by_distance_averages_each_diagonal():
    m = torch.zeros(1, 4, 4, dtype=torch.float64)
    t = torch.zeros(4, 4, dtype=torch.float64)
    m[0, 0, 1], m[0, 1, 2], m[0, 2, 3] = 0.1, 0.3, -0.2  # |Δ| = 1
    m[0, 0, 3] = 0.5  # |Δ| = 3
    e = error_by_distance(m, t)
    assert e[1] == pytest.approx([0.2]) and e[2] == pytest.approx([0.0]) and e[3] == pytest.approx([0.5])


def _wte(kind: str, seed: int, d: int = 48) -> torch.Tensor:
    """(3, 200, d) planted embedding tables: ``ordered`` (the seed's picture) or ``random``."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, 200, d, generator=g, dtype=torch.float64)
    if kind == "ordered":
        common = torch.randn(3, 1, d, generator=g, dtype=torch.float64)
        w[:, 1:11] = common + 0.05 * torch.randn(3, 10, d, generator=g, dtype=torch.float64)  # memory: aligned
        w[:, 11:21] = eq14_vectors(list(range(11, 21)), d) + 0.01 * torch.randn(3, 10, d, generator=g, dtype=torch.float64)
        w[:, 21:31] = eq14_vectors(list(range(21, 31)), d, "key") + 0.01 * torch.randn(3, 10, d, generator=g, dtype=torch.float64)
    return w.float()


def _planted(tmp_path, small: str, snapshot: bool = True):
    exp = AnchorsEmbedding()
    cfg = exp.make_config("quick", PLANT, members=3)
    spe = cfg.steps_per_epoch
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for k, g in enumerate(cfg.gammas):
            kind = small if g == 0.8 else "random"
            w.save_arrays(f"gamma={g:g}", [{"wte": t} for t in _wte(kind, 10 + k)])
            if snapshot:
                w.save_arrays(f"gamma={g:g}@step{spe}", [{"wte": t} for t in _wte(kind, 20 + k)])
        run = w.finish()
    return exp, cfg, run


def _rows(a):
    return {r.id: r for g in a.groups for r in g.rows}


def test_planted_ordered_embeddings_hold_every_claim(tmp_path, one_thread):
    exp, cfg, run = _planted(tmp_path, "ordered")
    a = exp.analyse(cfg, run)
    rows = _rows(a)
    assert {r.split("/")[0] for r in rows} == {"fig4a-memory-anchors-aligned", "fig4a-reasoning-anchors-ordered",
                                               "fig4b-keys-in-numerical-order", "fig4c-eq14-cosines"}
    assert all(r.verdict == "holds" for r in rows.values()), {k: r.describe() for k, r in rows.items() if r.verdict != "holds"}
    assert a.measurements["end"]["gamma=0.8"]["key_nn_order"] == pytest.approx([1.0] * 3)
    assert any("σ_P" in n and "width 12" in n for n in a.notes)
    assert a.measurements["sigma_p"] == pytest.approx(math.sqrt((10**2 - 1) / 12 + (10**2 - 1) / 12))


def test_planted_random_embeddings_fail(tmp_path, one_thread):
    exp, cfg, run = _planted(tmp_path, "random")
    rows = _rows(exp.analyse(cfg, run))
    for rid in ("fig4a-memory-anchors-aligned/mem-cos/epoch1", "fig4a-memory-anchors-aligned/mem-cos/epoch2",
                "fig4a-reasoning-anchors-ordered/rho/epoch1", "fig4a-reasoning-anchors-ordered/rho/epoch2",
                "fig4b-keys-in-numerical-order/key-nn-order", "fig4c-eq14-cosines/spearman"):
        assert rows[rid].verdict == "fails", rows[rid].describe()


def test_a_missing_snapshot_is_not_evaluable_with_its_reason(tmp_path, one_thread):
    exp, cfg, run = _planted(tmp_path, "ordered", snapshot=False)
    rows = _rows(exp.analyse(cfg, run))
    r = rows["fig4a-memory-anchors-aligned/mem-cos/epoch1"]
    assert r.verdict == "not evaluable" and "epoch 1" in r.reason
    assert rows["fig4a-memory-anchors-aligned/mem-cos/epoch2"].verdict == "holds"  # the end is always kept


def test_bad_configs_are_refused_naming_the_field(tmp_path):
    exp = AnchorsEmbedding()
    with pytest.raises(ConfigError, match="fig4a_epochs"):
        exp.make_config("quick", ["fig4a_epochs=[5]"])
    with pytest.raises(ConfigError, match="from_run"):
        exp.make_config("quick", [f"from_run={tmp_path / 'nothing'}"])
    assert exp.make_config("quick").snapshot_epochs == AnchorsBias().make_config("quick").snapshot_epochs


def test_from_run_reads_an_anchors_bias_run(tmp_path, one_thread):
    bias = AnchorsBias()
    src = execute(bias, bias.make_config("quick", TINY, members=2), "quick", tmp_path / "runs", progress=False)
    exp = AnchorsEmbedding()
    with pytest.raises(ConfigError, match="from_run: the source run's task differ"):
        exp.make_config("quick", [*TINY, "task.key_max=31", "fig4a_epochs=[1]", f"from_run={src.path}"], members=2)
    with RunWriter(tmp_path / "other", "anchors-lowrank") as w:
        w.write_config({"experiment": "anchors-lowrank", "config": {}})
        other = w.finish()
    with pytest.raises(ConfigError, match="from_run: .*'anchors-lowrank' run, need an anchors-bias run"):
        exp.make_config("quick", [*TINY, "fig4a_epochs=[1]", f"from_run={other.path}"], members=2)
    cfg = exp.make_config("quick", [*TINY, "fig4a_epochs=[1, 2]", f"from_run={src.path}"], members=2)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    for arm in ("gamma=0.8", "gamma=0.8@init", "gamma=0.3@step6"):
        assert torch.equal(Run(run.path).arrays(arm)["wte"], Run(src.path).arrays(arm)["wte"])
    s = run.summary
    assert s["status"] == "done"
    rows = {r["id"]: r for g in s["claims"] for r in g["rows"]}
    assert rows["fig4a-memory-anchors-aligned/mem-cos/epoch1"]["verdict"] != "not evaluable"  # the snapshot was copied
    assert "figures/fig4c_fig9_eq14.png" in s["figures"]
