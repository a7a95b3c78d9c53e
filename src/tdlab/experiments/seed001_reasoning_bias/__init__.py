"""Seed 001 — *Reasoning bias under small initialisation* (anchor functions; the init rate γ decides
between reasoning and memorising): one module per reproduced figure, the shared set-up in ``training``."""

from tdlab.experiments.seed001_reasoning_bias import (  # noqa: F401
    attention,
    bias,
    embedding,
    labels,
    lowrank,
    mlp,
    text,
)
