"""The ``n → ∞`` label counts of seed 001's small-init embedding flows (Eqs. 28–29, Props. 2–3).

Eq. 28 is linear in two per-token sums over the training set: ``Σ_{i: s in X^i} mult_s(X^i) y^i`` (every
occurrence) and ``Σ_{i: X^i_L = s} y^i`` (the sequences whose last token is ``s``), each divided by ``n``.
As ``n → ∞`` these are expectations over the task's training population (:class:`tdlab.tasks.anchors.Anchors`:
every training tuple equally often, ``z_p ~ U(Z)``, the key index ``p ~ U{p_min..p_max}``, noise keys iid
``U(Z)``, labels ``z + Σa`` or the memory table's). Exact, by enumeration over (key, tuple):

* anchors: ``E[mult_s y] = (1/(k N_Z)) Σ_j mult_j(s) Σ_z onehot(y(z, j))``; the last token is the tuple's
  last anchor when ``p = L − q`` (probability ``1/N_p``);
* keys: ``E[mult_s y] = (1/(k N_Z)) Σ_j onehot(y(s, j)) + ((L − q − 1)/N_Z) P_Y`` (the key, and noise,
  independent of the label); the last token is a noise key when ``p < L − q``, so
  ``E[1{X_L = s} y] = (P(p < L − q)/N_Z) P_Y`` — the same direction for every key.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tdlab.theory.anchors import AnchorsTask

__all__ = ["last_vs_all_law_gap", "population_flow_counts"]

F64 = torch.float64


def population_flow_counts(task: AnchorsTask, table: Tensor, d_out: int) -> dict[str, Tensor]:
    """Per token, the expectations per training sequence of Eq. 28's sums.

    Args:
        task: the anchor task; table: its memory labels ``(N_Z, #memory tuples)`` (:meth:`Anchors.memory_table`).
        d_out: the number of label classes (``d_m`` of Def. 2, ``>= d_vob``).
    Returns:
        ``all (d_vob, d_out)`` ``E[mult_s(X) onehot(y)]``, ``n_all (d_vob,)`` ``E[mult_s(X)]``, ``last (d_vob, d_out)``
        ``E[1{X_L = s} onehot(y)]``, ``n_last (d_vob,)`` ``P(X_L = s)``; float64.
    """
    c = task.cfg
    tuples, _ = task.split_tuples("train")
    k, nz, V = len(tuples), c.key_max - c.key_min + 1, c.d_vob
    z = torch.arange(c.key_min, c.key_max + 1)
    labels = z[:, None] + tuples.sum(1)[None, :]  # (N_Z, k) reasoning labels
    n_mem = len(task.mem_tuples)  # the train split lists the memory tuples first, in mem_tuples order
    labels[:, :n_mem] = table[:, :n_mem]
    onehot = torch.nn.functional.one_hot(labels, d_out).to(F64)  # (N_Z, k, d_out)
    per_tuple = onehot.sum(0)  # (k, d_out): Σ_z onehot(y(z, j))
    p_y = onehot.mean((0, 1))  # the label law P_Y
    mult = torch.zeros(k, V, dtype=F64).scatter_add_(1, tuples, torch.ones_like(tuples, dtype=F64))  # (k, d_vob)
    n_pos = c.p_hi - c.p_min + 1  # key positions p_min..p_max
    p_anchor_last = 1.0 / n_pos if c.p_hi == c.L - c.q else 0.0
    out_all = mult.T @ per_tuple / (k * nz)
    n_all = mult.sum(0) / k
    last_tok = torch.nn.functional.one_hot(tuples[:, -1], V).to(F64)  # (k, d_vob)
    out_last = p_anchor_last * last_tok.T @ per_tuple / (k * nz)
    n_last = p_anchor_last * last_tok.sum(0) / k
    keys = slice(c.key_min, c.key_max + 1)
    out_all[keys] += onehot.sum(1) / (k * nz) + (c.L - c.q - 1) / nz * p_y
    n_all[keys] += (c.L - c.q) / nz
    out_last[keys] += (1.0 - p_anchor_last) / nz * p_y
    n_last[keys] += (1.0 - p_anchor_last) / nz
    return {"all": out_all, "n_all": n_all, "last": out_last, "n_last": n_last}


def last_vs_all_law_gap(pop: dict[str, Tensor], tokens: Tensor) -> Tensor:
    """Per token, the total-variation distance between the label law of the sequences *ending* in ``s`` and that
    of the sequences *containing* ``s`` (every occurrence counted), from :func:`population_flow_counts`.

    Eq. 29 merges Eq. 28's last-position sum into the all-occurrence one: its direction is Eq. 28's (up to the
    small-init terms) only when the two laws are equal. For a reasoning anchor they are, by the symmetry of the
    tuples (``M`` closed under reversal); for a memory anchor they are on average over memory tables (Eq. 7),
    but one fixed table gives the two sums different cells of it; for a key the last token is noise (label law
    ``P_Y``). A token that never ends a sequence has no such law: ``1.0``, the largest distance.

    Args:
        pop: :func:`population_flow_counts`' output; tokens: ``(k,)`` token ids.
    Returns:
        ``(k,)`` float64 in ``[0, 1]``.
    """
    n_last, n_all = pop["n_last"][tokens], pop["n_all"][tokens]
    last = pop["last"][tokens] / n_last.clamp(min=torch.finfo(F64).tiny)[:, None]
    every = pop["all"][tokens] / n_all.clamp(min=torch.finfo(F64).tiny)[:, None]
    gap = 0.5 * (last - every).abs().sum(1)
    return torch.where(n_last > 0, gap, torch.ones_like(gap))
