"""Seed 004 — *Topic structure* (LDA-style documents; embeddings and attention encode topics, in two
stages): one module per reproduced figure or table."""


# TRANSITIONAL: the flat modules not yet moved into this package are imported from where they are.
from tdlab.experiments import topics_embed  # noqa: F401
from tdlab.experiments import topics_wv  # noqa: F401
from tdlab.experiments import topics_attn  # noqa: F401
from tdlab.experiments import topics_landscape  # noqa: F401
from tdlab.experiments import topics_two_stage  # noqa: F401
from tdlab.experiments import topics_real  # noqa: F401
from tdlab.experiments import topics_real_two_stage  # noqa: F401
