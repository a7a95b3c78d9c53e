"""topics-wv (seed 004 Figs. 2, 9, 10, Thm. 2): the population objective in closed form, the ridge optimum's
limit, planted runs whose verdicts each claim must get right (holds, fails, not evaluable short of the stage,
the ridge sanity failing at a large λ), g judged only where attention is uniform, and a tiny end-to-end run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.runner import execute
from tdlab.experiments.seed004_topics.training import optimum_masked_loss, trivial_masked_error
from tdlab.experiments.seed004_topics.wv import (POPULATION, PopulationConfig, TopicsWV, fit_population_wv, moment_loss,
                                                 population_moments, ridge_distance, ridge_wv)
from tdlab.experiments.view import RunView
from tdlab.runs import RunWriter
from tdlab.theory.topics import c3, min_population_loss, population_loss, wv_star

SMALL = ["task.T=3", "task.v=3", "task.n_min=10", "task.n_max=15", "train.seq_len=15", "population.tau=1"]
GAP = c3(0.15, 0.1)


def test_moment_form_equals_the_enumerated_population_loss_and_ridge_tends_to_thm2():
    m = population_moments(4, 3, 2, 0.15, 0.1, 0.1)
    W = torch.randn(3, 13, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(moment_loss(W, m), population_loss(W, 4, 3, 2, 0.15, 0.1, 0.1), rtol=1e-12, atol=1e-12)
    star = wv_star(4, 3, 0.15, 0.1, 0.1)
    d = [float((ridge_wv(m, lam) - star).norm() / star.norm()) for lam in (1e-3, 1e-4, 1e-5)]
    assert d[0] > d[1] > d[2] and d[1] / d[2] == pytest.approx(10, rel=0.05)  # O(λ) approach to the λ → 0 limit
    W = ridge_wv(m, 1e-4).requires_grad_()  # stationary for the penalised objective
    (moment_loss(W[None], m) + 1e-4 * W.pow(2).sum()).sum().backward()
    assert float(W.grad.abs().max()) < 1e-12


def test_population_training_reaches_the_ridge_optimum_and_logs_its_distance():
    m = population_moments(3, 3, 1, 0.15, 0.1, 0.1)
    star = wv_star(3, 3, 0.15, 0.1, 0.1)
    W0, W, rows = fit_population_wv(m, [1, 2], PopulationConfig(l2=1e-3, steps=600, lr=0.03), 500, star)
    ridge = ridge_wv(m, 1e-3)
    start = (W0 - ridge).flatten(1).norm(dim=1) / ridge.norm()
    end = (W - ridge).flatten(1).norm(dim=1) / ridge.norm()
    assert float(start.min()) > 0.99 and float(end.max()) < 1e-2  # from ~W = 0 to within 1% (Adam's step floor)
    assert [r[0] for r in rows if r[2] == "test_loss"] == [0, 0, 500, 500, 600, 600]
    dist = [r[3] for r in rows if r[2] == "wv_star_rel_distance" and r[0] == 600]
    np.testing.assert_allclose(dist, ((W - star).flatten(1).norm(dim=1) / star.norm()).numpy(), rtol=1e-12)


def _planted(tmp_path, z, g, u, pop_scale, share=0.9, members=2, overrides=(), tag="x"):
    """A topics-wv run with chosen final statistics per arm, initial W^V = 0.02 · randn (the same for every
    member), final losses ``share`` of the way to the optimum, population W^V = pop_scale · W^V*."""
    exp = TopicsWV()
    cfg = exp.make_config("quick", [*SMALL, *overrides], members=members)
    steps = [0, 50, 100]
    star = wv_star(3, 3, 0.15, 0.1, 0.1)
    w0 = 0.02 * torch.randn(10, 10, generator=torch.Generator().manual_seed(3))
    with RunWriter(tmp_path, exp.name, run_id=f"planted-{tag}") as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm in exp.arms(cfg):
            loss = "squared" if "/squared/" in arm else "ce"
            triv, opt = trivial_masked_error(cfg.task, loss), optimum_masked_loss(cfg.task, loss)
            end = triv - share * (triv - opt)
            rows = []
            for m in range(members):
                jitter = 0.01 * m
                for s in steps:
                    rows += [(s, m, "test_loss", triv + (end - triv) * s / 100), (s, m, "wv_z", z + jitter),
                             (s, m, "wv_g", g + jitter), (s, m, "wv_u", u)]
            w.add_metrics(arm, rows)
            w.save_arrays(arm, [{"W_V": star.float()} for _ in range(members)])
            w.save_arrays(f"{arm}@init", [{"W_V": w0} for _ in range(members)])
        opt = min_population_loss(3, 1)
        w.add_metrics(POPULATION, [(s, m, "test_loss", 1.0 - (1.0 - opt) * share * s / 100) for m in range(members) for s in steps]
                      + [(s, m, "wv_star_rel_distance", abs(pop_scale - 1)) for m in range(members) for s in steps]
                      + [(100, m, "accepted_steps", 100.0) for m in range(members)])
        w.save_arrays(POPULATION, [{"W_V": star * (pop_scale + 0.001 * m)} for m in range(members)])
        run = w.finish()
    return exp, cfg, RunView(run)


def _verdicts(analysis):
    return {g.id: {r.id.split("/", 1)[1] if "/" in r.id else r.id: r.verdict for r in g.rows} for g in analysis.groups}


def test_planted_block_structure_holds_and_its_absence_fails(tmp_path):
    exp, cfg, run = _planted(tmp_path, z=6.0, g=GAP, u=0.9, pop_scale=1.0, tag="good")
    a = exp.analyse(cfg, run)
    v = _verdicts(a)
    assert set(v["wv-is-block-structured"].values()) == {"holds"}
    assert set(v["wv-block-sum-gap-is-c3"].values()) == {"holds"}
    assert list(v["population-wv-is-thm2-optimum"].values()) == ["holds"]
    assert list(v["ridge-optimum-near-limit"].values()) == ["holds"]
    z0 = a.measurements["l2/ce/adam"]["z_init"][0]
    assert a.result("wv-is-block-structured").row("l2/ce/adam").measured.values == pytest.approx([6.0 - z0, 6.01 - z0])
    exp, cfg, run = _planted(tmp_path, z=1.0, g=1.6 * GAP, u=0.1, pop_scale=1.2, tag="bad")
    a = exp.analyse(cfg, run)
    v = _verdicts(a)
    assert set(v["wv-is-block-structured"].values()) == {"fails"}
    assert set(v["wv-block-sum-gap-is-c3"].values()) == {"fails"}
    assert list(v["population-wv-is-thm2-optimum"].values()) == ["fails"]
    assert a.measurements["fig6_diagonal"] == [8, 8]  # u = 0.1 ≤ 0.2 for every no-L2 member


def test_arms_short_of_the_gap_stage_are_not_evaluable(tmp_path):
    exp, cfg, run = _planted(tmp_path, z=1.0, g=0.1, u=0.9, pop_scale=1.2, share=0.2, tag="short")
    a = exp.analyse(cfg, run)
    for g in a.paper:
        assert g.verdict == "not evaluable" and g.cause == "stage not reached", (g.id, g.verdict)
    assert "gap" in a.result("wv-is-block-structured").rows[0].reason


def test_gap_rows_only_for_squared_loss_with_uniform_attention(tmp_path):
    exp, cfg, run = _planted(tmp_path, z=6.0, g=GAP, u=0.9, pop_scale=1.0)
    rows = exp.analyse(cfg, run).result("wv-block-sum-gap-is-c3").rows
    assert sorted(r.id.split("/", 1)[1] for r in rows) == ["l2/squared/adam", "l2/squared/sgd", "no-l2/squared/adam",
                                                            "no-l2/squared/sgd"]  # not the attn setting (Lemma 1)


def test_the_ridge_sanity_fails_when_the_penalty_is_not_small(tmp_path):
    """At λ = 0.05 the exact ridge optimum is itself far from Thm. 2's λ → 0 limit: the sanity row fails."""
    cfg = TopicsWV().make_config("quick", [*SMALL, "population.l2=0.05"])
    assert ridge_distance(cfg) > 0.1
    exp, cfg, run = _planted(tmp_path, z=6.0, g=GAP, u=0.9, pop_scale=1.0, overrides=["population.l2=0.05"], tag="ridge")
    assert exp.analyse(cfg, run).result("ridge-optimum-near-limit").verdict == "fails"


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
    assert (run.path / "arrays" / "population@init.safetensors").is_file()
    assert all(np.isfinite(r["measured"]).all() for g in summary["claims"] for r in g["rows"])
    pop = next(g for g in summary["claims"] if g["id"] == "population-wv-is-thm2-optimum")["rows"][0]
    assert pop["drift"] is not None  # the distance is logged along training
    assert (run.path / "figures").is_dir() and any((run.path / "figures").iterdir())
