"""Seed 000 — *Local to Global* (binary Markov chains, a single-layer transformer; the initialisation
decides between the global minimum and the local one): one module per reproduced figure.

Importing the package imports none of its modules (``tdlab run NAME`` imports NAME's only:
:data:`tdlab.experiments.catalog.CATALOG`).
"""
