"""Exact loss landscape and gradient flow of the canonical low-rank transformer on a binary Markov chain.

Seed 000 (Local to Global), Secs. 2-4 and Apps. A, F, G, H. Data: a stationary binary first-order
chain with switching probabilities ``p = P(1|0)``, ``q = P(0|1)`` (see :mod:`tdlab.tasks.markov`).
Parameters (Eq. 2):

* two-parameter model ``theta = (e, w)`` (embedding, feed-forward weight), Eqs. 3/6-9;
* three-parameter model ``theta = (e, w, a)`` with the (linear-)attention scalar ``a``, Eq. 45.

Everything here is a plain function of tensors: ``theta`` has shape ``(..., 2)`` or ``(..., 3)`` (the
last dimension selects the model), ``p`` and ``q`` are floats or tensors broadcastable to
``theta.shape[:-1]``; all computations are float64.

Structure used throughout. Because ``x_n`` is binary, the logit of either model is affine in ``x_n``::

    logit(x_n) = b + c0(theta) + D(theta) * x_n,

and every position is stationary (``x_1 ~ pi``), so the loss Eq. (8) is *exactly* the finite sum over
``(X, Y) = (x_n, x_{n+1}) in {0,1}^2`` of Lemma 2/6 (independent of N). The optimal bias b* absorbs
``c0``, hence ``L(theta) = Phi(D(theta))`` with the profile loss of a one-slope logistic regression

    Phi(D) = min_beta E[ l_log((2Y - 1)(beta + D X)) ],   (Lemma 5 gives the argmin beta*(D))

so the gradient is ``Phi'(D) grad D`` (Danskin, Lemma 7), ``Phi'(D) = pi_1 (sigma(beta* + D) - (1-q))``,
``Phi`` is convex with its minimum at ``D* = log((1-p)(1-q)/(pq))``. The "contrast" D is

* ``e^2 (1 + 2 w|w|)``            for (e, w)     (Eq. 3 / 24 / 34);
* ``e^2 (1 + a e^2)(1 + 2 w|w|)`` for (e, w, a)  (Eq. 45 / 49).

Critical points are ``{D = D*}`` (global minima) or ``{grad D = 0}`` (the w-axis e = 0, plus
Thm. 10's ``Theta_station``), which is Thm. 1 / Thm. 10; the energies Eq. (4) and Eq. (10) are
conserved because the flow is ``-Phi'(D) grad D`` and ``grad D`` is orthogonal to ``grad E``
(Lemma 1 / Lemma 14).

The parts, each a module (every name is re-exported here):

* :mod:`~tdlab.theory.markov_landscape.population_loss` — the contrast D, the optimal bias, ``L(theta, b)``,
  ``L(theta) = Phi(D)`` and its closed-form gradient (Eqs. 3, 8, 45; Lemmas 2, 5, 7, 13);
* :mod:`~tdlab.theory.markov_landscape.critical` — the critical sets and their codes (Thm. 1, Thm. 10);
* :mod:`~tdlab.theory.markov_landscape.basins` — the energies (Eq. 4, Eq. 10), the basins and limits of
  gradient flow (Thm. 2, Thm. 8, Lemma 11) and their Gaussian-initialisation probabilities (App. G);
* :mod:`~tdlab.theory.markov_landscape.flow` — gradient flow itself (GF, Sec. 4; GF-attn, App. A.2) and
  Monte-Carlo basin probabilities from it.

The seed's ambiguities are resolved in the module they concern (two readings of the model in
:mod:`~tdlab.theory.markov_landscape.population_loss`, the class of Theta_station in
:mod:`~tdlab.theory.markov_landscape.critical`, App. M.5's escape rate in
:mod:`~tdlab.theory.markov_landscape.flow`); each is checked numerically in tests/theory/markov_landscape/.
"""

from tdlab.theory.markov_landscape.basins import (
    ENERGY_SADDLE,
    basin_boundaries,
    energy,
    gaussian_basin_probability,
    gaussian_init_limit,
    max_energy_drift,
    predict_basin,
    predict_limit,
)
from tdlab.theory.markov_landscape.critical import (
    SADDLE_W,
    CriticalKind,
    classify_critical,
    critical_loci,
    critical_loci_3,
)
from tdlab.theory.markov_landscape.flow import gaussian_basin_probability_mc, run_flow
from tdlab.theory.markov_landscape.population_loss import (
    autograd_grad_loss,
    contrast,
    contrast_and_grad,
    grad_loss,
    logit_offset,
    loss,
    loss_with_bias,
    optimal_bias,
    optimal_contrast,
    optimal_intercept,
    profile_loss,
    profile_loss_slope,
)

__all__ = [
    "ENERGY_SADDLE",
    "SADDLE_W",
    "CriticalKind",
    "autograd_grad_loss",
    "basin_boundaries",
    "classify_critical",
    "contrast",
    "contrast_and_grad",
    "critical_loci",
    "critical_loci_3",
    "energy",
    "gaussian_basin_probability",
    "gaussian_basin_probability_mc",
    "gaussian_init_limit",
    "grad_loss",
    "logit_offset",
    "loss",
    "loss_with_bias",
    "max_energy_drift",
    "optimal_bias",
    "optimal_contrast",
    "optimal_intercept",
    "predict_basin",
    "predict_limit",
    "profile_loss",
    "profile_loss_slope",
    "run_flow",
]
