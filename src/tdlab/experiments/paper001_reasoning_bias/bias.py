"""``anchors-bias``: seed 001 (Reasoning bias under small initialisation), §4.1, Fig. 2A and Fig. 8.

A 2-layer, 1-head post-LN transformer (Eqs. 15–18, A.2–A.3) is trained on the composite anchor
functions (§3.1, Eq. 1: reasoning ``y = z_p + Σa``, memory ``y^(z_p, a) ~ U(Z)`` drawn once) from three
initialisation rates γ ∈ {0.3, 0.5, 0.8} (§3.4: ``W_ij ~ N(0, d_out^{-2γ})``, larger γ = smaller init),
the γ × seed grid as one ensemble (:mod:`~tdlab.experiments.paper001_reasoning_bias.common.training`). Loss and
accuracy on D_mem, D_rsn,train and the held-out D_rsn,test (tuples ``M = {(11, 13), (13, 11)}``) are
recorded every epoch (Fig. 2A).

The trained ensemble (``arrays/gamma=<γ>.safetensors``, ``@init`` and the ``snapshot_epochs`` as
``@step<N>`` beside it) is what the probe experiments read. Fig. 8 (App. A.1) draws example sequences
of the task, coloured by token type.

Declared in the seed's ``experiments.yaml`` (``tdlab explain anchors-bias``).
"""

from __future__ import annotations

from tdlab.experiments.base import register
from tdlab.experiments.paper001_reasoning_bias.common.gamma_sweep import AnchorsBiasConfigT, AnchorsGammaSweep


@register
class AnchorsBias(AnchorsGammaSweep[AnchorsBiasConfigT]):
    """anchors-bias: the γ-sweep as it is (:class:`~tdlab.experiments.paper001_reasoning_bias.common.gamma_sweep.AnchorsGammaSweep`
    holds its config, claims, profiles, run, measure and figures; the probe experiments extend that class, not
    this one, so that no experiment module imports another)."""
