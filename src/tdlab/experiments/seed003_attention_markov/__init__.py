"""Seed 003 — *Attention with Markov* (the talk: tied vs untied embeddings on first-order chains;
k-th order in-context Markov sources, the k-gram estimator and depth): one module per statement."""


# TRANSITIONAL: the flat modules not yet moved into this package are imported from where they are.
from tdlab.experiments import markov_tying  # noqa: F401
from tdlab.experiments import markov_icl_depth  # noqa: F401
from tdlab.experiments import markov_icl_linear  # noqa: F401
from tdlab.experiments import markov_icl_construction  # noqa: F401
