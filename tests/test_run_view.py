"""RunView: the metrics table read once, curves per member, finals, learning-rate-time drift, arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tdlab.run_view import ArmKey, RunView
from tdlab.runs import RunDirError, RunWriter


@dataclass(frozen=True)
class Arm(ArmKey):
    arch: str

    @property
    def name(self) -> str:
        return f"{self.arch}/x"


@pytest.fixture
def view(tmp_path):
    with RunWriter(tmp_path, "markov-init", run_id="v") as w:
        w.write_config({"experiment": "markov-init", "profile": "quick", "config": {}})
        rows = [(s, m, "test_loss", 1.0 - 0.001 * s + 0.1 * m) for m in range(2) for s in (0, 10, 20)]
        rows += [(20, 1, "test_loss", 5.0)]  # a later row for the same (member, step) wins
        rows += [(s, 0, "lr", 1.0) for s in (0, 10, 20)] + [(s, 1, "lr", 1.0) for s in (0, 10, 20)]
        rows += [(10, 0, "probe", 3.0)]  # member 1 never recorded it
        w.add_metrics("sec2/x", rows)
        w.save_arrays("sec2/x", [{"w": torch.ones(2)}, {"w": torch.zeros(2)}])
        run = w.finish()
    return RunView(run)


def test_curves_finals_and_typed_arms(view):
    steps, v = view.curves(Arm("sec2"), "test_loss")
    assert steps.tolist() == [0, 10, 20] and v.shape == (2, 3)
    assert v[1, 2] == 5.0 and v[0, 2] == pytest.approx(0.98)
    assert view.final("sec2/x", "test_loss").tolist() == pytest.approx([0.98, 5.0])
    assert view.initial(Arm("sec2"), "test_loss").tolist() == pytest.approx([1.0, 1.1])
    probe = view.final("sec2/x", "probe")
    assert probe[0] == 3.0 and np.isnan(probe[1])
    assert view.arms() == ["sec2/x"] and view.has("sec2/x", "lr") and not view.has("sec2/x", "nope")
    assert view.arrays(Arm("sec2"))["w"].shape == (2, 2)
    with pytest.raises(RunDirError, match="no metric 'nope'"):
        view.curves("sec2/x", "nope")


def test_the_table_is_read_once(view, monkeypatch):
    view.curves("sec2/x", "test_loss")
    monkeypatch.setattr(view.run, "metrics", lambda: (_ for _ in ()).throw(AssertionError("read twice")))
    view.final("sec2/x", "probe")
    view.metrics()


def test_drift_of_a_difference_uses_the_schedule(view):
    assert view.lr("sec2/x")[1].tolist() == [1.0, 1.0, 1.0]
    d = view.drift("sec2/x", "test_loss", minus="test_loss")
    assert d == pytest.approx(0.0)
