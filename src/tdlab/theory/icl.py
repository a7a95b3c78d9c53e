"""Closed forms and baselines for multi-modal in-context learning.

Seed paper: Barnfield, Sen & Sur, "Multi-layer cross-attention is provably optimal for
multi-modal in-context learning" (arXiv:2602.04872). Notation: ``Z = 1 + |m|^2`` is the spike
eigenvalue of ``Lambda = I + m m^T`` (App. A.1), ``W = (Z - 1) / Z``.

Two "Bayes" predictors appear here and must not be confused:

* :func:`bayes_predictor` is the paper's ``y_q^Bayes = E[y_q | m, zeta, x_q] = <w, x_q>``
  (Eq. 4.1): it knows the prompt's latents. It is what an ICL model should recover as the
  context length grows, and its risk is ``E[zeta^2 / Z] = E[1/Z]`` (:func:`bayes_risk`).
* :func:`posterior_mean_predictor` is the finite-context Bayes rule
  ``E[y_q | X, y, x_q]``: it integrates over the posterior of ``(m, zeta)``. No closed form;
  computed by importance sampling, for small problems.

Expectations over ``Z`` (:func:`bayes_risk`, :func:`infinite_context_excess_risk`, ...) are computed
by tensor-product Gauss-Legendre quadrature over the uniform norms of the prior, with ``n_quad``
nodes per norm: deterministic, and exact to rounding for polynomial integrands in the norms of
degree below ``2 n_quad`` (``(1 - alpha Z)^{2T}`` needs ``n_quad > 2T``). ``n_quad=None`` picks
1024 nodes for one norm, 256 per norm for two (the App. H case: 65,536 nodes, accurate to
``T ~ 120``) and ``2^(18/k)`` per norm for ``k >= 3``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.special import roots_legendre
from torch import Tensor

from tdlab.tasks.multimodal import MultiModalPrompts

__all__ = [
    "bayes_predictor",
    "sample_mean_predictor",
    "posterior_mean_predictor",
    "z_quadrature",
    "bayes_risk",
    "bayes_risk_mc",
    "sample_mean_risk",
    "alpha_star",
    "infinite_context_excess_risk",
    "alpha_star_T",
    "alpha_of_beta",
    "whitening_error",
    "whitening_error_limit",
    "response_second_moment",
    "finite_context_variance_floor",
    "tied_lca_excess",
    "finite_context_minimisers",
    "cache_dir",
]



# ---------------------------------------------------------------------------------------------
# Predictors on tensors (leading axes are arbitrary, e.g. (E, N))


def bayes_predictor(m: Tensor, zeta: Tensor, x_query: Tensor) -> Tensor:
    """The paper's Bayes-optimal prediction ``<w, x_q>``, ``w = zeta m / (1 + |m|^2)`` (Eqs. 3.3, 4.1).

    Args:
        m: (..., d) modality vectors; zeta: (...) response scales; x_query: (..., d).

    Returns:
        (...) the conditional mean ``E[y_q | m, zeta, x_q]`` (Lemma A.1).
    """
    return zeta * (m * x_query).sum(-1) / (1.0 + (m * m).sum(-1))


def sample_mean_predictor(y: Tensor) -> Tensor:
    """The naive in-context baseline ``y_bar_L = (1/L) sum_i y_i`` (App. G). y: (..., L) -> (...)."""
    return y.mean(-1)


def posterior_mean_predictor(
    task: MultiModalPrompts,
    X: Tensor,
    y: Tensor,
    x_query: Tensor,
    *,
    generator: torch.Generator,
    n_samples: int = 20_000,
    chunk: int = 256,
) -> Tensor:
    """Finite-context Bayes rule ``E[y_q | X, y, x_q]`` by self-normalised importance sampling.

    Proposal: ``n_samples`` draws ``(m_k, zeta_k)`` from the prior of ``task`` (shared by all
    prompts). Weight of draw ``k`` for a prompt: its likelihood. Given ``(m, zeta)``, the context
    has ``y_i ~ N(0, zeta^2)`` and ``x_i | y_i ~ N((y_i / zeta) m, I)`` (since ``u_i = y_i / zeta``,
    Eq. 3.1), and the query has ``x_q ~ N(0, I + m m^T)``; up to terms free of ``(m, zeta)``::

        log lik = -L log|zeta| - S (1 + |m|^2) / (2 zeta^2) + m^T c / zeta
                  - log(Z) / 2 + (m^T x_q)^2 / (2 Z),      S = sum_i y_i^2,  c = sum_i y_i x_i.

    The estimate is the weighted mean of ``E[y_q | m_k, zeta_k, x_q] = zeta_k m_k^T x_q / Z_k``.
    Consistent as ``n_samples -> inf``; accurate only while the posterior is not much narrower than
    the prior (small ``L`` and ``d``). For large ``L`` it tends to :func:`bayes_predictor`.

    Args:
        task: the prompt distribution (its prior on ``(m, zeta)`` is used).
        X: (..., L, d) context covariates; y: (..., L) responses; x_query: (..., d).
        generator: source of the prior draws.
        n_samples: number of prior draws.
        chunk: prompts processed at a time (memory ``chunk * n_samples`` doubles).

    Returns:
        (...) posterior-mean predictions, in the dtype of ``X``.
    """
    batch_shape, L, d = X.shape[:-2], X.shape[-2], X.shape[-1]
    m, zeta = task.sample_latents(generator, n_samples, dtype=torch.float64)
    m, zeta = m.to(X.device), zeta.to(X.device)
    z = 1.0 + (m * m).sum(-1)  # (K,)
    # Per-draw factors of the log-likelihood terms and of the prediction, so that each chunk only
    # needs two (chunk, d) x (d, K) products and one (chunk, K) x (K, d) product.
    const = -L * zeta.abs().log() - 0.5 * z.log()  # (K,)
    quad = -z / (2 * zeta**2)  # times S
    m_c = m / zeta[:, None]  # (m^T c) / zeta = c^T m_c
    m_q = m / torch.sqrt(2 * z)[:, None]  # (m^T x_q)^2 / (2Z) = (x_q^T m_q)^2
    m_pred = m * (zeta / z)[:, None]  # zeta m^T x_q / Z = x_q^T m_pred
    Xf, yf, qf = X.reshape(-1, L, d).double(), y.reshape(-1, L).double(), x_query.reshape(-1, d).double()
    S = (yf * yf).sum(-1)  # (P,)
    c = torch.einsum("pl,pld->pd", yf, Xf)  # (P, d)
    out = []
    for s in range(0, Xf.shape[0], chunk):
        q = qf[s : s + chunk]
        loglik = torch.addmm(const + S[s : s + chunk, None] * quad, c[s : s + chunk], m_c.T)  # (p, K)
        loglik += (q @ m_q.T) ** 2
        out.append(((torch.softmax(loglik, dim=-1) @ m_pred) * q).sum(-1))
    return torch.cat(out).reshape(batch_shape).to(X.dtype)


# ---------------------------------------------------------------------------------------------
# Expectations over Z = 1 + |m|^2


@functools.lru_cache(maxsize=32)
def z_quadrature(task: MultiModalPrompts, n_quad: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``z`` and weights ``w`` (float64, summing to 1) with ``sum(w * f(z)) ~ E[f(Z)]``.

    ``|m|^2`` is a sum of ``task.n_norms`` squared independent ``U[lo, hi]`` norms, so the law of
    ``Z`` is integrated on the product of ``n_quad``-point Gauss-Legendre rules, one per norm.
    """
    k = task.n_norms
    if n_quad is None:
        n_quad = 1024 if k == 1 else 256 if k == 2 else max(16, int(2 ** (18 / k)))
    lo, hi = task.norm_range
    t, wt = roots_legendre(n_quad)
    r, wr = lo + (hi - lo) * (t + 1) / 2, wt / 2
    m_sq, w = np.zeros(1), np.ones(1)
    for _ in range(k):
        m_sq = (m_sq[:, None] + r[None, :] ** 2).ravel()
        w = (w[:, None] * wr[None, :]).ravel()
    z = 1.0 + m_sq
    z.setflags(write=False), w.setflags(write=False)  # cached: shared between callers
    return z, w


