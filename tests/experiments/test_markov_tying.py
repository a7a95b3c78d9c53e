"""markov-tying (seed 003 Part I): verdicts of ``analyse`` on synthetic metrics, and a tiny end-to-end run."""

from __future__ import annotations

import math

import pytest

from tdlab.experiments.markov_tying import MarkovTying, chain_tag, normalised_position
from tdlab.experiments.runner import execute
from tdlab.runs import RunWriter
from tdlab.tasks.markov import entropy_rate, marginal_entropy, stationary
from tdlab.theory import markov_tying as th

EXP = MarkovTying()
OVERRIDES = ["landscape.chains=[[0.5, 0.8]]", "landscape.dims=[2, 3]", "landscape.others=[zero]",
             "grid=[[0.5, 0.8], [0.2, 0.3], [0.5, 0.5]]"]


def synthetic_run(tmp_path, cfg, untied_final: str = "rate", tied_eig_min: float = 0.0):
    """Metrics as a faithful run would store them; ``untied_final`` = where untied p+q>1 members end."""
    rows: dict[str, list] = {}
    ls = cfg.landscape
    for p, q in ls.chains:
        c = th.switching_curvature(p, q)
        for tied in (True, False):
            t = "tied" if tied else "untied"
            for d in ls.dims:
                P = 50 + 10 * d
                spec = th.theta_pi_spectrum(p, q, d, tied, P)
                lo = tied_eig_min if tied else float(spec[0])
                vals = {"loss": marginal_entropy(p, q), "grad_max": 1e-17, "eig_min": lo, "eig_max": float(spec[-1]),
                        "num_params": P, "probe_random": 0.0, "probe_bottom": 0.0 if tied else -abs(c) * ls.radius**2 / 2,
                        "spectrum_err": 1e-16}
                rows[f"landscape/{chain_tag(p, q)}/{t}/zero/d{d}"] = [(0, 0, k, v) for k, v in vals.items()]
    for p, q in cfg.grid:
        for tied in (True, False):
            t = "tied" if tied else "untied"
            stuck = p + q > 1 and (tied or untied_final == "H(pi)")
            final = marginal_entropy(p, q) if stuck else entropy_rate(p, q)
            rows[f"train/{t}/{chain_tag(p, q)}"] = [(s, m, "test_loss", v) for m in range(cfg.members)
                                                   for s, v in ((0, math.log(2)), (10, final + 0.001 * m))]
    with RunWriter(tmp_path, EXP.name) as w:
        w.write_config({"experiment": EXP.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for arm, r in rows.items():
            w.add_metrics(arm, r)
        return w.finish()


def verdicts(analysis) -> dict[str, bool]:
    return {c.id: c.holds for c in analysis.claims}


def test_analyse_gives_the_talks_verdicts_on_faithful_metrics(tmp_path):
    cfg = EXP.make_config("quick", OVERRIDES, members=3)
    a = EXP.analyse(cfg, synthetic_run(tmp_path, cfg))
    v = verdicts(a)
    tag = chain_tag(0.5, 0.8)
    expected_ids = {f"theta-pi/{tag}/loss-is-H(pi)", f"theta-pi/{tag}/zero-gradient",
                    f"theta-pi/{tag}/tied/canonical-spectrum", f"theta-pi/{tag}/tied/hessian-psd",
                    f"theta-pi/{tag}/tied/no-descent-direction", f"theta-pi/{tag}/untied/canonical-spectrum",
                    f"theta-pi/{tag}/untied/hessian-negative", f"theta-pi/{tag}/untied/descent-direction",
                    "train/tied/p+q>1/stuck-at-H(pi)", "train/untied/p+q>1/leaves-H(pi)",
                    "train/tied/p+q<1/leaves-H(pi)", "train/untied/p+q<1/leaves-H(pi)"}
    assert set(v) == expected_ids
    assert all(v.values()), [c.describe() for c in a.claims if not c.holds]
    cells = a.measurements["training"]
    assert cells["p0.5_q0.8"]["tied"]["stuck_fraction"] == 1.0
    assert cells["p0.5_q0.8"]["untied"]["stuck_fraction"] == 0.0
    assert cells["p0.5_q0.5"]["tied"]["stuck_fraction"] is None  # i.i.d. chain: not informative
    assert "| (0.5, 0.8) | p+q>1 |" in a.measurements["stuck_table"]


def test_analyse_reports_failures(tmp_path):
    cfg = EXP.make_config("quick", OVERRIDES, members=2)
    a = EXP.analyse(cfg, synthetic_run(tmp_path, cfg, untied_final="H(pi)", tied_eig_min=-0.01))
    v = verdicts(a)
    assert not v["train/untied/p+q>1/leaves-H(pi)"]
    assert not v[f"theta-pi/{chain_tag(0.5, 0.8)}/tied/hessian-psd"]
    assert v["train/tied/p+q>1/stuck-at-H(pi)"]


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
    assert s["status"] == "done" and s["claims_total"] > 0
    ids = {c["id"]: c for c in s["claims"]}
    # The landscape claims are exact whatever the training length.
    for cid in ("loss-is-H(pi)", "zero-gradient", "tied/hessian-psd", "untied/hessian-negative", "tied/canonical-spectrum"):
        assert ids[f"theta-pi/p0.5_q0.8/{cid}"]["holds"], ids[f"theta-pi/p0.5_q0.8/{cid}"]
    assert "train/tied/p+q>1/stuck-at-H(pi)" in ids
    assert all((run.path / f).is_file() for f in s["figures"]) and len(s["figures"]) == 3
