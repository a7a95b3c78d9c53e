"""The pages tdlab writes from its published records and its experiment registry, a layer above both.

* :mod:`tdlab.pages.records` — the tables of ``results/PROFILE/*.json``: verdicts by seed and experiment,
  the seeds' settings beside quick, what stays undecided and why (``tdlab findings --results``);
* :mod:`tdlab.pages.compare` — two records of one experiment side by side (``tdlab results compare``);
* :mod:`tdlab.pages.profiles` — every experiment's quick, standard and paper profiles as one table;
* :mod:`tdlab.pages.docs_site` — the documentation site's generated seed pages and its strict build
  (``tdlab docs build``), with its MkDocs hook :mod:`tdlab.pages.docs_hook`.
"""
