"""Seed 003 — *Attention with Markov* (the talk: tied vs untied embeddings on first-order chains;
k-th order in-context Markov sources, the k-gram estimator and depth): one module per statement.

* :mod:`.tying` (``markov-tying``): θ_π, a bad local minimum tied and a saddle untied; escape from it;
* :mod:`.icl_depth` (``markov-icl-depth``): depth 1, 2, 3 against the in-context estimator;
* :mod:`.icl_depth_linear` (``markov-icl-depth-linear``): without non-linearities, logarithmic depth;
* :mod:`.icl_heads` (``markov-icl-heads``): one head per layer suffices at depth 3;
* :mod:`.icl_construction` (``markov-icl-construction``): att ∝ exp(κ cos) realises the induction head;
* shared, in :mod:`.common`: :mod:`.common.estimator_stage` (the in-context estimators and the stage they
  define) and :mod:`.common.icl_grid` (the family × k × depth × heads grid of the two grid experiments).

Importing the package imports none of its modules (``tdlab run NAME`` imports NAME's only:
:data:`tdlab.experiments.catalog.CATALOG`).
"""
