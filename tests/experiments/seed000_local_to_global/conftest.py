"""Fixtures of seed 000's experiment tests: editing a stored run's arrays, reading judged rows by id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file, save_file


@pytest.fixture
def tamper() -> Callable[..., None]:
    """``tamper(run_dir, arm, name=f, ...)``: replace stored array ``name`` of ``arm`` by ``f(old)``."""

    def edit(path: Path, arm: str, **change: Callable[[Any], Any]) -> None:
        f = Path(path) / "arrays" / f"{arm.replace('/', '__')}.safetensors"
        arrays = load_file(str(f))
        for k, fn in change.items():
            arrays[k] = fn(arrays[k])
        save_file(arrays, str(f))

    return edit


@pytest.fixture
def rows_of() -> Callable[[Any], dict[str, Any]]:
    """``rows_of(groups)``: ``{row id: row}`` over a summary's groups (dicts) or an analysis' (objects)."""

    def rows(groups: Any) -> dict[str, Any]:
        out = {}
        for g in groups:
            for r in g["rows"] if isinstance(g, dict) else g.rows:
                out[r["id"] if isinstance(r, dict) else r.id] = r
        return out

    return rows


@pytest.fixture
def copy_run(tmp_path: Path) -> Callable[[Any], Path]:
    """``copy_run(run)``: a copy of a finished run's directory to tamper with (the original stays)."""

    def copy(run: Any) -> Path:
        import shutil

        dst = tmp_path / "copy"
        shutil.copytree(run.path, dst)
        return dst

    return copy


# --- planted parameters of the Sec. 2 model (markov-rank) ------------------------------------------


def _rank_one_state(d: int, n_pos: int, rng: Any, c: float = 0.7) -> dict[str, Any]:
    """One member's parameters at App. C's optimum: every matrix exactly rank one along e = c·alpha,
    p_n = -(c/2)·alpha, W_2 = W_1^T, W_O W_V = alpha v^T with v ⊥ alpha, W_Q^T W_K ∝ alpha alpha^T."""
    import numpy as np
    import torch

    from tdlab.probes.sec2_weights import MATRICES

    alpha = rng.choice([-1.0, 1.0], size=d)
    g = lambda n: rng.normal(size=n)  # noqa: E731
    w1 = np.outer(rng.choice([-1.0, 1.0], size=4 * d), alpha)
    v = g(d)
    v -= (v @ alpha) / d * alpha  # App. C: W_O W_V = alpha v^T with <v, alpha> = 0
    mats = {
        "W_Q": np.outer(g(d), alpha),
        "W_K": np.outer(g(d), alpha),
        "W_V": np.outer(alpha, v),
        "W_O": np.outer(alpha, alpha) / d,
        "W_1": w1,
        "W_2": w1.T,
    }
    st = {MATRICES[k]: torch.tensor(m, dtype=torch.float32) for k, m in mats.items()}
    st.update(
        e=torch.tensor(c * alpha, dtype=torch.float32),
        b=torch.zeros(()),
        wpe=torch.tensor(np.broadcast_to(-0.5 * c * alpha, (n_pos, d)).copy(), dtype=torch.float32),
    )
    return st


def _gaussian_state(d: int, n_pos: int, rng: Any) -> dict[str, Any]:
    """A full-rank state (a standard Gaussian init)."""
    import torch

    from tdlab.probes.sec2_weights import MATRICES

    shape = {"W_1": (4 * d, d), "W_2": (d, 4 * d)}
    st = {k: torch.tensor(rng.normal(size=shape.get(n, (d, d))), dtype=torch.float32) for n, k in MATRICES.items()}
    st.update(
        e=torch.tensor(rng.normal(size=d), dtype=torch.float32),
        b=torch.zeros(()),
        wpe=torch.tensor(rng.normal(size=(n_pos, d)), dtype=torch.float32),
    )
    return st


def _bias_tokens(cfg: Any) -> Any:
    """The fresh sequences markov-rank measures the bias step on (same seeds and stream)."""
    from tdlab.seeding import generators, member_seeds
    from tdlab.tasks.markov import MarkovChain

    return MarkovChain(cfg.task.p, cfg.task.q).sample(
        generators(member_seeds(cfg.seed, cfg.members), "bias-step-eval"),
        cfg.train.batch * cfg.claims.bias_batches,
        cfg.train.seq_len,
    )


@pytest.fixture
def planted() -> Any:
    """``planted.rank_one(d, n_pos, rng, c=0.7)`` (App. C's optimum) and ``planted.gaussian(d, n_pos, rng)``
    (full rank): one member's state dict of the Sec. 2 model, float32 like a stored run's;
    ``planted.bias_tokens(cfg)``: the sequences markov-rank measures the bias step on."""
    from types import SimpleNamespace

    return SimpleNamespace(rank_one=_rank_one_state, gaussian=_gaussian_state, bias_tokens=_bias_tokens)
