"""γ-initialisation ("initialisation rate"), seed 001 §3.4.

The seed: a trainable matrix ``W in R^{d1 x d2}`` (``d1`` the input, ``d2`` the output width, in
the paper's row-vector convention ``y = x W``) starts with ``W_ij ~ N(0, (d2^{-γ})^2)``; the larger
γ, the smaller the initialisation (γ = 0.5 is LeCun/He-like, γ > 0.5 counts as small). App. B.4
agrees (``W^emb`` std ``d_m^{-γ}``, ``W^Q`` std ``d_k^{-γ}``: output widths). The same group's public
code uses the *input* width for linear layers instead, so ``fan="in"`` is offered; ``fan="out"`` (the
paper) is the default.

Layouts. torch stores a linear map ``y = x W^T`` as ``weight (out, in)`` and tdlab's ensembles as
``(E, out, in)`` (:class:`tdlab.models.ensemble.EnsembleLinear`): that is ``layout="out_in"``, the
default here. An embedding table ``(vocab, d)`` maps a one-hot of width ``vocab`` (input) to ``d``
(output): the paper's ``W^emb in R^{d_vob x d_m}`` is stored as-is, i.e. ``layout="in_out"``, and its
output width is ``d_m`` — pass ``layout="in_out"`` for embedding and positional tables.

Stable API (other models import it):

* ``gamma_std(d_out, d_in, gamma, fan="out") -> float``
* ``gamma_normal_(w, gamma, fan="out", generators=None, layout="out_in") -> w``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

__all__ = ["Fan", "Layout", "gamma_normal_", "gamma_std"]

Fan = Literal["out", "in"]
Layout = Literal["out_in", "in_out"]


def gamma_std(d_out: int, d_in: int, gamma: float, fan: Fan = "out") -> float:
    """Standard deviation of a γ-initialised matrix entry (§3.4): ``d^{-γ}``.

    Args:
        d_out: output width (the paper's ``d2``).
        d_in: input width (the paper's ``d1``).
        gamma: initialisation rate γ (any real; γ > 0.5 is "small").
        fan: ``"out"`` (the paper: ``d = d_out``) or ``"in"`` (the group's code: ``d = d_in``).
    Returns:
        ``d^{-γ}`` as a float.
    """
    if fan not in ("out", "in"):
        raise ValueError(f"fan must be 'out' or 'in', got {fan!r}")
    d = d_out if fan == "out" else d_in
    if int(d) < 1:
        raise ValueError(f"width must be >= 1, got d_out={d_out}, d_in={d_in}")
    return float(d) ** (-float(gamma))


def gamma_normal_(
    w: Tensor,
    gamma: float | Sequence[float],
    fan: Fan = "out",
    generators: torch.Generator | Sequence[torch.Generator] | None = None,
    layout: Layout = "out_in",
) -> Tensor:
    """Fill ``w`` in place with ``N(0, gamma_std(d_out, d_in, γ, fan)^2)`` entries, per member.

    Args:
        w: one matrix ``(out, in)`` or an ensemble ``(E, out, in)`` (``layout="out_in"``, torch's
            Linear convention); with ``layout="in_out"`` the last two axes are ``(in, out)`` (an
            embedding table ``(vocab, d)``).
        gamma: one γ for every member, or one per member (length ``E``): a γ-sweep can be one
            ensemble.
        fan: which width sets the scale (see :func:`gamma_std`).
        generators: one generator per member (``E`` of them; for a 2-D ``w`` one generator or a
            list of one). Member ``e``'s entries come from ``generators[e]`` alone, so a member's
            draw does not depend on its ensemble mates. ``None`` uses torch's global generator.
        layout: ``"out_in"`` (default) or ``"in_out"``.
    Returns:
        ``w`` (filled in place, under ``torch.no_grad``).
    """
    if layout not in ("out_in", "in_out"):
        raise ValueError(f"layout must be 'out_in' or 'in_out', got {layout!r}")
    if w.dim() not in (2, 3):
        raise ValueError(f"w must be (out, in) or (E, out, in), got shape {tuple(w.shape)}")
    batch = w if w.dim() == 3 else w.unsqueeze(0)
    E = batch.shape[0]
    a, b = batch.shape[-2:]
    d_out, d_in = (a, b) if layout == "out_in" else (b, a)
    gammas = [float(gamma)] * E if isinstance(gamma, (int, float)) else [float(g) for g in gamma]
    if len(gammas) != E:
        raise ValueError(f"gamma has {len(gammas)} values for {E} members")
    if generators is None or isinstance(generators, torch.Generator):
        gens: list[torch.Generator | None] = [generators] * E
    else:
        gens = list(generators)
    if len(gens) != E:
        raise ValueError(f"{len(gens)} generators for {E} members")
    with torch.no_grad():
        for e in range(E):
            batch[e].normal_(0.0, gamma_std(d_out, d_in, gammas[e], fan), generator=gens[e])
    return w
