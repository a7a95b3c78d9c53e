"""icl-avdigits (seed 002 Table 1): the per-member measures, every claim holding and failing on planted
accuracies (decided by the paired interval alone), the "above chance" stage, shared data across models,
profiles, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from tdlab.config import ConfigError
from tdlab.experiments.paper002_cross_attention.avdigits import (
    ABOVE_CHANCE,
    ARMS,
    DATA_FILE,
    ICLAVDigits,
    build_model,
    chance_bound,
)
from tdlab.runner import execute
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.tasks import avdigits

TINY = [
    "data.n_train=96",
    "data.n_test=40",
    "schedule.n_val=32",
    "schedule.epochs=2",
    "train.batch=16",
    "model.layers=1",
    "baseline.layers=1",
    "model.conv_width=4",
    "baseline.conv_width=4",
    "schedule.eval_batch=40",
]


def fake_build(cfg, seed, progress=True):
    """Random maps whose image brightness encodes the class (learnable in a few steps); deterministic in seed."""
    g = torch.Generator().manual_seed(seed % 2**31)

    def part(n):
        y = torch.randint(0, 10, (n,), generator=g)
        img = (0.3 * torch.rand(n, 28, 28, generator=g) + (y.float() / 14)[:, None, None]).clamp(0, 1)
        return img, torch.rand(n, 28, 28, generator=g), y

    a, b, c = part(cfg.n_train)
    d, e, f = part(cfg.n_test)
    return avdigits.AVDigits(a, b, c, d, e, f, f"fake brightness-coded digits (seed {seed})")


# --- measures and the spread rule -----------------------------------------------------------------------


def test_the_chance_bound_is_chance_plus_binomial_standard_errors():
    assert chance_bound(10, 10_000, 2.0) == pytest.approx(0.1 + 2 * math.sqrt(0.09 / 10_000))
    assert chance_bound(10, 500, 0.0) == pytest.approx(0.1)


# --- claims on planted runs ---------------------------------------------------------------------------


class PlantedRun(Run):
    """A run folder holding only ``data.json``, with planted metrics (``measure`` reads nothing else)."""

    def __init__(self, path: Path, df: pd.DataFrame) -> None:
        self.path, self.df = Path(path), df

    def metrics(self) -> pd.DataFrame:
        return self.df


def planted(tmp_path: Path, cfg, final_acc: dict[str, list[float]], loss_end: float = 1.0) -> PlantedRun:
    """A run whose validation and test accuracy rise linearly to ``final_acc[arm][member]`` at the last epoch, its
    losses falling linearly from just above chance's log 10 to ``loss_end``."""
    spe, E = cfg.steps_per_epoch, cfg.members
    rows = []
    for arm, accs in final_acc.items():
        for ep in range(cfg.schedule.epochs + 1):
            for m in range(E):
                a = 0.1 + (accs[m] - 0.1) * ep / cfg.schedule.epochs
                start = math.log(10) + 0.05
                loss = start + (loss_end - start) * ep / cfg.schedule.epochs
                for name, v in (("val_acc", a), ("test_acc", a), ("val_loss", loss), ("test_loss", loss)):
                    rows.append((arm, ep * spe, m, name, v))
    (tmp_path / DATA_FILE).write_text(
        json.dumps({"provenance": "planted", "n_fit": 1, "n_val": 1, "n_test": 1, "data_per_seed": False})
    )
    return PlantedRun(tmp_path, pd.DataFrame(rows, columns=["arm", "step", "member", "name", "value"]))


def _verdicts(analysis) -> dict[str, str]:
    return {r.id: r.verdict for g in analysis.groups for r in g.rows}


