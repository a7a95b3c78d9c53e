"""Experiments: the framework (base, declarations, run view, atlas axes) and one package per seed, one module
per reproduced figure or table, each registered by name; :mod:`tdlab.runner` runs one.

Importing this package imports no experiment: :data:`tdlab.experiments.catalog.CATALOG` names each
one's module, :func:`tdlab.experiments.base.get` imports the one asked for and
:func:`~tdlab.experiments.base.registry` all of them; ``tdlab list`` shows the catalog.
"""
