"""The finite-context references of seed 002's trained models: the minimisers of the loss the models
are trained on, by replicate Monte-Carlo draws.

Each replicate draw minimises ``l_{n, L}`` on ``n`` fresh prompts; drawn at the arms' ``n = N`` the replicates are
independent copies of what the arms reach, and their standard error enters the members' interval
(:class:`tdlab.claims.Row` ``reference``). Why these are the references (and not the closed forms of
:func:`tdlab.theory.icl.alpha_star_T`, :func:`tdlab.theory.icl.two_param_stationary`, nor a large ``n``) is the
reading ``finite_context_reference`` of the seed's ``experiments.yaml``.

The losses are evaluated with the trainer's own prediction path (:func:`tdlab.train.regression.predict`
on prompt statistics), so a reference minimises exactly the objective the arms were trained on.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from tdlab.models.linear_attention import LCA
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl import alpha_star, alpha_star_T
from tdlab.theory.icl_stats import PromptStats, sample_stats
from tdlab.train.regression import predict

_VERSION = 3  # the cache key's version: bumped whenever what is computed changes


def cache_dir() -> Path:
    """Where results of expensive reference computations are kept: ``$TDLAB_CACHE`` or
    ``$XDG_CACHE_HOME/tdlab`` (default ``~/.cache/tdlab``)."""
    root = os.environ.get("TDLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tdlab"
    )
    return Path(root)


def _cached(kind: str, key: dict, compute, use_cache: bool):
    """``compute()``, kept on disk under a hash of ``key`` (JSON-ready results only)."""
    text = json.dumps({"v": _VERSION, "kind": kind, **key}, sort_keys=True)
    path = cache_dir() / "icl_reference" / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
    if use_cache and path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    out = compute()
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(out))
            tmp.replace(path)
        except OSError:
            pass
    return out


def _task_key(task: MultiModalPrompts) -> list:
    return [list(task.dims), list(task.norm_range), task.norm_mode, task.zeta]


def tied_excess(
    stats: PromptStats,
    T: int,
    alpha: Sequence[float] | np.ndarray,
    beta: Sequence[float] | np.ndarray | None = None,
) -> torch.Tensor:
    """Per-prompt ``(y_hat - y^Bayes)^2`` of the tied LCA_T (App. C.1 readout, ``F_0 = 0``) at each of ``P``
    parameter points: ``(P, N)``. ``beta=None``: the one-parameter model (``beta = -alpha``).

    Args:
        stats: one member's prompts (member axis of size 1).
    """
    return (tied_predict(stats, T, alpha, beta) - stats.bayes) ** 2


def descend(f, lo: float, hi: float, start: float, points: int = 25) -> float:
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


def finite_context_minimisers(
    task: MultiModalPrompts,
    depths: Sequence[int],
    L: int,
    *,
    n_prompts: int,
    seed: int,
    one_param_start: float,
    two_param_starts: Mapping[int, tuple[float, float]] | None = None,
    use_cache: bool = True,
) -> dict[str, dict[int, object]]:
    """One replicate of the minimisers of ``l_{n, L}`` for the tied LCA_T reached from the trained arms'
    initialisations, on ``n = n_prompts`` prompts of context ``L`` drawn from ``seed``.

    Replicates at the arms' ``n = N`` are independent draws of the minimiser the arms reach (their mean is
    unbiased for its expectation); a larger ``n`` is not an estimate of ``argmin l_L`` with the replicates'
    spread as its error (the module docstring: the heavy tail biases it upward by more than that spread).

    ``l_L(theta) = E[1/Z] + E[(y_hat - y^Bayes)^2]`` (the query noise is independent of the context),
    so the second term is minimised. One-parameter model: descent in ``alpha`` from ``one_param_start``
    (the Thm 6.2 arms' init) on ``(0.05, 2) alpha*_T``. Two-parameter model (``T > 1`` with a start):
    ``y_hat`` is linear in ``alpha`` at fixed ``beta`` (App. E.1), so the profile over ``beta`` (alpha at its
    optimum) is descended from ``two_param_starts[T]``'s beta (the Thm 6.3 init) on twice Thm 6.3's window.

    Returns:
        ``{"one": {T: alpha}, "two": {T: (alpha, beta)}}``, cached on disk (:func:`cache_dir`).
    """
    depths = [int(T) for T in depths]
    starts = {int(T): (float(a), float(b)) for T, (a, b) in (two_param_starts or {}).items()}
    window = 2.0 / (task.m_sq_range[1] + 1.0)

    def compute() -> dict:
        st = sample_stats(task, [torch.Generator().manual_seed(int(seed))], int(n_prompts), int(L))
        st.spectral()  # once, shared by every evaluation
        y = st.bayes[0]
        out: dict[str, dict[str, object]] = {"one": {}, "two": {}}
        for T in depths:
            a_inf = alpha_star_T(T, task)
            out["one"][str(T)] = descend(
                lambda xs, T=T: tied_excess(st, T, xs).mean(-1).numpy(),
                0.05 * a_inf,
                2.0 * a_inf,
                float(one_param_start),
            )
            if T in starts and T > 1:

                def profile(bs: np.ndarray, T=T) -> tuple[np.ndarray, np.ndarray]:
                    h = predict_unit(st, T, bs)  # (P, N): y_hat at alpha = 1, and y_hat(alpha) = alpha * h
                    a_b = (h * y).mean(-1) / (h * h).mean(-1)
                    return ((a_b[:, None] * h - y) ** 2).mean(-1).numpy(), a_b.numpy()

                b = descend(lambda bs: profile(bs)[0], -2.0 * window, -0.01 * window, starts[T][1])
                out["two"][str(T)] = [float(profile(np.array([b]))[1][0]), b]
        return out

    key = {
        "task": _task_key(task),
        "depths": depths,
        "L": int(L),
        "n": int(n_prompts),
        "seed": int(seed),
        "one_start": float(one_param_start),
        "starts": sorted(starts.items()),
    }
    raw = _cached("tied", key, compute, use_cache)
    return {
        "one": {int(T): float(v) for T, v in raw["one"].items()},
        "two": {int(T): (float(v[0]), float(v[1])) for T, v in raw["two"].items()},
    }


def predict_unit(stats: PromptStats, T: int, beta: Sequence[float] | np.ndarray) -> torch.Tensor:
    """``y_hat`` of the two-parameter tied LCA_T at ``alpha = 1`` and each ``beta``: (P, N)."""
    return tied_predict(stats, T, np.ones(len(beta)), beta)


def tied_predict(
    stats: PromptStats,
    T: int,
    alpha: Sequence[float] | np.ndarray,
    beta: Sequence[float] | np.ndarray | None = None,
) -> torch.Tensor:
    """``y_hat`` of the tied LCA_T (App. C.1 readout, ``F_0 = 0``) at each of ``P`` parameter points: (P, N).
    ``beta=None``: the one-parameter model (``beta = -alpha``); ``stats``: one member's prompts."""
    P = len(alpha)
    model = LCA(stats.shape[-1], T, list(range(P)), param="one" if beta is None else "two", dtype=torch.float64)
    with torch.no_grad():
        model.alpha.copy_(torch.as_tensor(np.asarray(alpha, dtype=float)))
        if beta is not None:
            model.beta.copy_(torch.as_tensor(np.asarray(beta, dtype=float)))
        return predict(model, stats)


class UntiedOptimum(TypedDict):
    """:func:`untied_optimum`'s result: the trace projections per layer, the gradient norm reached, L-BFGS's
    iterations."""

    alpha: list[float]
    beta: list[float]
    grad_norm: float
    iterations: int


def untied_optimum(
    task: MultiModalPrompts,
    T: int,
    L: int,
    *,
    n_prompts: int,
    seed: int,
    max_iter: int = 2000,
    grad_tol: float = 1e-6,
    use_cache: bool = True,
    device: str | torch.device = "cpu",
) -> UntiedOptimum:
    """One replicate of the optimum of ``l_{L}`` for the untied scalar LCA_T of Fig. 3 (App. H:
    ``(W^S_t, W^V_t) = (alpha_t I, beta_t I)``), on ``n_prompts`` prompts of context ``L`` from ``seed``,
    reached by L-BFGS (strong-Wolfe line search) from the tied point ``(alpha*, -alpha*)`` where App. H
    centres its initialisation, restarted (fresh curvature history) until the gradient norm is below
    ``grad_tol`` or ``max_iter`` iterations were spent.

    ``beta_0`` multiplies ``F_0 = 0`` and gets no gradient: it stays at ``-alpha*``. The loss is flat along
    many directions of the ``2T`` weights (per-layer values wander between draws while their layer means
    stay put), so the optimum's trace projections are what a reference can give; the gradient norm reached
    is stored with each draw.

    The prompts are drawn on the CPU (the same prompts on any ``device``); their statistics and the L-BFGS
    run live on ``device``, where a GPU's float64 differs from the CPU's in the last bits only (a cache entry
    is kept per device kind).

    Returns:
        ``{"alpha": [alpha_t], "beta": [beta_t], "grad_norm": g, "iterations": k}`` (cached on disk).
    """

    def compute() -> UntiedOptimum:
        gen = [torch.Generator().manual_seed(int(seed))]
        st = sample_stats(task, gen, int(n_prompts), int(L), device=device)
        st.spectral()
        model = LCA(task.d, T, [0], param="untied", alpha0=alpha_star(task), sigma_init=0.0, dtype=torch.float64)
        model = model.to(device)
        params = [model.alpha, model.beta]
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

            def closure(opt: torch.optim.LBFGS = opt) -> torch.Tensor:
                opt.zero_grad()
                loss = ((predict(model, st) - st.bayes) ** 2).mean()
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
        return {"alpha": model.alpha[0].tolist(), "beta": model.beta[0].tolist(), "grad_norm": g, "iterations": spent}

    key = {
        "task": _task_key(task),
        "T": int(T),
        "L": int(L),
        "n": int(n_prompts),
        "seed": int(seed),
        "max_iter": int(max_iter),
        "grad_tol": float(grad_tol),
    }
    kind = torch.device(device).type
    if kind != "cpu":  # the CPU's entries keep their keys
        key["device"] = kind
    return _cached("untied", key, compute, use_cache)