def test_every_claim_holds_and_fails_on_planted_accuracies(tmp_path, at_paper_length):
    at_paper_length(ICLAVDigits)
    exp = ICLAVDigits()
    cfg = exp.make_config("quick", TINY, members=3)
    good = {
        "full": [0.64, 0.65, 0.66],
        "no-injection": [0.55, 0.56, 0.55],
        "no-cross": [0.50, 0.52, 0.51],
        "neither": [0.45, 0.44, 0.46],
        "bi-ca": [0.58, 0.57, 0.58],
    }
    an = exp.analyse(cfg, planted(tmp_path, cfg, good))
    v = _verdicts(an)
    assert v == {
        "full-beats-ablations/vs-no-injection": "holds",
        "full-beats-ablations/vs-no-cross": "holds",
        "full-beats-ablations/vs-neither": "holds",
        "full-beats-bica/accuracy": "holds",
        "full-fewer-params-than-bica/params": "holds",
    }
    assert any("Table 1" in n for n in an.notes) and any("planted" in n for n in an.notes)
    assert an.measurements["params"]["full"] < an.measurements["params"]["bi-ca"]
    # each paper claim fails on its own when the full model is clearly worse than that one arm
    for arm in ("no-injection", "no-cross", "neither", "bi-ca"):
        bad = {**good, arm: [0.75, 0.76, 0.75]}
        v = _verdicts(exp.analyse(cfg, planted(tmp_path, cfg, bad)))
        failed = {k for k, x in v.items() if x == "fails"}
        row = "full-beats-bica/accuracy" if arm == "bi-ca" else f"full-beats-ablations/vs-{arm}"
        assert failed == {row}, v
    # paired differences +0.09, -0.01, -0.06: the paired interval straddles 0
    noisy = {**good, "no-cross": [0.55, 0.66, 0.72]}
    assert (
        _verdicts(exp.analyse(cfg, planted(tmp_path, cfg, noisy)))["full-beats-ablations/vs-no-cross"] == "not resolved"
    )
    # a small but consistent difference is decided by the paired interval (no rule outside the claims layer)
    close = {**good, "no-cross": [0.63, 0.64, 0.65]}
    assert _verdicts(exp.analyse(cfg, planted(tmp_path, cfg, close)))["full-beats-ablations/vs-no-cross"] == "holds"


def test_parameter_sanity_fails_when_the_full_model_is_larger(tmp_path):
    exp = ICLAVDigits()
    cfg = exp.make_config("quick", [*TINY, "model.d_h=400"], members=2)  # a wide FFN: full > bi-CA (d_h 32)
    an = exp.analyse(cfg, planted(tmp_path, cfg, {a: [0.5, 0.5] for a in ARMS}))
    assert an.measurements["params"]["full"] > an.measurements["params"]["bi-ca"]
    assert _verdicts(an)["full-fewer-params-than-bica/params"] == "fails"


def test_an_arm_at_chance_makes_its_claims_not_evaluable_with_the_stage_named(tmp_path):
    exp = ICLAVDigits()
    cfg = exp.make_config("quick", TINY, members=2)
    accs = {a: [0.6, 0.61] for a in ARMS}
    accs["neither"] = [0.11, 0.12]  # within two binomial errors of chance on 40 test examples
    an = exp.analyse(cfg, planted(tmp_path, cfg, accs, loss_end=math.log(10)))
    rows = {r.id: r for g in an.groups for r in g.rows}
    r = rows["full-beats-ablations/vs-neither"]
    assert r.verdict == "not evaluable" and r.cause == "stage not reached" and r.stage == ABOVE_CHANCE.id
    assert "above chance" in r.reason
    assert rows["full-beats-ablations/vs-no-cross"].verdict != "not evaluable"
    # every model at chance (the quick profile's outcome): the paper claims are not evaluable, never failing; on
    # avMNIST (data.path: the hypothesis of Table 1) for the stage, on the offline stand-in already for the data
    at_chance = {a: [0.1, 0.11] for a in ARMS}
    real = exp.make_config("quick", [*TINY, "data.path=/planted/avmnist.npz"], members=2)
    an = exp.analyse(real, planted(tmp_path, real, at_chance, loss_end=math.log(10) + 0.01))
    assert {g.verdict for g in an.paper} == {"not evaluable"} and {g.cause for g in an.paper} == {"stage not reached"}
    assert any("at chance" in n for n in an.notes)
    an = exp.analyse(cfg, planted(tmp_path, cfg, at_chance, loss_end=math.log(10) + 0.01))
    assert {g.verdict for g in an.paper} == {"not evaluable"} and {g.cause for g in an.paper} == {"outside hypotheses"}


def test_table1_decides_only_on_avmnist_and_the_stand_in_rows_are_ours(tmp_path):
    exp = ICLAVDigits()
    accs = {
        "full": [0.64, 0.65, 0.66],
        "no-injection": [0.55, 0.56, 0.55],
        "no-cross": [0.50, 0.52, 0.51],
        "neither": [0.45, 0.44, 0.46],
        "bi-ca": [0.58, 0.57, 0.58],
    }
    for over, prov, verdict in (([], "ours", "not evaluable"), (["data.path=/planted/avmnist.npz"], "paper", "holds")):
        cfg = exp.make_config("quick", [*TINY, *over], members=3)
        an = exp.analyse(cfg, planted(tmp_path, cfg, accs))
        for g in an.paper:
            assert {r.provenance for r in g.rows} == {prov} and {r.verdict for r in g.rows} == {"holds"}, g.describe()
            assert g.verdict == verdict


# --- data, configs, profiles ------------------------------------------------------------------------------


