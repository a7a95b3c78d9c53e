"""Synthetic run directories of the seed-003 in-context grid experiments (``markov-icl-depth-linear``,
``markov-icl-heads``), whose probe and training metrics the test chooses exactly."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from tdlab.experiments.paper003_attention_markov.common.icl_grid import cell_arm
from tdlab.runs import RunWriter

# In-context estimator losses of orders 0..k on T = 64 probe sequences (measured values, rounded).
GRID_EST = {1: [0.591, 0.534], 2: [0.635, 0.596, 0.543], 4: [0.684, 0.675, 0.659, 0.633, 0.598]}
GRID_STEPS = [0, 100, 180, 190, 200]


class Levels:
    """Gaps to the order-k estimator at the three places a claim distinguishes (tolerance 0.02, share 0.25)."""

    reached = 0.005  # within the reach tolerance

    @staticmethod
    def order_gap(k: int) -> float:
        """The order-(k−1) estimator's loss above the order-k one."""
        return GRID_EST[k][k - 1] - GRID_EST[k][k]

    @classmethod
    def past(cls, k: int, tol: float = 0.02, share: float = 0.25) -> float:
        """Past the stage (below (1 − share)·order gap) but above the reach tolerance: halfway between."""
        return (tol + (1 - share) * cls.order_gap(k)) / 2

    @classmethod
    def plateau(cls, k: int) -> float:
        """At the order-(k−1) plateau: short of the stage."""
        return 0.95 * cls.order_gap(k)


@pytest.fixture
def levels() -> type[Levels]:
    return Levels


@pytest.fixture
def make_grid_run(tmp_path) -> Callable[..., object]:
    """``make(exp, cfg, gap_of, untrained=(), falling=(), sub="run")``: every cell of ``cfg.grid()`` with
    member gaps ``gap_of(family, k, depth, heads, member)`` to the order-k estimator; trainer curves whose
    gap to ``test_loss@bayes`` ends at the same value (still falling by 0.05 over the last 10% for arms in
    ``falling``); arms in ``untrained`` end above log 2."""

    def make(exp, cfg, gap_of, untrained=frozenset(), falling=frozenset(), sub="run"):
        with RunWriter(tmp_path / sub, exp.name) as w:
            w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
            for family, k, depth, heads in cfg.grid():
                arm = cell_arm(family, k, depth, heads)
                est = GRID_EST[k]
                rows, train = [], []
                for m in range(cfg.members):
                    gap = gap_of(family, k, depth, heads, m)
                    rows += [
                        (200, m, "probe_loss", est[k] + gap),
                        (200, m, "match_score_last", 0.7),
                        (200, m, "match_chance_last", 0.4),
                    ]
                    rows += [(200, m, f"est_loss_order{j}", v) for j, v in enumerate(est)]
                    for s in GRID_STEPS:
                        if arm in untrained:
                            loss = 0.70 if s else 0.69
                        elif s == 0:
                            loss = math.log(2)
                        else:
                            loss = est[k] + gap + (0.05 * (200 - s) / 20 if arm in falling and s >= 180 else 0.0)
                        train += [(s, m, "test_loss", loss), (s, m, "test_loss@bayes", est[k])]
                w.add_metrics(f"{arm}/probe", rows)
                w.add_metrics(arm, train)
            return w.finish()

    return make
