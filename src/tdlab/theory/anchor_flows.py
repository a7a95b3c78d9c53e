"""Seed 001's small-init flows (Props. 2–3, Thm. 2): the ``n → ∞`` label counts of the embedding flows
(Eqs. 28–29) and the flows' closed forms.

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

The second half holds the flows themselves: the exact flow ``−∇R`` of the mean cross-entropy of a model passed
in (:func:`cross_entropy_flow`; its Euler step, :func:`euler_step`) and the closed forms, in the seed's layout (row vectors): Thm. 2's and
Eq. 36's ``dW^V/dt`` (App. B.8), Eq. 29's compact embedding flow (Props. 2–3), the split of the exact
``W^V`` flow into what Thm. 2's proof keeps and drops, and the per-class cosines of the embedding flow with
Eqs. 28–29 and the readings of the ``W^V`` flow against Thm. 2 and Eq. 36 that ``anchors-flows`` measures.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tdlab.theory.anchors import AnchorsTask, eq28_embedding_flow

__all__ = [
    "cross_entropy_flow",
    "embedding_flow_cosines",
    "eq29_embedding_flow",
    "eq36_matrix",
    "euler_step",
    "frobenius_cos",
    "last_vs_all_law_gap",
    "population_flow_counts",
    "rate",
    "thm2_matrix",
    "thm2_terms",
    "wv_flow_readings",
]

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


# ------------------------------------------------------------------------------------------------
# The small-init flows of W^V (Eq. 36, Thm. 2) and of the embeddings (Eqs. 28–29), in the seed's layout
# (row vectors; torch stores the transposes)


def cross_entropy_flow(
    model: torch.nn.Module, tokens: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean cross-entropy over one training set per member and ``−∇`` of it: the exact gradient flow
    ``−∇R`` the seed's small-init formulas approximate, of a model passed in (the Def. 2 model,
    :class:`tdlab.models.emb_mlp.Def2Transformer`: logits ``(E, n, d_m)`` from tokens ``(E, n, L)``).

    Args:
        tokens: ``(E, n, L)``; labels ``(E, n)``.
    Returns:
        ``loss (E,)`` and ``{name: −grad}`` in the parameters' torch layout (``(E, ...)``).
    """
    model.zero_grad()
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(labels.shape).mean(1)
    loss.sum().backward()  # members are independent: each member's gradient is that of its own mean loss
    flows = {}
    for k, p in model.named_parameters():
        assert p.grad is not None  # every parameter enters the loss just differentiated
        flows[k] = -p.grad.detach().clone()
    return loss.detach(), flows


def euler_step(model: torch.nn.Module, tokens: torch.Tensor, labels: torch.Tensor, lr: float) -> torch.Tensor:
    """One Euler step of the flow of :func:`cross_entropy_flow` (full-batch gradient descent, flow time ``lr``):
    every parameter moved in place by ``lr × (−∇R)``. Returns the loss ``(E,)`` before the step."""
    loss, flow = cross_entropy_flow(model, tokens, labels)
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.add_(lr * flow[k])  # in place, as += is
    return loss


