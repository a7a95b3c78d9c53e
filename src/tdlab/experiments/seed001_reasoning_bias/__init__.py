"""Seed 001 — *Reasoning bias under small initialisation* (anchor functions; the init rate γ decides
between reasoning and memorising): one module per reproduced figure."""


# TRANSITIONAL: the flat modules not yet moved into this package are imported from where they are.
from tdlab.experiments import anchors_bias  # noqa: F401
from tdlab.experiments import anchors_mlp  # noqa: F401
from tdlab.experiments import anchors_embedding  # noqa: F401
from tdlab.experiments import anchors_attention  # noqa: F401
from tdlab.experiments import anchors_lowrank  # noqa: F401
from tdlab.experiments import anchors_labels  # noqa: F401
from tdlab.experiments import anchors_text  # noqa: F401
