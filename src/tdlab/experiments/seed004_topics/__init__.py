"""Seed 004 — *Topic structure* (LDA-style documents; embeddings and attention encode topics, in two
stages): one module per reproduced figure or table (``training`` and ``real_text`` hold what they share)."""

from tdlab.experiments.seed004_topics import (  # noqa: F401
    attn,
    embed,
    landscape,
    real,
    real_cooc,
    real_two_stage,
    two_stage,
    wv,
)
