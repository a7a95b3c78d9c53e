"""Seed 000 — *Local to Global* (binary Markov chains, a single-layer transformer; the initialisation
decides between the global minimum and the local one): one module per reproduced figure."""


# TRANSITIONAL: the flat modules not yet moved into this package are imported from where they are.
from tdlab.experiments.seed000_local_to_global import initialisation  # noqa: F401
from tdlab.experiments import markov_landscape  # noqa: F401
from tdlab.experiments import markov_rank  # noqa: F401
from tdlab.experiments import markov_bridge  # noqa: F401
from tdlab.experiments import markov_icommon  # noqa: F401
