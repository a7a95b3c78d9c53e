"""The finite-context minimisers of seed 002's training loss ``l_{n, L}`` (Barnfield, Sen & Sur, Sec. 6, App. H), on
prompt statistics (:class:`tdlab.theory.icl_stats.PromptStats`).

Without LayerNorm and with the frozen App. C.1 readout (Lemma C.1), the scalar LCA_T predicts
``y_hat = c^T P_T x_q = sum_k a_k p_T(lambda_k)`` on the eigen-decomposition of ``Lambda_hat``
(:meth:`PromptStats.spectral`), with ``p_t = p_{t-1} (1 + beta_t lambda) + alpha_t`` from ``p_0 = 0``
(``F_0 = 0``, Eq. C.2). Tied weights (``alpha_t = alpha``, ``beta_t = beta``; ``beta = -alpha`` for the
one-parameter model) have the closed form ``p_T = alpha sum_{j<T} q^j`` with ``q = 1 + beta lambda``
(:func:`tied_power_sum`): :func:`tied_predict`, :func:`tied_excess`. Untied scalar weights (Fig. 3, App. H) run
the recursion: :func:`untied_predict`. These are the numbers of :func:`tdlab.train.regression.predict` on those
models, operation for operation, so a minimiser here minimises exactly the objective the trained arms were
trained on.

The minimisers: :func:`tied_minimisers` (one replicate of ``argmin l_{n, L}`` for the tied models, by
:func:`descend` from the trained arms' initialisations) and :func:`untied_minimiser` (one replicate of the untied
scalar model's optimum, by L-BFGS from App. H's ``(alpha*, -alpha*)``). Why replicate draws at the arms' ``n = N``
are the references of the trained arms (and not the closed forms of :func:`tdlab.theory.icl.alpha_star_T`,
:func:`tdlab.theory.icl.two_param_stationary`, nor a large ``n``) is the reading ``finite_context_reference`` of
seed 002's ``experiments.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypedDict

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from torch import Tensor

from tdlab.theory.icl import PromptTask, alpha_star, alpha_star_T
from tdlab.theory.icl_stats import PromptStats, RawPrompts, sample_stats

__all__ = [
    "SMALL_X",
    "ReferenceTask",
    "TiedMinimisers",
    "UntiedOptimum",
    "descend",
    "tied_excess",
    "tied_minimisers",
    "tied_power_sum",
    "tied_predict",
    "tied_predict_unit",
    "untied_minimiser",
    "untied_predict",
]

SMALL_X = 1e-4  # |beta lambda| below which the tied closed form switches to its Taylor series


class ReferenceTask(PromptTask, Protocol):
    """What the minimisers read of a seed 002 task (``MultiModalPrompts``): the closed forms' priors
    (:class:`tdlab.theory.icl.PromptTask`) and raw prompts to reduce to statistics
    (:class:`tdlab.theory.icl_stats.PromptSampler`)."""

    def sample(
        self, gens: Sequence[torch.Generator], n_prompts: int, L: int, *, dtype: torch.dtype = torch.float32
    ) -> RawPrompts: ...


class TiedMinimisers(TypedDict):
    """:func:`tied_minimisers`' result: ``alpha`` of the one-parameter model and ``(alpha, beta)`` of the
    two-parameter model, by depth ``T``."""

    one: dict[int, float]
    two: dict[int, tuple[float, float]]


def tied_power_sum(q: Tensor, x: Tensor, T: int) -> Tensor:
    """``sum_{j<T} q^j = (q^T - 1)/x`` with ``q = 1 + x``; Taylor series where ``|x| < SMALL_X``."""
    small = x.abs() < SMALL_X
    xs = torch.where(small, torch.full_like(x, SMALL_X), x)
    exact = (q.where(~small, 1.0 + xs) ** T - 1.0) / xs
    # sum_j (1+x)^j = sum_k C(T, k+1) x^k: T + C(T,2) x + C(T,3) x^2 + C(T,4) x^3
    series = T + x * (T * (T - 1) / 2 + x * (T * (T - 1) * (T - 2) / 6 + x * T * (T - 1) * (T - 2) * (T - 3) / 24))
    return torch.where(small, series, exact)


def tied_predict(
    stats: PromptStats,
    T: int,
    alpha: Sequence[float] | np.ndarray,
    beta: Sequence[float] | np.ndarray | None = None,
) -> Tensor:
    """``y_hat`` of the tied LCA_T (App. C.1 readout, ``F_0 = 0``) at each of ``P`` parameter points: (P, N).
    ``beta=None``: the one-parameter model (``beta = -alpha``); ``stats``: one member's prompts."""
    P = len(alpha)
    a = torch.as_tensor(np.asarray(alpha, dtype=float)).reshape(P, 1, 1)
    b = -a if beta is None else torch.as_tensor(np.asarray(beta, dtype=float)).reshape(P, 1, 1)
    lam, a_k = stats.spectral()
    x = b * lam
    q = 1.0 + x
    return (a_k * (a * tied_power_sum(q, x, T))).sum(-1)


