"""Seed 000's Sec. 2 model read from stored parameters: App. C's measurements match closed forms on a
planted optimum; the per-matrix snapshot matches numpy's SVD; the bias-step excess matches the model's own
cross-entropy computed directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes.sec2_weights import (
    MATRICES,
    app_c_structure,
    bias_step_excess,
    snapshot,
    trained_vs_init,
    weight_matrices,
)
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.markov import MarkovChain


def stack(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([s[k] for s in states]) for k in states[0]}


def test_app_c_measurements_on_a_planted_optimum_match_closed_forms(sec2_states):
    """App. C's identities on the planted optimum: p/e = 1/2 exactly, cos(p, e) = -1, W_2 = W_1^T
    (cos_F = 1), W_O W_V and W_Q^T W_K rank one along e, <v, alpha> = 0."""
    rng = np.random.default_rng(0)
    st = stack([sec2_states.rank_one(8, 8, rng) for _ in range(2)])
    s = app_c_structure(st)
    assert s["position_ratio"] == pytest.approx([0.5, 0.5], abs=1e-6)
    assert s["position_cos"] == pytest.approx([-1.0, -1.0], abs=1e-6)
    assert s["position_spread"] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert s["w2_w1t_cos"] == pytest.approx([1.0, 1.0], abs=1e-6)
    for k in ("wo_wv_ratio", "qk_ratio", "attention_gain"):
        assert s[k] == pytest.approx([0.0, 0.0], abs=1e-5), k
    for k in ("wo_wv_left_cos", "qk_left_cos", "qk_right_cos"):
        assert s[k] == pytest.approx([1.0, 1.0], abs=1e-6), k
    # W_2 = -W_1^T (App. D, p+q>1) gives cos_F = -1; the ratio follows a rescaled p_n.
    st[MATRICES["W_2"]] = -st[MATRICES["W_2"]]
    st["wpe"] = st["wpe"] * 0.6
    s = app_c_structure(st)
    assert s["w2_w1t_cos"] == pytest.approx([-1.0, -1.0], abs=1e-6)
    assert s["position_ratio"] == pytest.approx([0.3, 0.3], abs=1e-6)


def test_weight_matrices_and_snapshot_against_numpy(sec2_states):
    """The product W_O W_V and every matrix's singular values, σ₂/σ₁ and |cos| of the leading right
    singular vector with e, recomputed per member with numpy; the embedding's norm and spread."""
    rng = np.random.default_rng(1)
    st = stack([sec2_states.gaussian(4, 6, rng), sec2_states.rank_one(4, 6, rng)])
    mats = weight_matrices(st)
    assert set(mats) == {*MATRICES, "W_OW_V"}
    wo, wv = st[MATRICES["W_O"]].double().numpy(), st[MATRICES["W_V"]].double().numpy()
    assert mats["W_OW_V"].numpy() == pytest.approx(wo @ wv, abs=1e-12)
    snap = snapshot(st)
    e = st["e"].double().numpy()
    for name, w in mats.items():
        _, sv, vh = np.linalg.svd(w.numpy())
        assert snap[name]["sv"] == pytest.approx(sv, rel=1e-9, abs=1e-12), name
        assert snap[name]["sv_ratio"] == pytest.approx(sv[:, 1] / sv[:, 0], rel=1e-6, abs=1e-9), name
        assert snap[name]["sv_normalised"][:, 0] == pytest.approx([1.0, 1.0]), name
        if name != "W_2":  # every other matrix reads the d-dimensional residual stream
            cos_right = np.abs(np.sum(vh[:, 0, :] * e, 1)) / np.linalg.norm(e, axis=1)
            assert snap[name]["cos_right"] == pytest.approx(cos_right, abs=1e-9), name
    assert snap["embedding"]["norm"] == pytest.approx(np.linalg.norm(e, axis=1), rel=1e-12)
    assert snap["embedding"]["spread"][1] == pytest.approx(0.0, abs=1e-7)  # c·alpha is on the hypercube
    assert snap["embedding"]["cos_mean_position"][1] == pytest.approx(1.0, abs=1e-7)  # p_n = -(c/2)·alpha


