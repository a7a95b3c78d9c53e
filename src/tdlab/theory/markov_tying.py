"""The bad local minimum θ_π of the single-layer transformer, and the exact population loss around it.

Seed 003 ("Attention with Markov", Makkuva et al., talk), Part I, "Theoretical results": for a
binary first-order chain with ``p + q > 1`` and tied input/output embeddings (``a = e``) there is
an explicitly constructed ``θ_π`` with

(i) ``θ_π`` a bad local minimum, ``L(θ_π) > L(θ_*)``;  (ii) ``f_θπ(x_1^n) = P(x_{n+1} = 1) = π_1``;
(iii) ``L(θ_π) = H(π)``;  (iv) ``∇L(θ_π) = 0``;

and without weight tying the same point is a saddle. "Intuition" slide: ``a = 0`` and
``σ(b) = π_1``. The model is seed 000's Sec. 2 single-layer transformer (``GPT(arch="sec2")``).

Construction (:func:`set_theta_pi`): ``e = a = 0`` and ``b = log(π_1/π_0) = log(p/q)``. Then every
token embedding ``x_n e + p_n = p_n`` is token-free, so ``z_n`` depends on ``n`` only and the logit
is ``<a, z_n> + b = b``: the prediction is the marginal ``π_1`` at every position, whatever the
other parameters (positions ``p_n``, ``W_{Q,K,V,O}``, ``W_1``, ``W_2``). ``others="zero"`` sets those
to zero as well (the canonical point, whose Hessian has a closed form); ``others="keep"`` leaves
them where they are (any point of the θ_π family).

Why (iv) and the Hessian signs (``ℓ(s, y)`` the logistic loss of logit ``s``, ``ℓ' = σ(s) - y``,
``ℓ'' = σ(1-σ)``; every position of the stationary chain has the same law):

* ``∇L = E[ℓ' ∇logit]``; ``∇logit`` at θ_π is ``(1 for b, z_n for a or e, 0 for the rest)``, a
  function of ``n`` only, and ``E[ℓ' | n] = π_1 - P(x_{n+1} = 1) = 0``. So ``∇L(θ_π) = 0``.
* ``∇²L = E[ℓ'' ∇logit ∇logit^T] + E[ℓ' ∇²logit]``. With ``z_n ⊇ x_n e`` (residual stream),
  ``E[ℓ' x_n] = π_1² - π_1(1-q) = π_0 π_1 (p+q-1) =: c``. Tied (``logit = <e, z_n(e)> + b``):
  ``∂²/∂e² ⊇ 2 x_n I``, a block ``2c I``, positive iff ``p + q > 1``. Untied: the ``(a, e)`` block is
  ``[[G, c I], [c I, 0]]`` (G the Gauss-Newton part), which has a negative eigenvalue whenever
  ``c != 0``: a saddle for every ``p + q != 1``.
* At the canonical point (``others="zero"``) everything else vanishes and the spectrum is exact
  (:func:`theta_pi_spectrum`): tied ``{π_0 π_1 (b), 2c (×d), 0 (rest)}``; untied
  ``{π_0 π_1, +c (×d), -c (×d), 0 (rest)}``. The tied Hessian is positive *semi*-definite (flat
  directions: with ``e = 0`` the weights behind the embedding do not reach the logit), the
  talk's "(almost) positive-definite".

The population loss (:func:`population_loss`) is Eq. (1) of seed 000 computed exactly: all ``2^(N+1)``
binary sequences, weighted by their stationary-chain probabilities, loss averaged over the ``N``
next-token predictions. Hessians (:func:`hessian`) are exact (double backward, float64) on the
flattened parameters of one member.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, TypeVar, cast, overload

import numpy as np
import torch
import torch.nn.functional as F

from tdlab.theory.markov_chain import entropy_rate, marginal_entropy, stationary

__all__ = [
    "enumerate_chain",
    "flat_loss",
    "gradient",
    "hessian",
    "hessian_extremes",
    "landscape_readings",
    "loss_closed_form",
    "normalised_position",
    "perturbation_probe",
    "population_loss",
    "set_theta_pi",
    "switching_curvature",
    "theta_pi_bias",
    "theta_pi_spectrum",
]

Others = Literal["zero", "keep"]


class Sec2Config(Protocol):
    """What the θ_π functions read of a model's config (``GPTConfig``): its architecture and its depth."""

    @property
    def arch(self) -> str: ...  # "sec2" for the model θ_π is built for

    @property
    def layers(self) -> int: ...


