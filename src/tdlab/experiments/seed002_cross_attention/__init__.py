"""Seed 002 — *Multi-layer cross-attention for multi-modal in-context learning* (LSA fails, LCA_T is
optimal with depth): one module per reproduced figure or table."""


# TRANSITIONAL: the flat modules not yet moved into this package are imported from where they are.
from tdlab.experiments import icl  # noqa: F401
from tdlab.experiments import icl_avdigits  # noqa: F401
