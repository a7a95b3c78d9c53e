"""Fixtures of the seed-004 experiment tests: the tiny real-text setting and a planted real-text run (nothing
trained, nothing measured)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tdlab.experiments.paper004_topics.common.real_text import ARM, MEASURE_ARMS
from tdlab.run_view import RunView
from tdlab.runs import RunWriter

_REAL_TINY = (
    "corpus.source=lee",
    "corpus.max_docs=30",
    "corpus.min_count=3",
    "lda.topics=3",
    "lda.passes=1",
    "lda.iterations=10",
    "model.d=8",
    "model.layers=1",
    "model.heads=2",
    "train.steps=8",
    "train.batch=4",
    "train.seq_len=12",
    "train.eval_every=4",
    "train.eval_batches=1",
    "train.warmup_steps=0",
    "thetas=[0.05]",
    "attn_windows=8",
)


@pytest.fixture
def real_tiny() -> list[str]:
    """The ``--set`` overrides of topics-real (and topics-real-cooc) at a tiny setting: 30 documents of the lee
    corpus, a 3-topic LDA of one pass, a 1-layer d = 8 encoder trained 8 steps on windows of 12, one θ, 8
    windows measured. A fresh list per test."""
    return list(_REAL_TINY)


@pytest.fixture
def plant_real_run() -> Callable[..., RunView]:
    """``plant(path, exp, cfg, trained, untrained, fig3=None, loss=(6.0, 3.0), unigram=4.0) -> RunView``: a stored
    topics-real(-cooc) run with the given measure values ``{name: [per member]}``, the encoder's held-out loss going
    from ``loss[0]`` to ``loss[1]`` (none for a checkpoint), ``fig3 = {which: [9 x 9 map per member]}`` and the
    unigram model's held-out loss ``unigram`` in ``cache/info.json``."""

    def plant(path: Path, exp, cfg, trained, untrained, fig3=None, loss=(6.0, 3.0), unigram=4.0) -> RunView:
        w = RunWriter(path, exp.name)
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        E = len(next(iter(trained.values())))
        if not cfg.model.checkpoint:
            w.add_metrics(ARM, [(s, e, "test_loss", v) for e in range(E) for s, v in ((0, loss[0]), (10, loss[1]))])
        for which, vals in (("trained", trained), ("untrained", untrained)):
            w.add_metrics(MEASURE_ARMS[which], [(0, e, k, float(v[e])) for k, v in vals.items() for e in range(E)])
        for which, cos in (fig3 or {}).items():
            w.save_arrays(
                f"fig3/{which}", [{"cos": torch.as_tensor(c, dtype=torch.float32), "ids": torch.arange(9)} for c in cos]
            )
        (w.path / "cache").mkdir()
        (w.path / "cache" / "info.json").write_text(
            json.dumps({"provenance": "planted", "vocab": 1000, "documents": 106, "unigram_loss": unigram})
        )
        return RunView(w.finish())

    return plant