def tied_predict_unit(stats: PromptStats, T: int, beta: Sequence[float] | np.ndarray) -> Tensor:
    """``y_hat`` of the two-parameter tied LCA_T at ``alpha = 1`` and each ``beta``: (P, N)."""
    return tied_predict(stats, T, np.ones(len(beta)), beta)


def tied_excess(
    stats: PromptStats,
    T: int,
    alpha: Sequence[float] | np.ndarray,
    beta: Sequence[float] | np.ndarray | None = None,
) -> Tensor:
    """Per-prompt ``(y_hat - y^Bayes)^2`` of the tied LCA_T (App. C.1 readout, ``F_0 = 0``) at each of ``P``
    parameter points: ``(P, N)``. ``beta=None``: the one-parameter model (``beta = -alpha``).

    Args:
        stats: one member's prompts (member axis of size 1).
    """
    return (tied_predict(stats, T, alpha, beta) - stats.bayes) ** 2


def untied_predict(stats: PromptStats, alpha: Tensor, beta: Tensor) -> Tensor:
    """``y_hat`` (E, N) of the untied scalar LCA_T (Fig. 3, App. H: ``(W^S_t, W^V_t) = (alpha_t I, beta_t I)``,
    App. C.1 readout, ``F_0 = 0``) with ``alpha``, ``beta`` (E, T): the recursion
    ``p_t = p_{t-1} (1 + beta_t lambda) + alpha_t`` (Eq. C.2) on :meth:`PromptStats.spectral` (``stats``' member
    axis of size E or 1). Differentiable in ``alpha`` and ``beta``."""
    E, T = alpha.shape
    lam, a = stats.spectral()
    p = torch.full_like(lam.expand(E, *lam.shape[1:]), 0.0)
    for t in range(T):
        p = p * (1.0 + beta[:, t].reshape(E, 1, 1) * lam)
        p = p + alpha[:, t].reshape(E, 1, 1)
    return (a * p).sum(-1)


def descend(f: Callable[[np.ndarray], np.ndarray], lo: float, hi: float, start: float, points: int = 25) -> float:
    """The local minimiser of ``f`` on ``[lo, hi]`` that descent from ``start`` reaches: walk downhill on a grid of
    ``points`` values from the one nearest ``start``, then refine between the grid neighbours (bounded Brent).
    ``f`` maps an array of points to an array of values. A global bounded search can land in another basin: at
    large T the finite-context losses are not convex (prompts whose sample covariance has an eigenvalue beyond
    2/alpha make (1 - alpha lambda)^T explode)."""
    xs = np.linspace(lo, hi, points)
    fs = np.asarray(f(xs), dtype=float)
    i = int(np.argmin(np.abs(xs - start)))
    while True:
        j = min((k for k in (i - 1, i + 1) if 0 <= k < points), key=lambda k: fs[k])
        if fs[j] >= fs[i]:
            break
        i = j
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, points - 1)]
    res = minimize_scalar(
        lambda x: float(f(np.array([x]))[0]),
        bounds=(a, b),
        method="bounded",
        options={"xatol": 1e-10 * max(abs(a), abs(b))},
    )
    return float(res.x) if res.fun <= fs[i] else float(xs[i])


