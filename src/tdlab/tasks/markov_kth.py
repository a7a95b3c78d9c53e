"""k-th order V-ary Markov sources: a fixed kernel, and the in-context (random-kernel) source.

Seed 003 ("Attention with Markov", Makkuva et al., talk), Part II: with memory ``k`` the next
symbol depends on the last ``k`` symbols, and when every sequence has its *own* transition kernel
the only way to predict well is in-context learning: match the current ``k``-context against the
history and count what followed it (the k-gram "context-matching" estimator of
:mod:`tdlab.theory.kgram`). Under a Dirichlet(alpha) prior on the kernel rows its add-alpha
(Laplace for alpha = 1) smoothed form is the Bayes-optimal predictor.

Conventions
-----------
* Tokens are in ``{0, ..., V-1}``; the transition kernel has shape ``(V**k, V)`` with
  ``kernel[s, v] = P(x_{t+1} = v | state s)``.
* **State encoding**: the state after ``x_1..x_t`` is the last ``k`` tokens read as a base-``V``
  number with the *most recent token last* (least significant digit):
  ``s_t = sum_{m=0}^{k-1} x_{t-m} V**m``. Appending ``v`` gives ``s_{t+1} = (s_t mod V**(k-1)) V + v``
  (the de Bruijn shift), so ``x_{t+1} = s_{t+1} mod V``. For V = 2, k = 2: state ``2 x_{t-1} + x_t``.
* The k-tuple chain on the ``V**k`` states is first order; its stationary law gives the law of the
  first ``k`` symbols (digits of the initial state, oldest first) of :class:`KthOrderMarkov`.

Sampling is vectorised over members, batch and positions exactly as in :mod:`tdlab.tasks.markov`:
step ``n`` is the random map ``f_n(s) = shift(s) + F_s^{-1}(u_n)`` (inverse CDF of row ``s`` of
that sequence's kernel at one shared uniform ``u_n``), and :func:`iterate_random_maps` composes all
prefixes in ``ceil(log2 T)`` gathers.

Dirichlet rows are drawn from Gamma variates generated *under the member's own generator*
(Marsaglia-Tsang with ``torch.randn``/``torch.rand``; ``torch._standard_gamma`` and
``torch.distributions`` take no generator), so the same seed gives the same kernels and tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import torch

from tdlab.seeding import derive_seed
from tdlab.tasks.markov import iterate_random_maps, stack_uniforms
from tdlab.theory.kgram import context_states, estimator_losses, incontext_bayes_loss_curve, kgram_probs

__all__ = [
    "InContextMarkov",
    "KthOrderMarkov",
    "conditional_entropy",
    "entropy_rate",
    "estimator_gap",
    "kernel_order",
    "sample_dirichlet",
    "sample_log_gamma",
    "state_chain",
    "stationary_law",
]

_INITS = ("stationary", "uniform")


# ----------------------------------------------------------------------------------------------
# State encoding (the states of a token sequence: tdlab.theory.kgram.context_states)


def _shift_base(k: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(V**k,)``: ``(s mod V**(k-1)) * V``, the successor of state ``s`` before adding the new token."""
    S = vocab**k
    return (torch.arange(S, device=device) % vocab ** (k - 1)) * vocab


