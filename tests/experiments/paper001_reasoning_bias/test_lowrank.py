"""anchors-lowrank (seed 001 Fig. 13): spectra and erank of built matrices, the per-matrix erank
ordering on planted runs in the seed's setting (holds, and fails naming the matrix), the same spectra
read after a shorter run at a larger lr being ours, and a tiny end-to-end run."""

from __future__ import annotations

import pytest
import torch

from tdlab.experiments.paper001_reasoning_bias.lowrank import AnchorsLowrank
from tdlab.models.gpt import GPT
from tdlab.probes.spectrum import gpt_weight_matrices
from tdlab.runner import execute
from tdlab.runs import Run, RunWriter

PAPER_BUDGET = ("train.lr=1e-5", "schedule.epochs=1000", "snapshot_epochs=[200, 900]")  # A.3's lr and budget


@pytest.fixture
def tiny(anchors_tiny):
    """The tiny anchors setting with a 50-sequence probe set."""
    return [*anchors_tiny, "n_probe=50"]


def _planted(tmp_path, overrides, swap: str | None = None):
    exp = AnchorsLowrank()
    cfg = exp.make_config("quick", overrides, members=3)
    model = GPT(cfg.model_for_task(), [1, 2, 3])
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)

    def of_rank(W: torch.Tensor, r: int) -> torch.Tensor:
        """Random singular vectors, singular values 1 (r of them, all when r is large) and 1e-3 after."""
        E, m, n = W.shape
        k = min(m, n)
        u = torch.linalg.qr(torch.randn(E, m, k, generator=g, dtype=torch.float64))[0]
        v = torch.linalg.qr(torch.randn(E, n, k, generator=g, dtype=torch.float64))[0]
        s = torch.where(torch.arange(k) < r, 1.0, 1e-3).double() * (
            1 + 0.01 * torch.rand(E, k, generator=g, dtype=torch.float64)
        )
        return ((u * s[:, None, :]) @ v.transpose(1, 2)).float()

    names = gpt_weight_matrices(base, cfg.model.layers)
    key = {"W^emb": "wte", "W^pos": "wpe", "W^out": "lm_head"}
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        for gamma, r in ((0.8, 1), (0.5, 2), (0.3, 99)):
            arrays = dict(base)
            for name in names:
                k = key.get(name) or _param(name)
                arrays[k] = of_rank(base[k], 99 if (name == swap and gamma == 0.8) else r)
            w.save_arrays(f"gamma={gamma:g}", [{k: v[e] for k, v in arrays.items()} for e in range(3)])
        run = w.finish()
    return exp, cfg, run


def _param(name: str) -> str:
    kind, layer = name.split(" (layer ")
    layer = int(layer.rstrip(")")) - 1
    k = kind[2:]
    if k in ("Q", "K", "V", "O"):
        return f"blocks.{layer}.attn.W_{k}.weight"
    return f"blocks.{layer}.mlp.W_{k[1]}.weight"


def test_planted_low_rank_at_small_init_holds_for_every_matrix(tmp_path, tiny, one_thread):
    exp, cfg, run = _planted(tmp_path, [*tiny, *PAPER_BUDGET])
    a = exp.analyse(cfg, Run(run.path))
    rows = {r.id: r for g in a.groups for r in g.rows}
    assert len(rows) == 2 * (2 + 6 * cfg.model.layers + 1)
    assert all(r.verdict == "holds" for r in rows.values()), {
        k: r.describe() for k, r in rows.items() if r.verdict != "holds"
    }
    assert rows["fig13-low-rank-at-small-init/W_V.layer1/0.8-below-0.5"].paired
    assert a.result("fig13-low-rank-at-small-init").verdict == "holds"
    assert {r.provenance for r in rows.values()} == {"paper"}


def test_a_matrix_full_rank_at_small_init_fails_and_is_named(tmp_path, tiny, one_thread):
    exp, cfg, run = _planted(tmp_path, [*tiny, *PAPER_BUDGET], swap="W^V (layer 1)")
    a = exp.analyse(cfg, Run(run.path))
    rows = {r.id: r for g in a.groups for r in g.rows}
    failing = sorted(k for k, r in rows.items() if r.verdict == "fails")
    assert failing == ["fig13-low-rank-at-small-init/W_V.layer1/0.8-below-0.5"]
    assert "W^V (layer 1)" in rows[failing[0]].statement
    assert a.result("fig13-low-rank-at-small-init").verdict == "fails"


def test_spectra_after_a_shorter_run_at_a_larger_lr_are_ours(tmp_path, tiny, one_thread):
    exp, cfg, run = _planted(tmp_path, tiny)
    g = exp.analyse(cfg, Run(run.path)).result("fig13-low-rank-at-small-init")
    assert g.verdict == "not evaluable" and g.cause == "no paper rows"
    assert all(r.provenance == "ours" and r.verdict == "holds" for r in g.rows)


def test_tiny_end_to_end_run(tmp_path, tiny, one_thread):
    exp = AnchorsLowrank()
    cfg = exp.make_config("quick", tiny, members=2)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = run.summary
    assert s["status"] == "done"
    groups = {g["id"]: g for g in s["claims"]}
    assert len(groups["fig13-low-rank-at-small-init"]["rows"]) == 2 * 15
    assert s["figures"] == ["figures/fig13_singular_values.png"]