def bayes_risk(task: MultiModalPrompts, *, n_quad: int | None = None) -> float:
    """Risk ``E[(y_q - <w, x_q>)^2] = E[zeta^2 / Z] = E[1/Z]`` of :func:`bayes_predictor` (Lemma D.1).

    This is the additive constant of Lemma D.1 and the floor every predictor's risk approaches as
    ``L -> inf``. App. H setting: 0.10905.
    """
    z, w = z_quadrature(task, n_quad)
    return float(np.sum(w / z))


def bayes_risk_mc(task: MultiModalPrompts, generator: torch.Generator, n_prompts: int) -> tuple[float, float]:
    """Monte-Carlo risk of :func:`bayes_predictor` on fresh prompts: ``(mean, standard error)``."""
    b = task.sample([generator], n_prompts, L=1, dtype=torch.float64)
    err2 = (b.y_query - bayes_predictor(b.m, b.zeta, b.x_query)) ** 2
    return float(err2.mean()), float(err2.std() / math.sqrt(err2.numel()))


def sample_mean_risk(task: MultiModalPrompts, L: int) -> float:
    """Risk of :func:`sample_mean_predictor`: ``E[zeta^2 (u_q - u_bar)^2] = E[zeta^2] (1 + 1/L) = 1 + 1/L``."""
    del task  # E[zeta^2] = 1 for every prior of Sec. 3
    return 1.0 + 1.0 / L


