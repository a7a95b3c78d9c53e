"""Experiments: the framework (base, runner, run view, atlas axes) and one package per seed, one module
per reproduced figure or table, each registered by name.

Importing this package registers them all; ``tdlab list`` shows them.
"""

from tdlab.experiments import (  # noqa: F401
    seed000_local_to_global,
    seed001_reasoning_bias,
    seed002_cross_attention,
    seed003_attention_markov,
    seed004_topics,
)
