"""topics-wv (seed 004 Figs. 2, 9, 10, Thm. 2): the population objective in closed form, the ridge
optimum's limit, planted runs whose verdicts each claim must get right (holds and fails), and a tiny
end-to-end run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.runner import execute
from tdlab.experiments.topics_wv import (POPULATION, TopicsWV, fit_population_wv, population_moments, ridge_wv,
                                         PopulationConfig, _moment_loss)
from tdlab.runs import RunWriter
from tdlab.theory.topics import c3, population_loss, wv_star

SMALL = ["task.T=3", "task.v=3", "task.n_min=10", "task.n_max=15", "train.seq_len=15", "population.tau=1"]
GAP = c3(0.15, 0.1)


def test_moment_form_equals_the_enumerated_population_loss_and_ridge_tends_to_thm2():
    m = population_moments(4, 3, 2, 0.15, 0.1, 0.1)
    W = torch.randn(3, 13, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_moment_loss(W, m), population_loss(W, 4, 3, 2, 0.15, 0.1, 0.1), rtol=1e-12, atol=1e-12)
    star = wv_star(4, 3, 0.15, 0.1, 0.1)
    d = [float((ridge_wv(m, lam) - star).norm() / star.norm()) for lam in (1e-3, 1e-4, 1e-5)]
    assert d[0] > d[1] > d[2] and d[1] / d[2] == pytest.approx(10, rel=0.05)  # O(λ) approach to the λ → 0 limit
    W = ridge_wv(m, 1e-4).requires_grad_()  # stationary for the penalised objective
    (_moment_loss(W[None], m) + 1e-4 * W.pow(2).sum()).sum().backward()
    assert float(W.grad.abs().max()) < 1e-12


def test_population_training_reaches_the_ridge_optimum():
    m = population_moments(3, 3, 1, 0.15, 0.1, 0.1)
    W0, W, rows = fit_population_wv(m, [1, 2], PopulationConfig(l2=1e-3, steps=600, lr=0.03), 500)
    ridge = ridge_wv(m, 1e-3)
    start = (W0 - ridge).flatten(1).norm(dim=1) / ridge.norm()
    end = (W - ridge).flatten(1).norm(dim=1) / ridge.norm()
    assert float(start.min()) > 0.99 and float(end.max()) < 1e-2  # from ~W = 0 to within 1% (Adam's step floor)
    assert [r[0] for r in rows if r[2] == "test_loss"] == [0, 0, 500, 500, 600, 600]


def _planted(tmp_path, z, g, u, pop_scale, members=2):
    """A topics-wv run with chosen final statistics per arm, and population W^V = pop_scale · W^V*."""
    exp = TopicsWV()
    cfg = exp.make_config("quick", SMALL, members=members)
    steps = [0, 50, 100]
    star = wv_star(3, 3, 0.15, 0.1, 0.1)
    with RunWriter(tmp_path, exp.name, run_id=f"planted-{z}-{g}-{pop_scale}") as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm in exp.arms(cfg):
            rows = []
            for m in range(members):
                jitter = 0.01 * m
                for s in steps:
                    rows += [(s, m, "test_loss", 2.0 - 0.5 * s / 100), (s, m, "wv_z", z + jitter),
                             (s, m, "wv_g", g + jitter), (s, m, "wv_u", u)]
            w.add_metrics(arm, rows)
            w.save_arrays(arm, [{"W_V": star.float()} for _ in range(members)])
        w.add_metrics(POPULATION, [(s, m, "test_loss", 1.0 - 0.1 * s / 100) for m in range(members) for s in steps]
                      + [(100, m, "accepted_steps", 100.0) for m in range(members)])
        w.save_arrays(POPULATION, [{"W_V": star * (pop_scale + 0.001 * m)} for m in range(members)])
        run = w.finish()
    return exp, cfg, run


def _verdicts(analysis):
    return {g.id: {r.id.split("/", 1)[1] if "/" in r.id else r.id: r.verdict for r in g.rows} for g in analysis.groups}


def test_planted_block_structure_holds_and_its_absence_fails(tmp_path):
    exp, cfg, run = _planted(tmp_path, z=6.0, g=GAP, u=0.9, pop_scale=1.0)
    v = _verdicts(exp.analyse(cfg, run))
    assert set(v["wv-is-block-structured"].values()) == {"holds"}
    assert set(v["wv-block-sum-gap-is-c3"].values()) == {"holds"}
    assert list(v["population-wv-is-thm2-optimum"].values()) == ["holds"]
    exp, cfg, run = _planted(tmp_path, z=1.0, g=1.3 * GAP, u=0.1, pop_scale=1.2)
    a = exp.analyse(cfg, run)
    v = _verdicts(a)
    assert set(v["wv-is-block-structured"].values()) == {"fails"}
    assert set(v["wv-block-sum-gap-is-c3"].values()) == {"fails"}
    assert list(v["population-wv-is-thm2-optimum"].values()) == ["fails"]
    assert a.measurements["fig6_diagonal_share"] == 1.0  # u = 0.1 ≤ 0.2 for every no-L2 member


def test_gap_rows_only_for_the_squared_loss_panels(tmp_path):
    exp, cfg, run = _planted(tmp_path, z=6.0, g=GAP, u=0.9, pop_scale=1.0)
    rows = next(g for g in exp.analyse(cfg, run).groups if g.id == "wv-block-sum-gap-is-c3").rows
    assert rows and all("/squared/" in r.id for r in rows)


@pytest.mark.parametrize("bad,field", [(["settings=[l3]"], "settings"), (["population.tau=3"], "population.tau"),
                                       (["model.onehot=false"], "model.onehot")])
def test_bad_config_names_the_field(bad, field):
    from tdlab.config import ConfigError
    with pytest.raises(ConfigError, match=field.split(".")[-1]):
        TopicsWV().make_config("quick", SMALL + bad)


def test_tiny_end_to_end_run_has_a_verdict_per_claim(runs_dir):
    exp = TopicsWV()
    cfg = exp.make_config("quick", SMALL + ["train.steps=6", "train.eval_every=3", "population.steps=20",
                                           "panels=[[squared,adam]]", "settings=[l2]"], members=2)
    run = execute(exp, cfg, "quick", runs_dir, progress=False)
    summary = run.summary
    assert summary["status"] == "done" and summary["claims_total"] == 3
    assert all(g["verdict"] in ("holds", "fails", "not resolved", "not evaluable") for g in summary["claims"])
    assert (run.path / "arrays" / "population.safetensors").is_file()
    assert all(np.isfinite(r["measured"]).all() for g in summary["claims"] for r in g["rows"])
    assert (run.path / "figures").is_dir() and any((run.path / "figures").iterdir())
