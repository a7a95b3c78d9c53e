"""Seed 001 — *Reasoning bias under small initialisation* (anchor functions; the init rate γ decides
between reasoning and memorising): one module per reproduced figure, the shared set-up in ``common``.

Importing the package imports none of its modules (``tdlab run NAME`` imports NAME's only:
:data:`tdlab.experiments.catalog.CATALOG`).
"""