def thm2_matrix(W_emb: torch.Tensor, rsn: slice, label_law: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Thm. 2: ``½ (E_A w^{emb,A})ᵀ (P_Y − 1/d_m) W2`` ``(d_m, d_k)``; ``label_law`` ``(d_m,)`` the labels' law."""
    d_m = W2.shape[0]
    return 0.5 * torch.outer(W_emb[rsn].mean(0), (label_law - 1.0 / d_m) @ W2)


def eq36_matrix(W_emb: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Eq. 36: ``(1/n) Σ_i W̄^{emb,X^i,T} (y^i − 1/d_m)ᵀ W2`` (``W̄``: the average operator's last row, the mean
    embedding of the sequence); tokens ``(n, L)``, labels ``(n,)``. Returns ``(d_m, d_k)``."""
    d_m = W2.shape[0]
    Y = F.one_hot(labels, d_m).double() - 1.0 / d_m
    return W_emb[tokens].mean(1).T @ Y @ W2 / tokens.shape[0]


def thm2_terms(
    flow: torch.Tensor,
    theorem: torch.Tensor,
    W_emb: torch.Tensor,
    W_emb0: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    W2: torch.Tensor,
) -> dict[str, float]:
    """The sizes of what Thm. 2's proof keeps and drops, for one member at flow time ``t > 0``.

    Eq. 36 is linear in the embeddings, so with ``W^emb(t) = W^emb(0) + ΔW^emb`` it splits into the
    initial-embedding term (Eq. 36 on ``W^emb(0)``) and the label-driven growth term ``K`` (Eq. 36 on ``ΔW^emb``:
    the part B.8 rewrites, through the embeddings' linear expansion, as ½ E_A w^{emb,A} E_Y[Y − 1/d_m]ᵀ W²). What
    the proof drops is the exact flow minus ``K``: the Eq. 35 → 36 small-init terms and the initial-embedding
    term (its last line's ``O(d_m^{−4γ})``).

    Args:
        flow: ``−∇_{W^V} R`` in the paper's layout ``(d_m, d_k)``.
        theorem: Thm. 2's matrix (:func:`thm2_matrix`), ``(d_m, d_k)``.
        W_emb: the embeddings at ``t``, ``(vocab, d_m)``.
        W_emb0: the embeddings at 0, ``(vocab, d_m)``.
        tokens: the training set, ``(n, L)``.
        labels: its labels, ``(n,)``.
        W2: the paper's ``(W^O W^f + W^O)ᵀ`` at ``t``, ``(d_m, d_k)``.
    Returns:
        ``dropped_rel`` ‖flow − K‖/‖K‖, ``eq36_rel`` ‖flow − Eq. 36‖/‖K‖, ``init_rel`` ‖Eq. 36 on W^emb(0)‖/‖K‖
        (Frobenius norms), ``growth_cos`` cos(flow, K), and the theorem's own step alone, its matrix against the
        kept term: ``reduction_cos`` cos(K, theorem) and ``reduction_rate`` ⟨K, theorem⟩/⟨theorem, theorem⟩.
    """
    growth = eq36_matrix(W_emb - W_emb0, tokens, labels, W2)
    full = eq36_matrix(W_emb, tokens, labels, W2)
    k = growth.norm()
    return {
        "dropped_rel": float((flow - growth).norm() / k),
        "eq36_rel": float((flow - full).norm() / k),
        "init_rel": float((full - growth).norm() / k),
        "growth_cos": frobenius_cos(flow, growth),
        "reduction_cos": frobenius_cos(growth, theorem),
        "reduction_rate": rate(growth, theorem),
    }


def eq29_embedding_flow(
    counts: torch.Tensor, n_s: Any, n: float, L: int, W_VO: torch.Tensor, W_f: torch.Tensor
) -> torch.Tensor:
    """Eq. 29 (Props. 2–3): ``(r_s/L)(P^s − 1/d_m) W̃``, ``r_s = n_s/n``, ``P^s = counts/n_s`` (the labels of
    the ``n_s`` occurrences of ``s``), ``W̃ = (W^{f,T} + I)(W^{VO,T} + I)``. Returns ``(d_m,)``; ``counts``
    ``(k, d_m)`` with ``n_s`` ``(k, 1)`` gives ``(k, d_m)``, one token a row."""
    d_m = W_VO.shape[0]
    eye = torch.eye(d_m, dtype=W_VO.dtype)
    return (n_s / n) / L * (counts.to(W_VO.dtype) / n_s - 1.0 / d_m) @ (W_f.T + eye) @ (W_VO.T + eye)


def frobenius_cos(a: torch.Tensor, b: torch.Tensor) -> float:
    """``⟨a, b⟩_F / (‖a‖_F ‖b‖_F)`` of two tensors of one shape (float64), the cosine the flow claims read."""
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def rate(flow: torch.Tensor, predicted: torch.Tensor) -> float:
    """The measured speed along the predicted velocity relative to its predicted speed: ``⟨flow, M⟩ / ⟨M, M⟩``."""
    return float((flow.double() * predicted.double()).sum() / (predicted.double() ** 2).sum())


def embedding_flow_cosines(
    flow_emb: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    P: dict[str, torch.Tensor],
    ids: dict[str, list[int]],
    pop: dict[str, torch.Tensor],
) -> dict[str, dict[str, float]]:
    """Per token class, the mean over its tokens (those that occur) of

    * ``eq28``: ``cos(−∇_{w^s} R, Eq. 28)`` on the training set's own label counts;
    * ``eq29_sample``: ``cos(−∇_{w^s} R, Eq. 29)`` on the same counts (finite ``n``);
    * ``eq29``: ``cos(Eq. 28, Eq. 29)`` on the population's counts (:func:`population_flow_counts`): the
      compact form against the flow in the ``n → ∞`` limit the propositions take;
    * ``law_gap``: the largest over the class's tokens of the total-variation distance between the label law
      of the population's sequences ending in ``s`` and of those containing ``s``
      (:func:`last_vs_all_law_gap`): 0 where Eq. 29's merge of Eq. 28's two sums is
      exact in the limit.

    Args:
        flow_emb: ``(vocab, d_m)`` ``−∇_{W^emb} R``; tokens ``(n, L)``; labels ``(n,)``; P: the member's
            ``W_VO = W^V W^O`` and ``W_f = W^{f1} W^{f2}``, ``(d_m, d_m)`` each, in the paper's layout.
        ids: ``{class: token ids}``; pop: :func:`population_flow_counts` of the member's task and table.
    """
    n, L = tokens.shape
    d_m = P["W_VO"].shape[0]
    Y = F.one_hot(labels, d_m).double()
    occ = F.one_hot(tokens, flow_emb.shape[0]).double()  # (n, L, vocab)
    mult, is_last = occ.sum(1).T, occ[:, -1].T  # (vocab, n): occurrences of s per sequence; s last
    out: dict[str, dict[str, float]] = {}
    for cls, toks in ids.items():
        s = torch.tensor([t for t in toks if float(mult[t].sum()) > 0])  # the tokens that occur
        n_s, n_last = mult[s].sum(1, keepdim=True), is_last[s].sum(1, keepdim=True)  # (k, 1): the formulas broadcast
        counts = mult[s] @ Y
        e28 = eq28_embedding_flow(counts, n_s, is_last[s] @ Y, n_last, n, L, P["W_VO"], P["W_f"])
        e29 = eq29_embedding_flow(counts, n_s, n, L, P["W_VO"], P["W_f"])
        n_all = pop["n_all"][s][:, None]
        lim28 = eq28_embedding_flow(
            pop["all"][s], n_all, pop["last"][s], pop["n_last"][s][:, None], 1, L, P["W_VO"], P["W_f"]
        )
        lim29 = eq29_embedding_flow(pop["all"][s], n_all, 1, L, P["W_VO"], P["W_f"])
        out[cls] = {
            "eq28": _mean_row_cos(flow_emb[s], e28),
            "eq29_sample": _mean_row_cos(flow_emb[s], e29),
            "eq29": _mean_row_cos(lim28, lim29),
            "law_gap": float(last_vs_all_law_gap(pop, s).max()),
        }
    return out


def _mean_row_cos(a: torch.Tensor, b: torch.Tensor) -> float:
    """The mean over rows of ``cos(a_i, b_i)``; ``a, b`` ``(k, d)``."""
    return float((F.cosine_similarity(a.double(), b.double(), dim=-1)).mean())


def wv_flow_readings(
    flow: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    P: dict[str, torch.Tensor],
    rsn: slice,
    ids: dict[str, list[int]],
    W_V0: torch.Tensor | None = None,
    W_emb0: torch.Tensor | None = None,
) -> dict[str, Any]:
    """One member's ``W^V`` flow read against Thm. 2 and Eq. 36 (App. B.8), in the paper's layout.

    Args:
        flow: ``−∇_{W^V} R`` ``(d_m, d_k)``; tokens ``(n, L)``; labels ``(n,)``; P: the member's paper matrices
            (``W_emb (vocab, d_m)``, ``W_V (d_m, d_k)``, ``W2 (d_m, d_k)``); rsn: the reasoning anchors' token
            ids (Thm. 2's ``E_A``); ids: ``{"key" | "memory" | "reasoning": token ids}``.
        W_V0: ``W^V`` at 0 in torch's layout ``(d_k, d_m)`` and ``W_emb0`` the embeddings at 0 ``(vocab, d_m)``,
            at a flow time ``t > 0`` (both or neither).
    Returns:
        ``eq36_cos`` / ``thm2_cos``: Frobenius cos of the flow with Eq. 36 / Thm. 2's matrix (the label law the
        training labels' frequencies); ``thm2_rate``: :func:`rate` along Thm. 2's; ``grad_key_align``:
        ``|cos(u1(flow), mean key embedding)|``; with ``W_V0``: ``thm2_terms`` (:func:`thm2_terms`) and
        ``disp_{rsn,mem,key}_align``: ``|cos(u1(W^V(t) − W^V(0)), mean reasoning / memory / key embedding)|``
        (``u1`` the top left singular vector).
    """
    law = torch.bincount(labels, minlength=P["W2"].shape[0]).double() / labels.numel()
    M = thm2_matrix(P["W_emb"], rsn, law, P["W2"])
    out: dict[str, Any] = {
        "eq36_cos": frobenius_cos(flow, eq36_matrix(P["W_emb"], tokens, labels, P["W2"])),
        "thm2_cos": frobenius_cos(flow, M),
        "thm2_rate": rate(flow, M),
    }
    means = {c: P["W_emb"][ids[c]].mean(0) for c in ("key", "memory", "reasoning")}
    u1 = torch.linalg.svd(flow)[0][:, 0]
    out["grad_key_align"] = abs(frobenius_cos(u1, means["key"]))
    if W_V0 is not None:
        assert W_emb0 is not None  # both at a flow time t > 0
        out["thm2_terms"] = thm2_terms(flow, M, P["W_emb"], W_emb0, tokens, labels, P["W2"])
        u1 = torch.linalg.svd(P["W_V"] - W_V0.T)[0][:, 0]
        for c, k in (("reasoning", "disp_rsn_align"), ("memory", "disp_mem_align"), ("key", "disp_key_align")):
            out[k] = abs(frobenius_cos(u1, means[c]))
    return out
