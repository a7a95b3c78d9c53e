"""The settings seed 000's Table 2 states for every transformer it trains (Figs. 3, 4; App. A.3), as manifest
entries (:mod:`tdlab.experiments.manifest`) that each experiment of the package extends with its own."""

from __future__ import annotations

from tdlab.experiments.manifest import Setting

__all__ = ["TABLE_2"]

GRID = "a point of the seed's grid"

TABLE_2: dict[str, Setting] = {
    "members": Setting(5, "Table 2 (repetitions: 3 or 5)"),
    "model.d": Setting(8, "Table 2 (grid {4, 8, 16, 32, 64}); A.3.1's d = 8", GRID),
    "model.layers": Setting(1, "Table 2"),
    "model.heads": Setting(1, "Table 2"),
    "train.batch": Setting(16, "Table 2 (grid {16, 50})", GRID),
    "train.seq_len": Setting(1024, "Table 2 (grid {512, 1024, 2048})", GRID),
    "train.optimizer": Setting("adamw", "Table 2"),
    "train.lr": Setting(0.001, "Table 2"),
    "train.beta1": Setting(0.9, "Table 2"),
    "train.beta2": Setting(0.95, "Table 2"),
    "train.weight_decay": Setting(0.001, "Table 2"),
    "train.schedule": Setting("cosine", "Table 2"),
}