@pytest.mark.parametrize("noise_floor", [True, False])
def test_trained_vs_init_against_numpy(sec2_states, noise_floor):
    """σ₁ growth, its inverse, the initial σ₂/σ₁, the embedding's norm growth and |e|², recomputed from the two
    states' matrices with numpy; the final readings are the final snapshot's, without the raw singular values."""
    rng = np.random.default_rng(2)
    init = stack([sec2_states.gaussian(4, 6, rng) for _ in range(2)])
    final = stack([sec2_states.rank_one(4, 6, rng), sec2_states.gaussian(4, 6, rng)])
    got = trained_vs_init(snapshot(final), snapshot(init), noise_floor)
    assert set(got) == {*MATRICES, "W_OW_V", "embedding"}
    mf, mi = weight_matrices(final), weight_matrices(init)
    for name in (*MATRICES, "W_OW_V"):
        sf, si = np.linalg.svd(mf[name].numpy())[1], np.linalg.svd(mi[name].numpy())[1]
        assert got[name]["sigma1_growth"] == pytest.approx(sf[:, 0] / si[:, 0], rel=1e-9), name
        assert got[name]["init_sv_ratio"] == pytest.approx(si[:, 1] / si[:, 0], rel=1e-6), name
        assert "sv" not in got[name] and got[name]["sv_ratio"] == snapshot(final)[name]["sv_ratio"].tolist()
        if noise_floor:
            assert got[name]["init_noise_floor"] == pytest.approx(si[:, 0] / sf[:, 0], rel=1e-9), name
        else:
            assert "init_noise_floor" not in got[name]
    ef, ei = final["e"].double().numpy(), init["e"].double().numpy()
    emb = got["embedding"]
    assert emb["norm_growth"] == pytest.approx(np.linalg.norm(ef, axis=1) / np.linalg.norm(ei, axis=1), rel=1e-12)
    assert emb["norm_sq"] == pytest.approx((ef**2).sum(1), rel=1e-12)
    assert emb["init_spread"] == snapshot(init)["embedding"]["spread"].tolist()


def test_bias_step_excess_against_a_direct_computation(sec2_states):
    """bias_step_excess against the model's own cross-entropy computed directly (float64 weights of
    moderate size): b* is a minimum (central difference ~ 0, both neighbours higher), the excesses
    before and after the step are the direct differences."""
    mc = GPTConfig(arch="sec2", d=8, max_len=8, init_std=0.001)
    rng = np.random.default_rng(4)
    st = {
        k: 0.4 * torch.stack([v, sec2_states.gaussian(8, 8, rng)[k]])
        for k, v in sec2_states.gaussian(8, 8, rng).items()
    }
    st["b"] = torch.tensor([0.3, -0.2])
    tokens = MarkovChain(0.2, 0.3).sample(generators(member_seeds(0, 2), "bias-step-eval"), 64, 8)
    r = bias_step_excess(mc, st, tokens, 4.0)
    model = GPT(mc, [0, 1]).double()

    def direct(b: np.ndarray) -> np.ndarray:
        model.load_state_dict({**{k: v.double() for k, v in st.items()}, "b": torch.tensor(b, dtype=torch.float64)})
        with torch.no_grad():
            logits = model(tokens[:, :, :-1])
        return np.array(
            [
                float(torch.nn.functional.cross_entropy(logits[m].reshape(-1, 2), tokens[m, :, 1:].reshape(-1)))
                for m in range(2)
            ]
        )

    low, h = direct(r["b_star"]), 1e-3
    up, down = direct(r["b_star"] + h), direct(r["b_star"] - h)
    assert np.abs(up - down).max() / (2 * h) < 1e-5 and (up > low).all() and (down > low).all()
    assert r["b"] == pytest.approx([0.3, -0.2], abs=1e-7)
    assert r["excess_before"] == pytest.approx(direct(np.array([0.3, -0.2])) - low, abs=1e-6)
    assert r["excess_after"] == pytest.approx(direct(r["b_after"]) - low, abs=1e-6)
    assert (r["excess_before"] > 1e-3).all() and (r["excess_after"] < r["excess_before"]).all()