def _digits(states: torch.Tensor, k: int, vocab: int) -> torch.Tensor:
    """``(...)`` states -> ``(..., k)`` tokens, oldest first."""
    w = vocab ** torch.arange(k - 1, -1, -1, device=states.device)
    return (states.unsqueeze(-1) // w) % vocab


# ----------------------------------------------------------------------------------------------
# Ground truth of a kernel (plain functions; batched over leading dims)


def kernel_order(kernel: torch.Tensor) -> int:
    """``k`` such that ``kernel.shape[-2:] == (V**k, V)``; raises if there is none (k >= 1)."""
    S, V = kernel.shape[-2], kernel.shape[-1]
    if V < 2:
        raise ValueError(f"vocabulary must have >= 2 symbols, got kernel shape {tuple(kernel.shape)}")
    k = round(math.log(S) / math.log(V)) if S > 1 else 0
    if k < 1 or V**k != S:
        raise ValueError(f"kernel shape {tuple(kernel.shape)} is not (V**k, V) with k >= 1")
    return k


def state_chain(kernel: torch.Tensor) -> torch.Tensor:
    """First-order transition matrix of the k-tuple chain.

    Args:
        kernel: ``(..., V**k, V)`` kernel.
    Returns:
        ``(..., V**k, V**k)``; ``Q[s, (s mod V**(k-1)) V + v] = kernel[s, v]``, zero elsewhere.
    """
    k = kernel_order(kernel)
    S, V = kernel.shape[-2:]
    idx = _shift_base(k, V, kernel.device)[:, None] + torch.arange(V, device=kernel.device)  # (S, V)
    Q = torch.zeros(*kernel.shape[:-1], S, dtype=kernel.dtype, device=kernel.device)
    return Q.scatter_(-1, idx.expand(kernel.shape), kernel)


def stationary_law(kernel: torch.Tensor) -> torch.Tensor:
    """Stationary law of the k-tuple chain (the law of ``k`` consecutive tokens in stationarity).

    Args:
        kernel: ``(..., V**k, V)`` kernel.
    Returns:
        ``(..., V**k)`` float64 law ``pi`` with ``pi Q = pi``; ``pi[s]`` is the probability of the
        token block whose base-V digits (oldest first) spell ``s``.
    Raises:
        ValueError if the stationary law is not unique (reducible chain).
    """
    Q = state_chain(kernel.double())
    S = Q.shape[-1]
    # Solve (Q^T - I) pi = 0 with one equation replaced by sum(pi) = 1.
    A = Q.transpose(-1, -2) - torch.eye(S, dtype=Q.dtype, device=Q.device)
    A[..., -1, :] = 1.0
    b = torch.zeros(*Q.shape[:-1], dtype=Q.dtype, device=Q.device)
    b[..., -1] = 1.0
    pi, info = torch.linalg.solve_ex(A, b)
    if bool((info != 0).any()) or not bool(torch.isfinite(pi).all()) or bool((pi < -1e-9).any()):
        raise ValueError("the k-tuple chain has no unique stationary law (reducible kernel)")
    pi = pi.clamp_min(0.0)
    return pi / pi.sum(-1, keepdim=True)


def _row_entropy(kernel: torch.Tensor) -> torch.Tensor:
    """``(..., S, V)`` -> ``(..., S)`` entropies of the rows in nats (0 log 0 = 0)."""
    P = kernel.double()
    return -torch.special.xlogy(P, P).sum(-1)


def entropy_rate(kernel: torch.Tensor) -> torch.Tensor:
    """``H(x_{t+1} | x_{t-k+1..t}) = sum_s pi(s) H(kernel[s])`` in nats, computed exactly from the
    stationary law: the loss of the Bayes predictor (the kernel itself) in stationarity.

    Args:
        kernel: ``(..., V**k, V)``.
    Returns:
        ``(...)`` float64.
    """
    return (stationary_law(kernel) * _row_entropy(kernel)).sum(-1)


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(p, p).sum(-1)


def conditional_entropy(kernel: torch.Tensor, order: int) -> torch.Tensor:
    """``H(x_{t+1} | last `order` tokens)`` in stationarity, in nats.

    The asymptotic loss of the order-``order`` in-context estimator on this fixed source (it
    converges to the stationary conditional law of that order): ``order = 0`` gives the marginal
    entropy ``H(x)``, ``order >= k`` the entropy rate.

    Args:
        kernel: ``(..., V**k, V)``.
        order: ``j >= 0``.
    Returns:
        ``(...)`` float64.
    """
    k = kernel_order(kernel)
    V = kernel.shape[-1]
    if order < 0:
        raise ValueError(f"order must be >= 0, got {order}")
    if order >= k:
        return entropy_rate(kernel)
    joint = stationary_law(kernel)[..., :, None] * kernel.double()  # (..., S, V): P(state, next)
    # state = high * V**order + low, low = the last `order` tokens: sum out `high`.
    joint = joint.reshape(*joint.shape[:-2], V ** (k - order), V**order, V).sum(-3)
    return _entropy(joint.flatten(-2)) - _entropy(joint.sum(-1))


# ----------------------------------------------------------------------------------------------
# Generator-aware Gamma / Dirichlet draws


def sample_log_gamma(
    alpha: float, size: Sequence[int], generator: torch.Generator, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """Logs of iid Gamma(alpha, 1) variates, drawn from ``generator`` only (deterministic per seed).

    ``alpha = 1``: exponentials ``-log(1 - U)``. Otherwise Marsaglia & Tsang (2000) for shape
    ``a >= 1``, and for ``alpha < 1`` ``Gamma(alpha) = Gamma(alpha + 1) * U**(1/alpha)``, kept in
    log space so that small ``alpha`` does not underflow to 0.

    Args:
        alpha: shape parameter > 0.
        size: output shape.
    Returns:
        ``size`` float64 tensor of ``log G``.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    size = tuple(int(n) for n in size)
    if alpha == 1.0:
        # Gamma(1) = Exp(1) = -log(1 - U): one draw per variate, no rejection.
        u = torch.rand(size, generator=generator, dtype=torch.float64, device=device)
        return torch.log(-torch.log1p(-u))
    a = alpha if alpha >= 1.0 else alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(size, dtype=torch.float64, device=device).flatten()
    pending = torch.arange(out.numel(), device=device)
    # Rejection rounds draw only for the still-pending entries (acceptance >= 95%), in a fixed
    # order, so the number and order of draws is a function of the generator state alone.
    while pending.numel() > 0:
        n = pending.numel()
        x = torch.randn(n, generator=generator, dtype=torch.float64, device=device)
        u = 1.0 - torch.rand(n, generator=generator, dtype=torch.float64, device=device)  # (0, 1]
        v = (1.0 + c * x) ** 3
        ok = v > 0
        vs = torch.where(ok, v, torch.ones_like(v))
        ok &= torch.log(u) < 0.5 * x * x + d - d * vs + d * torch.log(vs)
        out[pending[ok]] = math.log(d) + torch.log(vs[ok])
        pending = pending[~ok]
    if alpha < 1.0:
        u = 1.0 - torch.rand(out.numel(), generator=generator, dtype=torch.float64, device=device)
        out = out + torch.log(u) / alpha
    return out.reshape(size)


def sample_dirichlet(
    alpha: float, size: Sequence[int], generator: torch.Generator, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """Symmetric Dirichlet(alpha) vectors along the last axis, from ``generator`` only.

    Args:
        alpha: concentration > 0 (1 = uniform on the simplex).
        size: ``(..., V)``; each ``[..., :]`` slice is one Dirichlet vector of length ``V``.
    Returns:
        ``size`` float64 tensor, rows summing to 1 (normalised Gamma variates, done as a softmax
        of their logs).
    """
    return torch.softmax(sample_log_gamma(alpha, size, generator, device), dim=-1)


# ----------------------------------------------------------------------------------------------
# Shared sampler


def _sample_from_kernels(kernels: torch.Tensor, u: torch.Tensor, init: str, pi: torch.Tensor | None) -> torch.Tensor:
    """Tokens of k-th order chains driven by uniforms.

    Args:
        kernels: ``(S, V)`` or ``(E, B, S, V)`` float64 kernels (one per sequence).
        u: ``(E, B, T)`` uniforms; ``u[..., j]`` drives token ``j`` for ``j >= k``; the first ``k``
            tokens use ``u[..., :k]`` (uniform init) or ``u[..., 0]`` (stationary init).
        init: ``"stationary"`` (first state from ``pi``) or ``"uniform"`` (first k tokens iid uniform).
        pi: ``(S,)`` or ``(E, B, S)`` stationary laws, required for the stationary init.
    Returns:
        ``(E, B, T)`` int64 tokens.
    """
    V = kernels.shape[-1]
    k = kernel_order(kernels)
    T = u.shape[-1]
    if init == "uniform":
        first = (u[..., :k] * V).long().clamp_(max=V - 1)  # (E, B, min(k, T))
        if k >= T:
            return first
        s0 = (first * V ** torch.arange(k - 1, -1, -1, device=u.device)).sum(-1)
    else:
        if pi is None:
            raise ValueError("pi: the stationary init needs the stationary laws")
        # Inverse CDF of pi; counting cdf[:-1] <= u keeps the index in range despite rounding.
        cdf = pi.cumsum(-1)[..., :-1]
        s0 = (u[..., 0, None] >= cdf).sum(-1)
        first = _digits(s0, k, V)
        if k >= T:
            return first[..., :T]
    # Map of step j: f_j(s) = shift(s) + (number of cdf[s, :V-1] <= u_j). The uniforms are float32
    # (stack_uniforms), so probabilities are resolved to 2**-24.
    kcdf = kernels.cumsum(-1)[..., :-1]  # (..., S, V-1)
    if kcdf.dim() == 4:
        kcdf = kcdf[:, :, None]  # (E, B, 1, S, V-1) broadcast over steps
    nxt = (u[..., k:, None, None] >= kcdf).sum(-1)  # (E, B, T-k, S)
    maps = _shift_base(k, V, u.device) + nxt
    states = iterate_random_maps(maps, s0)[..., 1:]  # (E, B, T-k)
    return torch.cat([first, states % V], dim=-1)


def _check_sizes(gens: Sequence[torch.Generator], batch: int, length: int) -> None:
    if len(gens) < 1:
        raise ValueError("need at least one generator (one per ensemble member)")
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be >= 1, got batch={batch}, length={length}")


def _check_init(init: str) -> None:
    if init not in _INITS:
        raise ValueError(f"init must be one of {_INITS}, got {init!r}")


# ----------------------------------------------------------------------------------------------
# Tasks


class KthOrderMarkov:
    """Fixed k-th order V-ary Markov source (seed 003, Part II: "Memory = k").

    Args:
        kernel: ``(V**k, V)`` transition kernel, rows summing to 1 (state encoding: module doc).
        init: law of the first ``k`` tokens: ``"stationary"`` (default; the stationary law of the
            k-tuple chain, so the whole sequence is stationary) or ``"uniform"`` (iid uniform).

    Attributes:
        k, vocab: order and alphabet size ``V``.
        kernel: ``(V**k, V)`` float64.
        pi: ``(V**k,)`` stationary law of the k-tuple chain.
    """

    def __init__(self, kernel: torch.Tensor | Sequence[Sequence[float]], init: str = "stationary") -> None:
        P = torch.as_tensor(kernel, dtype=torch.float64).clone()
        if P.dim() != 2:
            raise ValueError(f"kernel must be 2-D (V**k, V), got shape {tuple(P.shape)}")
        self.k = kernel_order(P)
        self.vocab = P.shape[-1]
        if bool((P < 0).any()) or not torch.allclose(P.sum(-1), torch.ones(P.shape[0], dtype=P.dtype), atol=1e-6):
            raise ValueError("kernel rows must be probability vectors")
        _check_init(init)
        self.kernel = P / P.sum(-1, keepdim=True)
        self.init = init
        self.pi = stationary_law(self.kernel)

    @classmethod
    def random(
        cls,
        k: int,
        vocab: int = 2,
        generator: torch.Generator | None = None,
        alpha: float = 1.0,
        init: str = "stationary",
    ) -> KthOrderMarkov:
        """A source whose kernel rows are iid Dirichlet(alpha), drawn from ``generator``
        (a fresh default-seeded one if None)."""
        if k < 1 or vocab < 2:
            raise ValueError(f"need k >= 1 and vocab >= 2, got k={k}, vocab={vocab}")
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        return cls(sample_dirichlet(alpha, (vocab**k, vocab), g), init=init)

    def __repr__(self) -> str:
        return f"KthOrderMarkov(k={self.k}, vocab={self.vocab}, init={self.init!r})"

    # --- ground truth -------------------------------------------------------------------------
    def entropy_rate(self) -> float:
        """Bayes loss in stationarity, nats (exact, from the stationary law)."""
        return float(entropy_rate(self.kernel))

    def conditional_entropy(self, order: int) -> float:
        """Stationary ``H(x_{t+1} | last `order` tokens)``: asymptotic loss of the order-``order``
        estimator (e.g. the order-1 estimator on a k = 2 source)."""
        return float(conditional_entropy(self.kernel, order))

    def baselines(self) -> dict[str, float]:
        """Ground-truth losses in nats: ``entropy_rate`` (Bayes predictor = the kernel),
        ``marginal_entropy`` (best order-0 predictor), ``order{j}_entropy`` for ``j = 0..k`` (best
        order-j predictor in stationarity; ``order{k}`` = entropy rate), ``log_vocab``."""
        out = {"entropy_rate": self.entropy_rate(), "marginal_entropy": self.conditional_entropy(0)}
        out.update({f"order{j}_entropy": self.conditional_entropy(j) for j in range(self.k + 1)})
        out["log_vocab"] = math.log(self.vocab)
        return out

    def optimal_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Bayes-optimal next-token law given the prefix.

        Args:
            tokens: ``(..., T)``.
        Returns:
            ``(..., T, V)`` float64; entry ``i`` is ``P(x_{i+1} | x_0..x_i)``: the kernel row of the
            current state once ``k`` tokens are seen, and before that the conditional law of the
            initial block (stationary init) or uniform (uniform init).
        """
        k, V = self.k, self.vocab
        x = tokens.long()
        T = x.shape[-1]
        states = context_states(x, k, V)
        out = self.kernel.to(x.device)[states.clamp_min(0)]
        for i in range(min(k - 1, T)):
            if self.init == "uniform":
                out[..., i, :] = 1.0 / V
                continue
            # Law of the first i+2 tokens (oldest = most significant) from pi.
            m = i + 1
            law = self.pi.to(x.device).reshape(V ** (m + 1), V ** (k - m - 1)).sum(-1).reshape(V**m, V)
            cond = law / law.sum(-1, keepdim=True)
            prefix = (x[..., :m] * V ** torch.arange(m - 1, -1, -1, device=x.device)).sum(-1)
            out[..., i, :] = cond[prefix]
        return out

    def bayes_loss_curve(self, length: int) -> torch.Tensor:
        """Exact expected loss of the Bayes predictor at each position.

        Returns:
            ``(length - 1,)`` float64; entry ``i`` is ``E[-log P(x_{i+1} | x_0..x_i)]`` (0-based):
            block-entropy differences ``H(x_0..x_{i+1}) - H(x_0..x_i)`` for ``i < k - 1`` (``log V``
            with uniform init), then ``mu_i . H(rows)`` with ``mu_i`` the law of the state after
            ``x_i`` (``= pi``, hence the entropy rate, with stationary init).
        """
        k, V = self.k, self.vocab
        rowH = _row_entropy(self.kernel)
        Q = state_chain(self.kernel)
        out = torch.empty(max(length - 1, 0), dtype=torch.float64)
        block = [0.0] + [float(_entropy(self.pi.reshape(V**m, V ** (k - m)).sum(-1))) for m in range(1, k + 1)]
        mu = self.pi.clone() if self.init == "stationary" else torch.full((V**k,), 1.0 / V**k, dtype=torch.float64)
        for i in range(length - 1):
            if i < k - 1:
                out[i] = block[i + 2] - block[i + 1] if self.init == "stationary" else math.log(V)
            else:
                out[i] = mu @ rowH
                mu = mu @ Q
        return out

    # --- sampling -----------------------------------------------------------------------------
    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """Sequences from the source.

        Args:
            gens: one generator per ensemble member (``E = len(gens)``); member ``e``'s data come
                from ``gens[e]`` alone.
            batch: sequences per member ``B``.
            length: tokens per sequence ``T``.
        Returns:
            ``(E, B, T)`` int64 tokens in ``{0..V-1}``.
        """
        _check_sizes(gens, batch, length)
        u = stack_uniforms(gens, (batch, length), device)
        return _sample_from_kernels(self.kernel.to(device), u, self.init, self.pi.to(device))


class InContextMarkov:
    """In-context k-th order Markov source (seed 003, Part II: "ICL for kth-order Markov").

    Every sequence draws its own kernel, rows iid Dirichlet(alpha) (``alpha = 1``: uniform on the
    simplex), then the tokens. Nothing about the kernel is shared across sequences, so a model can
    only predict well by estimating the kernel from its context.

    Args:
        k: order (>= 1).
        vocab: alphabet size ``V`` (binary default).
        alpha: Dirichlet concentration > 0.
        init: law of the first ``k`` tokens: ``"uniform"`` (default: iid uniform, independent of the
            kernel, so they carry no information about it and the add-alpha k-gram estimator is
            *exactly* Bayes-optimal at every position) or ``"stationary"`` (each sequence's own
            stationary law; then the first block carries a little information about the kernel
            and add-alpha is only asymptotically Bayes).
    """

    def __init__(self, k: int, vocab: int = 2, alpha: float = 1.0, init: str = "uniform") -> None:
        if k < 1 or vocab < 2:
            raise ValueError(f"need k >= 1 and vocab >= 2, got k={k}, vocab={vocab}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        _check_init(init)
        self.k, self.vocab, self.alpha, self.init = int(k), int(vocab), float(alpha), init

    def __repr__(self) -> str:
        return f"InContextMarkov(k={self.k}, vocab={self.vocab}, alpha={self.alpha}, init={self.init!r})"

    # --- ground truth -------------------------------------------------------------------------
    def baselines(self) -> dict[str, float]:
        """``log_vocab``: the loss of the uniform predictor, which is also the Bayes loss of the
        first ``k`` predictions (uniform init). Position-dependent Bayes losses:
        :meth:`bayes_loss_curve`, :func:`tdlab.theory.kgram.incontext_bayes_loss_exact`."""
        return {"log_vocab": math.log(self.vocab)}

    def optimal_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Bayes-optimal next-token law (uniform init): the add-alpha k-gram estimator.

        Args:
            tokens: ``(..., T)``.
        Returns:
            ``(..., T, V)`` float64, entry ``i`` predicting ``x_{i+1}`` from ``x_0..x_i``.
        """
        return kgram_probs(tokens, self.k, self.vocab, beta=self.alpha)

    def bayes_loss_curve(
        self, length: int, num_sequences: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Monte-Carlo Bayes loss by position (Rao-Blackwellised, see
        :func:`tdlab.theory.kgram.incontext_bayes_loss_curve`).

        Returns:
            ``(mean, sem)``, each ``(length - 1,)`` float64.
        """
        if self.init != "uniform":
            raise ValueError("the add-alpha estimator is the Bayes predictor only for init='uniform'")
        x = self.sample([generator], num_sequences, length)[0]
        return incontext_bayes_loss_curve(x, self.k, self.vocab, self.alpha)

    def asymptotic_bayes_loss(self, num_kernels: int, generator: torch.Generator) -> tuple[float, float]:
        """``E_P[entropy_rate(P)]`` over kernels from the prior: the limit of the Bayes loss as the
        position grows (the posterior concentrates on the sequence's kernel). Exact entropy rate
        per kernel, Monte Carlo over ``num_kernels`` kernels.

        Returns:
            ``(mean, sem)`` in nats.
        """
        P = sample_dirichlet(self.alpha, (num_kernels, self.vocab**self.k, self.vocab), generator)
        h = entropy_rate(P)
        return float(h.mean()), float(h.std() / math.sqrt(num_kernels))

    # --- sampling -----------------------------------------------------------------------------
    def sample_with_kernels(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequences and the kernels that generated them.

        Member ``e`` draws from ``gens[e]`` alone: first its ``(B, V**k, V)`` kernels, then
        ``(B, T)`` uniforms driving the tokens.

        Returns:
            ``tokens`` ``(E, B, T)`` int64 and ``kernels`` ``(E, B, V**k, V)`` float64.
        """
        _check_sizes(gens, batch, length)
        S, V = self.vocab**self.k, self.vocab
        kernels = torch.stack([sample_dirichlet(self.alpha, (batch, S, V), g, device) for g in gens])
        u = stack_uniforms(gens, (batch, length), device)
        pi = stationary_law(kernels) if self.init == "stationary" else None
        return _sample_from_kernels(kernels, u, self.init, pi), kernels

    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """``(E, B, T)`` int64 tokens, one fresh kernel per sequence (see :meth:`sample_with_kernels`)."""
        return self.sample_with_kernels(gens, batch, length, device)[0]


# Sequences of the gap's one fixed draw: its Monte-Carlo error (~0.002 nats at T = 64) is a small fraction of
# the gaps (0.034–0.064 nats for k <= 4) it sizes.
ESTIMATOR_GAP_SEQUENCES = 512


@lru_cache(maxsize=64)
def estimator_gap(k: int, lower: int, tokens: int, alpha: float, sequences: int = ESTIMATOR_GAP_SEQUENCES) -> float:
    """``E[loss of the order-lower estimator − loss of the order-k one]``, nats per token, on the order-``k``
    in-context source with Dirichlet(α) rows, for sequences of ``tokens`` tokens (``tokens − 1`` predictions):
    the gap of the setting, drawn once from a fixed stream (``sequences`` sequences of
    :class:`InContextMarkov`, the estimators :func:`tdlab.theory.kgram.estimator_losses`)."""
    if not 0 <= lower <= k:
        raise ValueError(f"lower must lie in 0..k={k}, got {lower}")
    g = torch.Generator().manual_seed(derive_seed(0, "planted-estimator-gap", k, tokens))
    x = InContextMarkov(k, 2, alpha).sample([g], sequences, tokens)
    est = estimator_losses(x, k, 2, alpha)
    return float((est[lower] - est[k]).mean())