class Sec2Model(Protocol):
    """What the θ_π functions use of a seed 000 ensemble (``GPT``, a torch module): cfg, members, e/a/b, cache."""

    def __init__(self, cfg: Sec2Config, seeds: list[int]) -> None: ...  # type(model)(cfg, seeds): a new ensemble

    @property
    def cfg(self) -> Sec2Config: ...

    @property
    def members(self) -> int: ...  # E

    @property
    def seeds(self) -> Sequence[int]: ...  # one per member

    @property
    def e(self) -> torch.Tensor: ...  # (E, d) token embedding vector

    @property
    def a(self) -> torch.Tensor | None: ...  # (E, d) output vector; None when tied (a = e)

    @property
    def b(self) -> torch.Tensor | None: ...  # (E,) output bias

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor: ...  # (E, B, T) -> logits (E, B, T, 2)

    def cache(self, names: Iterable[str] | None = None) -> AbstractContextManager[dict[str, torch.Tensor]]: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> object: ...

    def double(self) -> Sec2Model: ...


_M = TypeVar("_M", bound=Sec2Model)


def enumerate_chain(p: float, q: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All binary sequences of ``length`` symbols and their probabilities under the stationary chain.

    Returns:
        ``tokens (2**length, length)`` int64 (sequence ``i`` spells ``i`` in binary, oldest first) and
        ``probs (2**length,)`` float64, ``π(x_1) Π P(x_{n+1} | x_n)``, summing to 1.
    """
    if not 1 <= length <= 20:
        raise ValueError(f"length must be in [1, 20] to enumerate 2**length sequences, got {length}")
    pi0, pi1 = stationary(p, q)
    idx = torch.arange(2**length)
    tokens = (idx[:, None] >> torch.arange(length - 1, -1, -1)) & 1
    P = torch.tensor([[1 - p, p], [q, 1 - q]], dtype=torch.float64)
    logp = torch.log(torch.tensor([pi0, pi1], dtype=torch.float64))[tokens[:, 0]]
    if length > 1:
        logp = logp + torch.log(P[tokens[:, :-1], tokens[:, 1:]]).sum(-1)
    return tokens, logp.exp()


def theta_pi_bias(p: float, q: float) -> float:
    """``b = log(π_1 / π_0) = log(p / q)``, so that ``σ(b) = π_1`` (talk, "Intuition")."""
    pi0, pi1 = stationary(p, q)
    return math.log(pi1 / pi0)


def set_theta_pi(model: _M, p: float, q: float, others: Others = "zero") -> _M:
    """Move every member of a ``sec2`` model to θ_π (in place) and return it.

    ``e = 0`` (and ``a = 0`` when untied), ``b = log(p/q)``; ``others="zero"`` also zeroes the
    positions and every weight matrix (the canonical point), ``"keep"`` leaves them as they are.
    """
    if model.cfg.arch != "sec2":
        raise ValueError("θ_π is constructed for the Sec. 2 model (arch='sec2')")
    if others not in ("zero", "keep"):
        raise ValueError(f"others must be 'zero' or 'keep', got {others!r}")
    if model.b is None:
        raise ValueError("θ_π sets the output bias b: the model needs one (has_head_bias)")
    with torch.no_grad():
        if others == "zero":
            for prm in model.parameters():
                prm.zero_()
        model.e.zero_()
        if model.a is not None:
            model.a.zero_()
        model.b.fill_(theta_pi_bias(p, q))
    return model


def _attention_names(model: Sec2Model) -> list[str]:
    return [f"blocks.{i}.attn.pattern" for i in range(model.cfg.layers)]


def _forward_twice_differentiable(model: Sec2Model, tokens: torch.Tensor) -> torch.Tensor:
    # Recording the attention pattern makes the model use its explicit softmax path instead of
    # the fused SDPA kernel, whose backward is not differentiable again (needed for Hessians).
    with model.cache(_attention_names(model)):
        return model(tokens)


def population_loss(model: Sec2Model, p: float, q: float, n: int, per_position: bool = False) -> torch.Tensor:
    """Exact population loss Eq. (1) of every member over ``n`` next-token predictions.

    Enumerates all ``2**(n+1)`` sequences ``x_1..x_{n+1}`` of the stationary chain; differentiable in
    the model's parameters (computed in the model's dtype; use ``model.double()`` for precision).

    Returns:
        ``(E,)`` losses in nats, or ``(E, n)`` per position when ``per_position``.
    """
    dev = next(model.parameters()).device
    tokens, _probs = _enumerated(p, q, n, dev)
    x = tokens.unsqueeze(0).expand(model.members, *tokens.shape)
    logits = _forward_twice_differentiable(model, x[..., :-1])  # (E, S, n, 2)
    per_pos = _weighted_nll(logits, p, q, n, dev, reduce=False)  # (E, n)
    return per_pos if per_position else per_pos.mean(-1)


def _single_member(model: Sec2Model, member: int) -> tuple[Sec2Model, list[str], list[torch.Size]]:
    """A float64 copy of member ``member`` (the caller's model is left untouched)."""
    one = type(model)(model.cfg, [model.seeds[member]]).double()
    one.load_state_dict({k: v[member : member + 1].detach().double().clone() for k, v in model.state_dict().items()})
    names = [k for k, _ in one.named_parameters()]
    shapes = [prm.shape for _, prm in one.named_parameters()]
    return one, names, shapes


def flat_loss(
    model: Sec2Model, p: float, q: float, n: int, member: int = 0
) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor, list[str]]:
    """The population loss of member ``member`` as a function of its flattened parameters.

    Returns:
        ``(fn, theta0, names)``: ``fn(theta)`` a scalar, ``theta0`` the member's parameters
        (float64, in ``named_parameters`` order), ``names`` one entry per coordinate
        (``"blocks.0.attn.W_V.weight[3]"``).
    """
    one, names, shapes = _single_member(model, member)
    sizes = [math.prod(s) for s in shapes]
    theta0 = torch.cat([prm.detach().reshape(-1) for prm in one.parameters()]).double()
    coord = [f"{nm}[{i}]" for nm, sz in zip(names, sizes, strict=True) for i in range(sz)]

    def fn(theta: torch.Tensor) -> torch.Tensor:
        parts = torch.split(theta, sizes)
        params = {nm: t.reshape(s) for nm, t, s in zip(names, parts, shapes, strict=True)}
        with one.cache(_attention_names(one)):
            out = torch.func.functional_call(cast(torch.nn.Module, one), params, (_all_tokens(p, q, n, theta.device),))
        return _weighted_nll(out, p, q, n, theta.device)[0]

    return fn, theta0, coord


