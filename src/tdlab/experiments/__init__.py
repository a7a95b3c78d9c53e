"""Experiments: one module per reproduced figure or table, each registered by name.

Importing this package registers them all; ``tdlab list`` shows them.
"""

from tdlab.experiments import (  # noqa: F401
    anchors_attention,
    anchors_bias,
    anchors_embedding,
    anchors_labels,
    anchors_lowrank,
    anchors_mlp,
    anchors_text,
    icl,
    icl_avdigits,
    markov_bridge,
    markov_icommon,
    markov_icl_construction,
    markov_icl_depth,
    markov_icl_linear,
    markov_init,
    markov_landscape,
    markov_rank,
    markov_tying,
    topics_embed,
    topics_real,
    topics_real_two_stage,
    topics_landscape,
    topics_two_stage,
    topics_attn,
    topics_wv,
)
