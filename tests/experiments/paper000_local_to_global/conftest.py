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
def planted(sec2_states: Any) -> Any:
    """``planted.rank_one(d, n_pos, rng, c=0.7)`` (App. C's optimum) and ``planted.gaussian(d, n_pos, rng)``
    (full rank): one member's state dict of the Sec. 2 model, float32 like a stored run's;
    ``planted.bias_tokens(cfg)``: the sequences markov-rank measures the bias step on."""
    from types import SimpleNamespace

    return SimpleNamespace(rank_one=sec2_states.rank_one, gaussian=sec2_states.gaussian, bias_tokens=_bias_tokens)
