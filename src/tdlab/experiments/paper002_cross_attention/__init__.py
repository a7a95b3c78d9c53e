"""Seed 002 — *Multi-layer cross-attention for multi-modal in-context learning* (LSA fails, LCA_T is
optimal with depth): one module per reproduced figure or table.

* :mod:`.lsa_vs_lca` — ``icl-lsa-vs-lca``, Fig. 2 (Thms 4.1, 6.2, 6.3);
* :mod:`.unrestricted` — ``icl-unrestricted``, Fig. 3 (App. H);
* :mod:`.landscape` — ``icl-landscape``, Fig. 4 (App. F);
* :mod:`.ablations` — ``icl-ablations``, Figs. 5-6 (App. G);
* :mod:`.avdigits` — ``icl-avdigits``, Table 1 (App. I);
* :mod:`.common` — the synthetic experiments' shared set-up (:mod:`.common.synthetic`) and the finite-context
  references (:mod:`.common.reference`: the replicate Monte-Carlo minimisers of the trained losses,
  :mod:`tdlab.theory.icl_minimisers`, kept on disk).

Importing the package imports none of its modules (``tdlab run NAME`` imports NAME's only:
:data:`tdlab.experiments.catalog.CATALOG`).
"""
