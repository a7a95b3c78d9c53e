"""Seed 000 — *Local to Global* (binary Markov chains, a single-layer transformer; the initialisation
decides between the global minimum and the local one): one module per reproduced figure."""

from tdlab.experiments.seed000_local_to_global import (  # noqa: F401
    bridge,
    icommon,
    initialisation,
    landscape,
    landscape_3d,
    rank,
)