def alpha_star(task: MultiModalPrompts) -> float:
    """Limiting parameter ``alpha* = 2 / (2 + m_lower + m_upper)`` of Thm 6.2 (= lim_T alpha*_T).

    ``m_lower, m_upper`` are the essential inf and sup of ``|m|^2`` (Assumption 6.1, App. A.1).
    App. H (per-modality norms on [0, 5], d1 = d2 = 16): ``2 / 52 = 1/26``. It also minimises the
    worst-case spike contraction ``max(|1 - alpha Z_lower|, |1 - alpha Z_upper|)`` (Sec. 6).
    """
    m_lo, m_hi = task.m_sq_range
    return 2.0 / (2.0 + m_lo + m_hi)


def _residual_gain(z, alpha, beta, T: int):
    # Spike eigenvalue of I - (1/L) X F^T in the L -> inf limit of the tied (alpha, beta) LCA_T:
    # (1/L) X F^T = alpha Lambda sum_{k<T} (I + beta Lambda)^k (Lemma C.2, Eq. C.1), so on the spike
    # g(z) = 1 - alpha z sum_{k<T} (1 + beta z)^k = 1 - (alpha/beta) ((1 + beta z)^T - 1) (Eq. C.2);
    # with beta = -alpha, g(z) = (1 - alpha z)^T. Horner form keeps beta = 0 well defined.
    s = 0.0
    for _ in range(T):
        s = s * (1.0 + beta * z) + 1.0
    return 1.0 - alpha * z * s


def infinite_context_excess_risk(alpha, T: int, task: MultiModalPrompts, beta=None, *, n_quad: int | None = None):
    """Excess risk over :func:`bayes_risk` of the tied LCA_T model as ``L -> inf`` (Lemma D.1).

    One-parameter model (``beta=None``, i.e. ``beta = -alpha``)::

        l(alpha) = E[(Z - 1)/Z * (1 - alpha Z)^{2T}]                                   (Lemma D.1)

    Two-parameter model: ``E[(Z - 1)/Z * g(Z)^2]`` with ``g(z) = 1 - (alpha/beta)((1 + beta z)^T - 1)``,
    the same computation as Lemma D.1 with Eq. (C.2) in place of ``(I - alpha Lambda)^T``: the error
    ``w^T g(Lambda) x_q`` lives on the spike, where ``Var`` gives ``(Z - 1)/Z^2 * Z``. Both use the
    frozen C.1 readout. ``alpha`` and ``beta`` broadcast (numpy arrays allowed, e.g. a loss landscape
    as in Fig. 4); a float comes back for scalar inputs.
    """
    z, w = z_quadrature(task, n_quad)
    a = np.asarray(alpha, dtype=np.float64)
    b = -a if beta is None else np.asarray(beta, dtype=np.float64)
    a, b = np.broadcast_arrays(a, b)
    g = _residual_gain(z, a[..., None], b[..., None], T)
    out = np.sum(w * (z - 1.0) / z * g**2, axis=-1)
    return float(out) if out.ndim == 0 else out


