"""Seed 004 — *Topic structure* (LDA-style documents; embeddings and attention encode topics, in two
stages): one module per reproduced figure or table (``common`` holds what they share).

Importing the package imports none of its modules (``tdlab run NAME`` imports NAME's only:
:data:`tdlab.experiments.catalog.CATALOG`).
"""
