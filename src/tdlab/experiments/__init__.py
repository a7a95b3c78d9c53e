"""Experiments: one module per reproduced figure or table, each registered by name.

Importing this package registers them all; ``tdlab list`` shows them.
"""

from tdlab.experiments import markov_init  # noqa: F401