def test_members_of_every_model_share_data_and_shuffles(monkeypatch):
    monkeypatch.setattr(avdigits, "build", fake_build)
    exp = ICLAVDigits()
    cfg = exp.make_config("quick", TINY, members=2)
    seeds = member_seeds(cfg.seed, 2)
    reg, prov = exp.data(cfg, seeds, progress=False)
    reg.bind(seeds, "cpu")
    x = reg.splits["train"]["inputs"]
    assert x.shape == (2, 64, 2, 28, 28) and torch.equal(x[0], x[1]) and "fake" in prov
    assert reg.splits["val"]["inputs"].shape[1] == 32 and reg.splits["test"]["inputs"].shape[1] == 40
    order = reg.epoch_order(0)
    reg2, _ = exp.data(cfg, seeds, progress=False)  # another model's fit: same data, same shuffles
    reg2.bind(seeds, "cpu")
    assert torch.equal(reg2.splits["train"]["inputs"], x) and torch.equal(reg2.epoch_order(0), order)
    per = exp.make_config("quick", [*TINY, "data_per_seed=true"], members=2)
    reg3, _ = exp.data(per, seeds, progress=False)
    reg3.bind(seeds, "cpu")
    assert not torch.equal(reg3.splits["train"]["inputs"][0], reg3.splits["train"]["inputs"][1])


def test_configs_are_validated_and_profiles_follow_the_seed():
    exp = ICLAVDigits()
    paper = exp.make_config("paper")
    assert (paper.train.batch, paper.train.lr, paper.train.weight_decay, paper.schedule.epochs) == (
        256,
        3e-4,
        1e-4,
        100,
    )
    assert (paper.data.n_train, paper.data.n_test) == (60_000, 10_000)
    assert (paper.model.d, paper.model.layers, paper.model.heads, paper.model.d_h, paper.model.dropout) == (
        16,
        10,
        4,
        32,
        0.1,
    )
    quick = exp.make_config("quick")
    assert quick.members == 2 and quick.schedule.epochs <= 10 and quick.data.n_train <= 5_000
    assert quick.model == paper.model and quick.baseline == paper.baseline  # the architectures are not scaled down
    with pytest.raises(ConfigError, match="models"):
        exp.make_config("quick", ["models=[full,full]"])
    with pytest.raises(ConfigError, match="models="):
        exp.make_config("quick", ["model.inject=false"])
    with pytest.raises(ConfigError, match="n_val"):
        exp.make_config("quick", ["schedule.n_val=1590"])
    with pytest.raises(ConfigError):
        exp.make_config("quick", ["models=[transformer]"])
    assert (
        build_model(quick, "no-cross", [1]).cfg.cross is False
        and build_model(quick, "neither", [1]).cfg.inject is False
    )


def test_members_are_chunked_on_a_cpu_so_a_chunks_conv_maps_stay_within_a_cache():
    exp = ICLAVDigits()
    quick = exp.make_config("quick")
    assert exp.trainer_config(quick, "cpu").chunk == quick.members == 2  # 6.4 MB a member at batch 64
    eight = exp.make_config("quick", ["members=8"])
    assert exp.trainer_config(eight, "cpu").chunk == 4 and exp.trainer_config(eight, "cuda").chunk == 8
    paper = exp.make_config("paper")
    assert exp.trainer_config(paper, "cpu").chunk == 1  # 25.7 MB a member at batch 256
    assert exp.trainer_config(paper, "cuda").chunk == paper.members


# --- end to end ---------------------------------------------------------------------------------------------


def test_a_tiny_run_goes_through_the_runner(tmp_path, monkeypatch, one_thread):
    """Real (tiny) data when espeak-ng is installed — two recordings per digit — else the fake builder."""
    exp = ICLAVDigits()
    extra = []
    if shutil.which("espeak-ng") is None:
        monkeypatch.setattr(avdigits, "build", fake_build)
    else:
        extra = [
            "data.voices=[en]",
            "data.speeds=[140,180]",
            "data.pitches=[50]",
            f"data.cache_dir={tmp_path / 'cache'}",
            "data.images=digits",
        ]
    cfg = exp.make_config("quick", [*TINY, *extra, "models=[full,no-cross,bi-ca]"], members=2)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = run.summary
    assert s["status"] == "done"
    ids = {r["id"] for g in s["claims"] + s["sanity"] for r in g["rows"]}
    assert ids == {"full-beats-ablations/vs-no-cross", "full-beats-bica/accuracy", "full-fewer-params-than-bica/params"}
    assert set(s["arms"]) == {"full", "no-cross", "bi-ca"}
    assert any(n.startswith("data: ") for n in s["notes"]) and any("Table 1" in n for n in s["notes"])
    assert (run.path / "figures" / "table1_accuracy.png").is_file()
    df = run.metrics()
    assert set(df[df["arm"] == "full"]["step"]) == {0, 4, 8}  # evaluation each epoch (64 // 16 = 4 steps)
    assert run.arrays("full")["W_0.weight"].shape == (2, 16, 16)
