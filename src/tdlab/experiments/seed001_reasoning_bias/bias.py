"""``anchors-bias``: seed 001 (Reasoning bias under small initialisation), §4.1, Fig. 2A and Fig. 8.

A 2-layer, 1-head post-LN transformer (Eqs. 15–18, A.2–A.3) is trained on the composite anchor
functions (§3.1, Eq. 1: reasoning ``y = z_p + Σa``, memory ``y^(z_p, a) ~ U(Z)`` drawn once) from three
initialisation rates γ ∈ {0.3, 0.5, 0.8} (§3.4: ``W_ij ~ N(0, d_out^{-2γ})``, larger γ = smaller init),
the γ × seed grid as one ensemble (:mod:`~tdlab.experiments.seed001_reasoning_bias.common.training`). Loss and
accuracy on D_mem, D_rsn,train and the held-out D_rsn,test (tuples ``M = {(11, 13), (13, 11)}``) are
recorded every epoch (Fig. 2A). The seed's reading: at γ = 0.8 both reasoning sets are learnt long
before the memory set and the masked tuples are inferred; at γ = 0.3 memory and reasoning-train fall
together and D_rsn,test does not; the reasoning bias grows with γ.

Claims (thresholds marked (t) are ours, in :class:`BiasClaims`; each claim declares the seed's words, the
small (γ > 0.5) or large (γ < 0.5) init it is about, and where its threshold comes from):

* γ = 0.8, reasoning first: ``T50_rsn,train < T50_mem``, ``T50_rsn,test < T50_mem`` (censored and
  discrete: an exact sign test over seeds) and ``AUC_mem < AUC_rsn,test``; the arm must have learnt
  something of the reasoning map (past the label marginal on D_rsn,train);
* γ = 0.8 generalises: final ``acc_rsn,test >= 0.9`` (t), once D_rsn,train has been learnt (T50 reached);
* γ = 0.3 memorises at the reasoning pace: ``|log(T50_mem / T50_rsn,train)| <= log 1.5`` (t), once both
  training splits have been learnt within the run;
* γ = 0.3 does not generalise: final ``acc_rsn,test`` at most chance (``1/N_Z``, a guess from the held-out
  labels' marginal) plus 0.05 (t, calibrated: chance holds, the inferred solution fails), once D_rsn,train has
  been learnt. The seed's "remains effectively unchanged" is a statement that something *stays*: it holds only
  from a run of the seed's 1000 epochs, and fails from any run where M is already inferred;
* ``AUC_rsn,test − AUC_mem`` grows with γ (paired comparisons of neighbouring γ).

The trained ensemble (``arrays/gamma=<γ>.safetensors``, ``@init`` and the ``snapshot_epochs`` as
``@step<N>`` beside it) is what the probe experiments read. Fig. 8 (App. A.1) draws example sequences
of the task, coloured by token type.
"""

from __future__ import annotations

from tdlab.experiments.base import register
from tdlab.experiments.seed001_reasoning_bias.common.gamma_sweep import AnchorsBiasConfigT, AnchorsGammaSweep


@register
class AnchorsBias(AnchorsGammaSweep[AnchorsBiasConfigT]):
    """anchors-bias: the γ-sweep as it is (:class:`~tdlab.experiments.seed001_reasoning_bias.common.gamma_sweep.AnchorsGammaSweep`
    holds its config, claims, profiles, run, measure and figures; the probe experiments extend that class, not
    this one, so that no experiment module imports another)."""
