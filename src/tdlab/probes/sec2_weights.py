"""Seed 000's Sec. 2 single-layer model read from its stored parameters (App. A.3.1, Figs. 3 and 6, App. C,
Sec. 3).

* :data:`MATRICES`, :func:`weight_matrices` — the model's six weight matrices by the seed's names, and
  ``W_O W_V`` (App. C states its structure);
* :func:`app_c_structure` — App. C's statements about an optimum, per member (σ₂/σ₁ and
  :func:`tdlab.probes.spectrum.embedding_alignment`, the alignment of singular vectors with the embedding e);
* :func:`snapshot` — every per-matrix spectral reading of one state (Figs. 3 and 6);
* :func:`trained_vs_init` — two snapshots side by side: the final readings and how far training moved each matrix
  and the embedding from its initial scale (σ₁ growth, the init-noise floor of σ₂/σ₁, the embedding's norm growth);
* :func:`bias_step_excess` — Sec. 3's "one additional [bias] step" on the full model: how far b is from its
  optimum given the other parameters, before and after one gradient step on b alone
  (:func:`tdlab.theory.markov_regions.bias_step_from_logits` on the model's bias-free logits).

Every function takes stacked parameters with a leading member axis ``E`` (as stored in a run's
``arrays/ARM.safetensors``) and works per member; computations run in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.spectrum import abs_cosine, embedding_alignment, hypercube_spread, singular_values, sv_ratio
from tdlab.theory.markov_regions import bias_step_from_logits

__all__ = ["MATRICES", "app_c_structure", "bias_step_excess", "snapshot", "trained_vs_init", "weight_matrices"]

# Weight matrices of the Sec. 2 model (single layer), by the seed's names -> state-dict keys, (out, in).
MATRICES: dict[str, str] = {
    "W_Q": "blocks.0.attn.W_Q.weight",
    "W_K": "blocks.0.attn.W_K.weight",
    "W_V": "blocks.0.attn.W_V.weight",
    "W_O": "blocks.0.attn.W_O.weight",
    "W_1": "blocks.0.mlp.W_1.weight",
    "W_2": "blocks.0.mlp.W_2.weight",
}


def weight_matrices(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The six weight matrices (seed names) of a stacked state, each ``(E, out, in)``, plus the
    product ``W_OW_V = W_O W_V`` (App. C states its structure)."""
    mats = {name: torch.as_tensor(state[key]).double() for name, key in MATRICES.items()}
    mats["W_OW_V"] = mats["W_O"] @ mats["W_V"]
    return mats


