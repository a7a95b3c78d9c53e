"""What one run reports, and what experiments draw with: nothing here reads the experiment registry.

* :mod:`tdlab.report.html` — a run's ``report.html`` (verdicts, arms, figures, measurements);
* :mod:`tdlab.report.measurement_tables` — the per-arm measurements as tables (arms × quantities);
* :mod:`tdlab.report.figures` — the plotting every experiment shares (``save_figure``, headless);
* :mod:`tdlab.report.standard_figures` — the standard figures an experiment declares (``Curves``, ``Heatmap``,
  ``Matrices``, ``Bars``) and the default ``plot`` draws;
* :mod:`tdlab.report.notes` — the notes written from the verdicts (``verdict_notes``): what held, what failed
  and by how much, what was not evaluable and why, which rows are ours;
* :mod:`tdlab.report.findings` — the findings table of run directories (``tdlab findings RUN_DIR...``);
* :mod:`tdlab.report.mdtext` — text from runs made inert for the markdown tdlab writes.

The pages made from published records and the registry (the records' tables, the documentation site) are
:mod:`tdlab.pages`, a layer above the experiments.
"""