def tied_minimisers(
    task: ReferenceTask,
    depths: Sequence[int],
    L: int,
    *,
    n_prompts: int,
    seed: int,
    one_param_start: float,
    two_param_starts: Mapping[int, tuple[float, float]] | None = None,
) -> TiedMinimisers:
    """One replicate of the minimisers of ``l_{n, L}`` for the tied LCA_T reached from the trained arms'
    initialisations, on ``n = n_prompts`` prompts of context ``L`` drawn from ``seed``
    (:func:`tdlab.theory.icl_stats.sample_stats`, one generator).

    Replicates at the arms' ``n = N`` are independent draws of the minimiser the arms reach (their mean is
    unbiased for its expectation); a larger ``n`` is not an estimate of ``argmin l_L`` with the replicates'
    spread as its error (the heavy tail biases it upward by more than that spread).

    ``l_L(theta) = E[1/Z] + E[(y_hat - y^Bayes)^2]`` (the query noise is independent of the context),
    so the second term is minimised. One-parameter model: descent in ``alpha`` from ``one_param_start``
    (the Thm 6.2 arms' init) on ``(0.05, 2) alpha*_T``. Two-parameter model (``T > 1`` with a start):
    ``y_hat`` is linear in ``alpha`` at fixed ``beta`` (App. E.1), so the profile over ``beta`` (alpha at its
    optimum) is descended from ``two_param_starts[T]``'s beta (the Thm 6.3 init) on twice Thm 6.3's window.

    Returns:
        ``{"one": {T: alpha}, "two": {T: (alpha, beta)}}``.
    """
    depths = [int(T) for T in depths]
    starts = {int(T): (float(a), float(b)) for T, (a, b) in (two_param_starts or {}).items()}
    window = 2.0 / (task.m_sq_range[1] + 1.0)
    st = sample_stats(task, [torch.Generator().manual_seed(int(seed))], int(n_prompts), int(L))
    st.spectral()  # once, shared by every evaluation
    y = st.bayes[0]
    out: TiedMinimisers = {"one": {}, "two": {}}
    for T in depths:
        a_inf = alpha_star_T(T, task)

        def one(xs: np.ndarray, T: int = T) -> np.ndarray:
            return tied_excess(st, T, xs).mean(-1).numpy()

        out["one"][T] = descend(one, 0.05 * a_inf, 2.0 * a_inf, float(one_param_start))
        if T in starts and T > 1:

            def profile(bs: np.ndarray, T: int = T) -> tuple[np.ndarray, np.ndarray]:
                h = tied_predict_unit(st, T, bs)  # (P, N): y_hat at alpha = 1, and y_hat(alpha) = alpha * h
                a_b = (h * y).mean(-1) / (h * h).mean(-1)
                return ((a_b[:, None] * h - y) ** 2).mean(-1).numpy(), a_b.numpy()

            b = descend(lambda bs: profile(bs)[0], -2.0 * window, -0.01 * window, starts[T][1])
            out["two"][T] = (float(profile(np.array([b]))[1][0]), b)
    return out


class UntiedOptimum(TypedDict):
    """:func:`untied_minimiser`'s result: the trace projections per layer, the gradient norm reached, L-BFGS's
    iterations."""

    alpha: list[float]
    beta: list[float]
    grad_norm: float
    iterations: int


def untied_minimiser(
    task: ReferenceTask,
    T: int,
    L: int,
    *,
    n_prompts: int,
    seed: int,
    max_iter: int = 2000,
    grad_tol: float = 1e-6,
    device: str | torch.device = "cpu",
) -> UntiedOptimum:
    """One replicate of the optimum of ``l_{L}`` for the untied scalar LCA_T of Fig. 3 (App. H:
    ``(W^S_t, W^V_t) = (alpha_t I, beta_t I)``, :func:`untied_predict`), on ``n_prompts`` prompts of context ``L``
    from ``seed``, reached by L-BFGS (strong-Wolfe line search) from the tied point ``(alpha*, -alpha*)`` where
    App. H centres its initialisation (held in float32 and then float64, as ``LCA``'s initialisation holds it),
    restarted (fresh curvature history) until the gradient norm is below ``grad_tol`` or ``max_iter`` iterations
    were spent.

    ``beta_0`` multiplies ``F_0 = 0`` and gets no gradient: it stays at ``-alpha*``. The loss is flat along
    many directions of the ``2T`` weights (per-layer values wander between draws while their layer means
    stay put), so the optimum's trace projections are what a reference can give; the gradient norm reached
    is returned with each draw.

    The prompts are drawn on the CPU (the same prompts on any ``device``); their statistics and the L-BFGS
    run live on ``device``, where a GPU's float64 differs from the CPU's in the last bits only.

    Returns:
        ``{"alpha": [alpha_t], "beta": [beta_t], "grad_norm": g, "iterations": k}``.
    """
    gen = [torch.Generator().manual_seed(int(seed))]
    st = sample_stats(task, gen, int(n_prompts), int(L), device=device)
    st.spectral()
    a0 = alpha_star(task)
    alpha = torch.full((1, T), a0).to(dtype=torch.float64, device=device).requires_grad_()
    beta = torch.full((1, T), -a0).to(dtype=torch.float64, device=device).requires_grad_()
    params = [alpha, beta]
    spent, g = 0, float("inf")
    while spent < max_iter and g > grad_tol:
        opt = torch.optim.LBFGS(
            params,
            lr=1.0,
            max_iter=min(1000, max_iter - spent),
            tolerance_grad=grad_tol,
            tolerance_change=1e-16,
            history_size=50,
            line_search_fn="strong_wolfe",
        )

        def closure(opt: torch.optim.LBFGS = opt) -> Tensor:
            opt.zero_grad()
            loss = ((untied_predict(st, alpha, beta) - st.bayes) ** 2).mean()
            loss.backward()
            return loss

        opt.step(closure)
        closure()
        grads = []
        for p in params:
            assert p.grad is not None  # closure() has just run backward through every parameter
            grads.append(p.grad.flatten())
        g = float(torch.cat(grads).norm())
        done = int(opt.state[opt._params[0]].get("n_iter", 0))
        spent += max(done, 1)
    return {"alpha": alpha[0].tolist(), "beta": beta[0].tolist(), "grad_norm": g, "iterations": spent}