def alpha_star_T(T: int, task: MultiModalPrompts, *, n_quad: int | None = None) -> float:
    """Minimiser ``alpha*_T`` of the one-parameter loss of Lemma D.1 (the gradient-flow limit, Thm 6.2.1).

    ``l`` is strictly convex with ``l'(alpha) = -2T E[(Z - 1)(1 - alpha Z)^{2T-1}]``, negative at 0 and
    non-negative for ``alpha >= 1`` (Lemma D.1(2)); the root is bracketed by doubling from ``1/Z_upper``.
    App. H setting: 0.0411, 0.0402, 0.0392, 0.0389, 0.0387, 0.0385 for T = 1, 2, 5, 10, 20, 50.
    """
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    z, w = z_quadrature(task, n_quad)

    def dloss(a: float) -> float:  # l'(a) / (2T)
        return -float(np.sum(w * (z - 1.0) * (1.0 - a * z) ** (2 * T - 1)))

    hi = 1.0 / z.max()
    while dloss(hi) <= 0.0 and hi < 1.0:
        hi *= 2.0
    return float(brentq(dloss, 0.0, min(hi, 1.0), xtol=1e-14, rtol=1e-12))


def alpha_of_beta(beta: float, T: int, task: MultiModalPrompts, *, n_quad: int | None = None) -> float:
    """``alpha*(beta)``: the minimiser in ``alpha`` of the two-parameter loss at fixed ``beta`` (App. E.1).

    With ``g = 1 - alpha h(Z)``, ``h(z) = ((1 + beta z)^T - 1)/beta``, the loss ``E[W g^2]`` is quadratic
    in ``alpha``, minimised at ``E[W h] / E[W h^2]``. Thm 6.3 starts gradient flow at
    ``(alpha*(beta0), beta0)`` with ``beta0 in (-2/(m_upper + 1), 0)``.
    """
    z, w = z_quadrature(task, n_quad)
    h = 1.0 - _residual_gain(z, 1.0, beta, T)  # h(z), from g with alpha = 1
    W = (z - 1.0) / z
    return float(np.sum(w * W * h) / np.sum(w * W * h**2))


# ---------------------------------------------------------------------------------------------
# Whitening diagnostic (Eq. 6.1, Fig. 3 right)


def whitening_error(X: Tensor, F: Tensor) -> Tensor:
    """``||X F^T / L - I||_F / sqrt(d)`` per prompt (Sec. 7, Fig. 3; in the paper's column layout).

    Args:
        X: (..., L, d) covariates, tokens as rows; F: (..., L, d) an LCA state ``F_t``, same layout
            (leading axes broadcast).

    Returns:
        (...) the whitening error; it tends to 0 when ``F`` whitens ``X`` (Eq. 6.1).
    """
    L, d = X.shape[-2], X.shape[-1]
    G = X.transpose(-1, -2) @ F / L  # = (1/L) X F^T in column layout
    eye = torch.eye(d, dtype=G.dtype, device=G.device)
    return (G - eye).flatten(-2).norm(dim=-1) / math.sqrt(d)


def whitening_error_limit(m: Tensor, alpha: float, T: int, beta: float | None = None) -> Tensor:
    """``L -> inf`` limit of :func:`whitening_error` for the tied LCA_T at depth ``T`` (Lemma C.2).

    ``(1/L) X F^T - I -> -g(Lambda)`` with ``g`` as in :func:`infinite_context_excess_risk`; ``Lambda``
    has eigenvalue ``Z`` once and 1 ``(d - 1)`` times, so the error is
    ``sqrt((g(Z)^2 + (d - 1) g(1)^2) / d)``. m: (..., d) -> (...).
    """
    b = -alpha if beta is None else beta
    d = m.shape[-1]
    z = 1.0 + (m * m).sum(-1)
    g_spike, g_bulk = _residual_gain(z, alpha, b, T), _residual_gain(1.0, alpha, b, T)
    return torch.sqrt((g_spike**2 + (d - 1) * g_bulk**2) / d)


# ---------------------------------------------------------------------------------------------
# The trivial predictor, the finite-context variance floor, the finite-L_tr reference


def response_second_moment(task: MultiModalPrompts) -> float:
    """``E[y^2] = E[zeta^2] E[u^2]``: the test MSE of the zero predictor, the trivial baseline of the
    training-health gate. Both zeta laws of Sec. 3 have variance 1 and ``u ~ N(0, 1)`` (Eq. 3.1), so 1."""
    zeta_var = {"gaussian": 1.0, "rademacher": 1.0}[task.zeta]
    return zeta_var * 1.0