_TOKENS_CACHE: dict[tuple[float, float, int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _enumerated(p: float, q: float, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (float(p), float(q), int(n), str(device))
    if key not in _TOKENS_CACHE:
        tokens, probs = enumerate_chain(p, q, n + 1)
        _TOKENS_CACHE.clear()
        _TOKENS_CACHE[key] = (tokens.to(device), probs.to(device))
    return _TOKENS_CACHE[key]


def _all_tokens(p: float, q: float, n: int, device: torch.device) -> torch.Tensor:
    return _enumerated(p, q, n, device)[0][None, :, :-1]


def _weighted_nll(
    logits: torch.Tensor, p: float, q: float, n: int, device: torch.device, reduce: bool = True
) -> torch.Tensor:
    """``(E, 2**(n+1), n, 2)`` logits of all sequences -> ``(E,)`` expected loss (``(E, n)`` unreduced)."""
    tokens, probs = _enumerated(p, q, n, device)
    tgt = tokens[None, :, 1:].expand(logits.shape[0], -1, -1)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    per_pos = (nll.reshape(logits.shape[0], -1, n) * probs.to(nll.dtype)[None, :, None]).sum(1)
    return per_pos.mean(-1) if reduce else per_pos


def gradient(model: Sec2Model, p: float, q: float, n: int, member: int = 0) -> torch.Tensor:
    """``∇L`` of member ``member`` at its current parameters, flattened, float64."""
    fn, theta0, _ = flat_loss(model, p, q, n, member)
    theta = theta0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(theta), theta)
    return g


def hessian(model: Sec2Model, p: float, q: float, n: int, member: int = 0, chunk: int = 16) -> torch.Tensor:
    """Exact Hessian ``∇²L`` (float64, symmetrised) of member ``member``'s population loss.

    Double backward, ``chunk`` Hessian rows per batched (vmapped) backward pass; meant for small
    models (``d <= 4``: a few hundred parameters) and ``n <= 10``.
    """
    fn, theta0, _ = flat_loss(model, p, q, n, member)
    theta = theta0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(theta), theta, create_graph=True)
    P = theta.numel()
    eye = torch.eye(P, dtype=g.dtype, device=g.device)
    rows = []
    for i in range(0, P, chunk):
        (block,) = torch.autograd.grad(g, theta, eye[i : i + chunk], retain_graph=True, is_grads_batched=True)
        rows.append(block.detach().cpu())
    H = torch.cat(rows)
    return 0.5 * (H + H.T)


def hessian_extremes(H: torch.Tensor) -> tuple[float, float]:
    """``(λ_min, λ_max)`` of a symmetric matrix."""
    ev = torch.linalg.eigvalsh(H)
    return float(ev[0]), float(ev[-1])


def switching_curvature(p: float, q: float) -> float:
    """``c = E[(σ(b) - x_{n+1}) x_n] = π_0 π_1 (p + q - 1)`` at θ_π (module docstring): the
    curvature the residual path ``x_n e`` contributes; positive iff ``p + q > 1``."""
    pi0, pi1 = stationary(p, q)
    return pi0 * pi1 * (p + q - 1.0)


def theta_pi_spectrum(p: float, q: float, d: int, tied: bool, num_params: int) -> torch.Tensor:
    """Exact Hessian eigenvalues at the canonical θ_π (``others="zero"``), ascending.

    tied: ``π_0 π_1`` once, ``2c`` ``d`` times, 0 for the remaining coordinates; untied: ``π_0 π_1``
    once, ``±c`` ``d`` times each, 0 for the rest (``c`` = :func:`switching_curvature`).

    Args:
        num_params: total number of parameters of the model (fills the zero eigenvalues).
    """
    pi0, pi1 = stationary(p, q)
    c = switching_curvature(p, q)
    vals = [pi0 * pi1] + ([2 * c] * d if tied else [c] * d + [-c] * d)
    if num_params < len(vals):
        raise ValueError(f"num_params={num_params} is smaller than the {len(vals)} nonzero eigenvalues")
    vals += [0.0] * (num_params - len(vals))
    return torch.tensor(sorted(vals), dtype=torch.float64)


def perturbation_probe(
    model: Sec2Model,
    p: float,
    q: float,
    n: int,
    radius: float,
    directions: int,
    generator: torch.Generator,
    member: int = 0,
    H: torch.Tensor | None = None,
) -> tuple[float, float]:
    """Loss change along random directions: ``min_u L(θ + r u) - L(θ)`` over ``directions`` random
    unit vectors ``u`` (and ``-u``), together with the same along the Hessian's bottom eigenvector.

    A local minimum gives ``>= 0`` (up to rounding) for small ``r``; a saddle gives a clearly
    negative value along its bottom eigenvector.

    Args:
        H: the member's Hessian if already computed (:func:`hessian`).
    Returns:
        ``(min over random directions, change along the bottom eigenvector)`` in nats.
    """
    fn, theta0, _ = flat_loss(model, p, q, n, member)
    with torch.no_grad():
        base = float(fn(theta0))
        u = torch.randn(directions, theta0.numel(), generator=generator, dtype=torch.float64)
        u = u / u.norm(dim=1, keepdim=True)
        rnd = min(float(fn(theta0 + s * radius * ui)) - base for ui in u for s in (1.0, -1.0))
    if H is None:
        H = hessian(model, p, q, n, member)
    v = torch.linalg.eigh(H).eigenvectors[:, 0]
    with torch.no_grad():
        bottom = min(float(fn(theta0 + s * radius * v)) - base for s in (1.0, -1.0))
    return rnd, bottom


def landscape_readings(
    model: Sec2Model,
    p: float,
    q: float,
    n: int,
    radius: float,
    directions: int,
    generators: Sequence[torch.Generator],
    canonical: tuple[int, bool] | None = None,
) -> list[dict[str, float]]:
    """The landscape at a model's point (θ_π in seed 003 Part I), read member by member on the exact loss.

    Per member ``e`` (one generator each, for :func:`perturbation_probe`'s random directions): ``loss``
    (:func:`population_loss`), ``grad_max`` (``max_i |∂L/∂θ_i|``), ``eig_min`` / ``eig_max`` of the exact
    Hessian (:func:`hessian`), ``num_params``, and ``probe_random`` / ``probe_bottom`` (the loss change at
    ``radius`` along random directions and along the Hessian's bottom eigenvector). With
    ``canonical = (d, tied)`` (the canonical point, ``others="zero"``) also ``spectrum_err``, the largest
    ``|λ − closed form|`` against :func:`theta_pi_spectrum`.

    Returns:
        one dict of float readings per member, in member order.
    """
    losses = population_loss(model, p, q, n).tolist()
    out: list[dict[str, float]] = []
    for e, gen in enumerate(generators):
        H = hessian(model, p, q, n, e)
        ev = torch.linalg.eigvalsh(H)
        g = gradient(model, p, q, n, e)
        rnd, bottom = perturbation_probe(model, p, q, n, radius, directions, gen, e, H=H)
        vals = {
            "loss": losses[e],
            "grad_max": float(g.abs().max()),
            "eig_min": float(ev[0]),
            "eig_max": float(ev[-1]),
            "num_params": float(H.shape[0]),
            "probe_random": rnd,
            "probe_bottom": bottom,
        }
        if canonical is not None:
            d, tied = canonical
            cf = theta_pi_spectrum(p, q, d, tied, H.shape[0])
            vals["spectrum_err"] = float((ev - cf).abs().max())
        out.append(vals)
    return out


def loss_closed_form(p: float, q: float) -> float:
    """``L(θ_π) = H(π)`` (claim iii), in nats."""
    return marginal_entropy(p, q)


@overload
def normalised_position(loss: float, p: float, q: float) -> float: ...


@overload
def normalised_position(loss: np.ndarray, p: float, q: float) -> np.ndarray: ...


def normalised_position(loss: float | np.ndarray, p: float, q: float) -> float | np.ndarray:
    """Where a loss sits between the θ_π plateau and the global minimum (talk Part I, "How do they learn?").

    ``u = (loss − H(X_{n+1} | X_n)) / (H(π) − H(X_{n+1} | X_n))``: 1 at ``L(θ_π) = H(π)`` (claim iii), 0 at the
    entropy rate (the global minimum); undefined for ``p + q = 1``, where the two coincide.

    Args:
        loss: a loss in nats, a float or an array of any shape (e.g. ``(E,)`` final losses of the members).
    Returns:
        ``u`` of the same shape as ``loss``.
    """
    h_pi, h_rate = marginal_entropy(p, q), entropy_rate(p, q)
    return (loss - h_rate) / (h_pi - h_rate)