def app_c_structure(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """App. C's statements about an optimum, measured on a stacked state (member axis first).

    With ``α = e/|e|`` (App. C: ``e = e·α``) and ``p̄ = mean_n p_n``:

    * ``position_cos``: ``cos(p̄, e)`` (App. C: -1, ``p_n = -p·α``);
    * ``position_ratio``: ``p/e = -<p̄, e>/|e|²`` (App. C: ≈ 1/2, "p ≈ e/2");
    * ``position_spread``: ``sqrt(mean_n |p_n - p̄|²)/|p̄|`` (App. C: 0, "constant across positions");
    * ``w2_w1t_cos``: signed Frobenius cosine of ``W_2`` and ``W_1^T`` (Eq. 15: +1; App. D: -1 for p+q>1);
    * ``wo_wv_ratio``, ``wo_wv_left_cos``: σ₂/σ₁ of ``W_O W_V`` and |cos| of its left singular vector
      with e (``W_O W_V = α v^T``);
    * ``attention_gain``: ``α^T W_O W_V α = <v, α>`` (App. C: ≈ 0, "hence y_n = x_n");
    * ``qk_ratio``, ``qk_left_cos``, ``qk_right_cos``: the same for ``W_Q^T W_K = (q²d) α α^T``.

    Returns: dict of ``(E,)`` float64 numpy arrays.
    """
    mats = weight_matrices(state)
    e = torch.as_tensor(state["e"]).double()
    alpha = e / e.norm(dim=1, keepdim=True)
    wpe = torch.as_tensor(state["wpe"]).double()
    pbar = wpe.mean(1)
    w1, w2 = mats["W_1"], mats["W_2"]
    ovs = mats["W_OW_V"]
    qk = mats["W_Q"].transpose(1, 2) @ mats["W_K"]
    out = {
        "position_cos": torch.nn.functional.cosine_similarity(pbar, e, dim=1),
        "position_ratio": -(pbar * e).sum(1) / (e * e).sum(1),
        "position_spread": (wpe - pbar[:, None]).pow(2).sum(2).mean(1).sqrt() / pbar.norm(dim=1),
        "w2_w1t_cos": (w2 * w1.transpose(1, 2)).sum((1, 2)) / (w2.flatten(1).norm(dim=1) * w1.flatten(1).norm(dim=1)),
        "wo_wv_ratio": sv_ratio(ovs),
        "wo_wv_left_cos": embedding_alignment(ovs, e)["left"],
        "attention_gain": torch.einsum("ei,eij,ej->e", alpha, ovs, alpha),
        "qk_ratio": sv_ratio(qk),
    }
    al = embedding_alignment(qk, e)
    out["qk_left_cos"], out["qk_right_cos"] = al["left"], al["right"]
    return {k: v.numpy() for k, v in out.items()}


def trained_vs_init(
    final: dict[str, dict[str, np.ndarray]], init: dict[str, dict[str, np.ndarray]], noise_floor: bool
) -> dict[str, Any]:
    """The final state's readings against the initial state's, from two :func:`snapshot` s of the same members.

    Per matrix (the six and ``W_OW_V``): the final readings but the raw singular values, ``init_sv_ratio``, and
    ``sigma1_growth`` = σ₁ final / σ₁ init (a matrix that kept its initial scale was not driven by the loss, and its
    spectrum is the init's); with ``noise_floor`` also ``init_noise_floor`` = 1 / growth, which bounds the σ₂/σ₁ the
    leftover init noise can leave. The embedding: its final readings, ``init_spread``, ``norm_growth`` = |e| final /
    |e| init and ``norm_sq`` = |e|² (with ``a = e``, ``logit_n = x_n |e|² + <e, p_n> + b + ...``, so |e|² alone can
    carry the bigram logit gap ``log((1-q)/q) - log(p/(1-p))`` when it is positive, p+q<1).

    Returns: a nested dict of per-member lists (``(E,)`` leaves, ``(E, k)`` for ``sv_normalised``).
    """
    m: dict[str, Any] = {}
    for name in (*MATRICES, "W_OW_V"):
        m[name] = {k: v.tolist() for k, v in final[name].items() if k != "sv"}
        m[name]["init_sv_ratio"] = init[name]["sv_ratio"].tolist()
        growth = final[name]["sv"][:, 0] / init[name]["sv"][:, 0]
        m[name]["sigma1_growth"] = growth.tolist()
        if noise_floor:
            m[name]["init_noise_floor"] = (1.0 / growth).tolist()
    m["embedding"] = {k: v.tolist() for k, v in final["embedding"].items()}
    m["embedding"]["init_spread"] = init["embedding"]["spread"].tolist()
    m["embedding"]["norm_growth"] = (final["embedding"]["norm"] / init["embedding"]["norm"]).tolist()
    m["embedding"]["norm_sq"] = (final["embedding"]["norm"] ** 2).tolist()
    return m


def bias_step_excess(
    model_cfg: GPTConfig, state: dict[str, torch.Tensor], tokens: torch.Tensor, lr: float
) -> dict[str, np.ndarray]:
    """How far the output bias b is from its optimum given the other parameters, before and after one
    gradient step on b alone (Sec. 3: "one additional step is usually sufficient").

    On next-token prediction of ``tokens`` with the logits' bias-free part ``s`` (the model with b = 0):
    ``L(b) = mean softplus(-(2y-1)(s + b))``, ``b* = argmin L`` (Newton; L is convex in b),
    ``b1 = b - lr L'(b)`` (:func:`tdlab.theory.markov_regions.bias_step_from_logits`).

    Args:
        model_cfg: the Sec. 2 model; state: stacked parameters ``(E, ...)``; tokens: ``(E, B, T)``.
        lr: the extra step's size.
    Returns: dict of ``(E,)`` arrays: ``excess_before = L(b) - L(b*)``, ``excess_after = L(b1) - L(b*)``
    (nats), ``b``, ``b_star``, ``b_after``.
    """
    E = tokens.shape[0]
    model = GPT(model_cfg, list(range(E)))
    model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    assert model.b is not None  # the Sec. 2 model's output bias
    b = model.b.detach().double().clone()
    with torch.no_grad():
        model.b.zero_()
        s = model(tokens[:, :, :-1])[..., 1].double()  # bias-free logit of P(x_{n+1} = 1)
    r = bias_step_from_logits(s, tokens[:, :, 1:], b, lr)
    return {k: v.numpy() for k, v in r.items()}


def snapshot(state: dict[str, torch.Tensor]) -> dict[str, dict[str, np.ndarray]]:
    """Every per-matrix measurement of one stacked state: σ₂/σ₁, normalised singular values, singular
    values and |cos| of the singular vectors with e, for the six matrices and ``W_OW_V``; the
    embedding's hypercube spread, norm and the |cos| of the mean positional embedding with e
    (App. C: ``p_n = -p·α``). Every leaf is an ``(E, ...)`` array."""
    mats = weight_matrices(state)
    e = torch.as_tensor(state["e"]).double()
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, w in mats.items():
        s = singular_values(w)
        row = {"sv_ratio": sv_ratio(w).numpy(), "sv_normalised": (s / s[:, :1]).numpy(), "sv": s.numpy()}
        row.update({f"cos_{k}": v.numpy() for k, v in embedding_alignment(w, e).items()})
        out[name] = row
    wpe = torch.as_tensor(state["wpe"]).double()
    out["embedding"] = {
        "spread": hypercube_spread(e).numpy(),
        "norm": e.norm(dim=1).numpy(),
        "cos_mean_position": abs_cosine(wpe.mean(1), e).numpy(),
    }
    return out