def finite_context_variance_floor(task: MultiModalPrompts, L: int) -> float:
    """Excess over the Bayes predictor that a finite test context ``L`` adds even to a model whose
    ``L -> inf`` limit is the Bayes predictor: least squares on ``L`` Gaussian tokens in ``d`` dimensions
    has expected excess ``sigma^2 d / (L - d - 1)`` with ``sigma^2 = E[zeta^2 / Z] = E[1/Z]`` (the noise
    of Eq. 3.3). The deep-``T`` LCA tends to that estimator (``p_T(lambda) -> 1/lambda``), so below this
    level differences between depths are not resolvable at test context ``L``; infinite for ``L <= d + 1``.
    Derived here (standard OLS risk), not stated in the seed."""
    d = task.d
    return math.inf if L <= d + 1 else bayes_risk(task) * d / (L - d - 1)


def tied_lca_excess(lam: Tensor, a: Tensor, bayes: Tensor, alpha, beta, T: int) -> Tensor:
    """Mean ``(y_hat - y^Bayes)^2`` of the tied LCA_T (``beta = -alpha`` for the one-parameter model) on
    prompts given by their spectral statistics: ``y_hat = sum_k a_k p_T(lambda_k)`` with
    ``p_T(lambda) = alpha sum_{j<T} (1 + beta lambda)^j`` (Eq. C.2, frozen C.1 readout).

    Args:
        lam, a: (N, K) eigenvalues of ``Lambda_hat`` and ``(u_k . c)(u_k . x_q)``; bayes: (N,).
        alpha, beta: tensors of any common shape S (broadcast against the prompts).
    Returns:
        (S) the mean excess for every parameter point.
    """
    al = torch.as_tensor(alpha, dtype=lam.dtype)
    be = torch.as_tensor(beta, dtype=lam.dtype)
    al, be = torch.broadcast_tensors(al, be)
    shape = al.shape
    al, be = al.reshape(-1, 1, 1), be.reshape(-1, 1, 1)
    s = torch.zeros(al.shape[0], *lam.shape, dtype=lam.dtype)
    q = 1.0 + be * lam
    for _ in range(T):  # Horner: sum_{j<T} q^j
        s = s * q + 1.0
    y_hat = (a * al * s).sum(-1)
    return ((y_hat - bayes) ** 2).mean(-1).reshape(shape)


def cache_dir() -> Path:
    """Where results of expensive reference computations are kept: ``$TDLAB_CACHE`` or
    ``$XDG_CACHE_HOME/tdlab`` (default ``~/.cache/tdlab``)."""
    root = os.environ.get("TDLAB_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tdlab")
    return Path(root)


_REFERENCE_VERSION = 2


