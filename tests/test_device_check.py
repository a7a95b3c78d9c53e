"""scripts/device_check.py: every experiment gets a valid shortened config, and a run and a comparison
of two records work end to end on the CPU (the script's purpose is a GPU, where one exists)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_check.py"


@pytest.fixture(scope="module")
def dc():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_experiment_gets_a_valid_length_no_longer_than_quick(dc):
    from tdlab.config import read_field
    from tdlab.experiments.base import get
    from tdlab.experiments.catalog import CATALOG
    from tdlab.rounds import length_field

    for name in CATALOG:
        exp = get(name)
        over = dc.shortened(name, 0.1)
        cfg = exp.make_config("quick", over)  # valid, or the script would have doubled it
        if over:
            field, value = over[0].split("=")
            full = read_field(exp.make_config("quick"), field)
            assert field == length_field(exp) and 2 <= int(value) < full
            assert read_field(cfg, field) == int(value)
    assert dc.shortened("markov-init", 0.1) == ["train.steps=200"]  # 2000 quick steps
    assert dc.shortened("anchors-bias", 0.1) == []  # 2 epochs < its snapshot epoch 11, 4 and 8 too: the full 12


def test_a_run_and_its_comparison_with_itself(dc, tmp_path):
    rec = tmp_path / "cpu.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "run",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "runs"),
            "--json",
            str(rec),
            "--jobs",
            "1",
            "--only",
            "markov-landscape-3d",
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (r,) = json.loads(rec.read_text())
    assert r["status"] == "done" and r["experiment"] == "markov-landscape-3d" and r["verdicts"]["claims_total"] == 2
    assert r["digest"] and all(math.isfinite(v) for v in r["digest"].values())
    cmp = subprocess.run(
        [sys.executable, str(SCRIPT), "compare", str(rec), str(rec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "0.00e+00" in cmp.stdout  # a record against itself differs by nothing


def test_an_unknown_device_is_an_error_record_not_a_crash(dc, tmp_path):
    r = dc.check_one("markov-landscape-3d", "tpu", str(tmp_path), 0.1, 1)
    assert r["status"] == "error" and "device" in r["error"]