def finite_context_minimisers(
    task: MultiModalPrompts, depths: tuple[int, ...], L: int, *, n_prompts: int = 1 << 16, seed: int = 0,
    two_param_starts: dict[int, tuple[float, float]] | None = None, use_cache: bool = True,
) -> dict[str, dict[int, object]]:
    """Minimisers of the finite-context population loss ``l_{L_tr}`` (Sec. 6, ``N -> inf`` at fixed
    ``L_tr = L``) of the tied LCA_T, by Monte Carlo on ``n_prompts`` prompts of context ``L`` drawn from
    ``seed``: the reference for models trained on ``l_{N, L_tr}`` with finite ``L_tr`` (App. H), whose
    ``L_tr -> inf`` limit is :func:`alpha_star_T` (Thm 6.2 is a statement about that limit).

    ``l_{L}(theta) = E[1/Z] + E[(y_hat - y^Bayes)^2]`` (the query noise is independent of the context), so
    the second term is minimised. One-parameter model: a bounded scalar minimisation around
    ``alpha*_T``. Two-parameter model: Nelder-Mead started from ``two_param_starts[T]`` (the stationary
    point of the closed-form loss that gradient flow reaches from the Thm 6.3 init): the loss is quadratic
    in ``alpha`` at fixed ``beta`` (App. E.1), so its profile in ``beta`` is minimised on a bracket around
    that start, i.e. the stationary point of ``l_L`` in the same basin. ``alpha_se``: the Monte-Carlo standard error of the one-parameter
    minimiser (delta method: sd of the per-prompt gradient / (sqrt(n) * curvature)).

    Results are cached on disk (:func:`cache_dir`) under a key of every parameter.

    Returns:
        ``{"one": {T: alpha}, "one_se": {T: se}, "two": {T: (alpha, beta)}}``.
    """
    from scipy.optimize import minimize_scalar

    depths = tuple(int(T) for T in depths)
    starts = {int(T): (float(a), float(b)) for T, (a, b) in (two_param_starts or {}).items()}
    key = json.dumps({"v": _REFERENCE_VERSION, "task": [list(task.dims), list(task.norm_range), task.norm_mode, task.zeta],
                      "depths": depths, "L": int(L), "n": int(n_prompts), "seed": int(seed),
                      "starts": sorted(starts.items())}, sort_keys=True)
    path = cache_dir() / "icl_reference" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    if use_cache and path.is_file():
        try:
            raw = json.loads(path.read_text())
            return {"one": {int(k): v for k, v in raw["one"].items()}, "one_se": {int(k): v for k, v in raw["one_se"].items()},
                    "two": {int(k): tuple(v) for k, v in raw["two"].items()}}
        except (OSError, ValueError, KeyError):
            pass
    from tdlab.train.regression import sample_stats  # lazy: regression imports this module

    st = sample_stats(task, [torch.Generator().manual_seed(int(seed))], int(n_prompts), int(L))
    lam, a = (v[0] for v in st.spectral())
    bayes = st.bayes[0]
    out: dict[str, dict[int, object]] = {"one": {}, "one_se": {}, "two": {}}
    for T in depths:
        a_inf = alpha_star_T(T, task)

        def f1(x: float, T=T) -> float:
            return float(_per_prompt(lam, a, bayes, x, -x, T).mean())

        res = minimize_scalar(f1, bounds=(0.05 * a_inf, 2.0 * a_inf), method="bounded", options={"xatol": 1e-9 * a_inf})
        al = float(res.x)
        out["one"][T] = al
        # delta-method Monte-Carlo error of the minimiser: per-prompt gradients by central differences
        h = 1e-4 * al
        g = (_per_prompt(lam, a, bayes, al + h, -al - h, T) - _per_prompt(lam, a, bayes, al - h, -al + h, T)) / (2 * h)
        curv = (f1(al + h) - 2 * f1(al) + f1(al - h)) / h**2
        out["one_se"][T] = float(g.std() / math.sqrt(g.numel()) / curv) if curv > 0 else float("nan")
        if T in starts and T > 1:
            # the loss is quadratic in alpha at fixed beta (App. E.1): minimise the profile over beta
            def profile(b: float, T=T) -> tuple[float, float]:
                hb = (a * _tied_sum(lam, b, T)).sum(-1)  # y_hat = alpha * hb
                alpha_b = float((hb * bayes).mean() / (hb * hb).mean())
                return float(((alpha_b * hb - bayes) ** 2).mean()), alpha_b

            b0 = starts[T][1]
            rb = minimize_scalar(lambda b: profile(b)[0], bounds=(2.0 * b0, 0.05 * b0) if b0 < 0 else (0.05 * b0, 2.0 * b0),
                                 method="bounded", options={"xatol": 1e-9 * abs(b0)})
            out["two"][T] = (profile(float(rb.x))[1], float(rb.x))
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: {str(T): v for T, v in d.items()} for k, d in out.items()}))
            tmp.replace(path)
        except OSError:
            pass
    return out


def _tied_sum(lam: Tensor, beta: float, T: int) -> Tensor:
    """``sum_{j<T} (1 + beta lambda)^j``, closed form ``((1 + beta lambda)^T - 1) / (beta lambda)``."""
    x = beta * lam
    small = x.abs() < 1e-6
    xs = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, T + x * (T * (T - 1) / 2), ((1.0 + xs) ** T - 1.0) / xs)


def _per_prompt(lam: Tensor, a: Tensor, bayes: Tensor, alpha: float, beta: float, T: int) -> Tensor:
    """Per-prompt ``(y_hat - y^Bayes)^2`` of the tied LCA_T at ``(alpha, beta)``: (N,)."""
    return ((alpha * a * _tied_sum(lam, beta, T)).sum(-1) - bayes) ** 2
