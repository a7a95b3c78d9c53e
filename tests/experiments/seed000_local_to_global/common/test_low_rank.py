"""markov-rank's measurements and init: the rank-one init is what App. C describes (W_V reads the
embedding direction) and stays exactly rank one under SGD and AdamW (why Fig. 6 is a sanity check);
App. C's measurements match closed forms on a planted optimum; the bias-step excess matches the
model's own cross-entropy computed directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.seed000_local_to_global.common.low_rank import (
    MATRICES,
    app_c_structure,
    bias_step_excess,
    rank_one_init_,
)
from tdlab.experiments.seed000_local_to_global.rank import MarkovRank
from tdlab.models.gpt import GPT
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import TrainConfig, Trainer

EXP = MarkovRank()


def np_ratio(w: np.ndarray) -> np.ndarray:
    s = np.linalg.svd(w, compute_uv=False)
    return s[:, 1] / s[:, 0]


def _np_right_cos(w: np.ndarray, e: np.ndarray) -> np.ndarray:
    _, _, vh = np.linalg.svd(w)
    return np.abs(np.sum(vh[:, 0, :] * e, 1)) / np.linalg.norm(e, axis=1)


def test_rank_one_init_has_the_app_c_structure_and_is_per_member():
    cfg = EXP.make_config("quick", ["train.seq_len=16"], members=3)
    seeds = member_seeds(7, 3)
    model = rank_one_init_(GPT(cfg.arm_model(), seeds), cfg.rank_one)
    st = {k: v.double().numpy() for k, v in model.state_dict().items()}
    e = st["e"]  # (E, d)
    c = np.abs(e).mean(1)
    alpha = e / c[:, None]
    assert np.abs(alpha) == pytest.approx(np.ones_like(alpha), abs=1e-6)  # e = c * alpha, alpha in {±1}^d
    assert st["wpe"] == pytest.approx(np.broadcast_to(-0.5 * e[:, None, :], st["wpe"].shape), abs=1e-7)
    for name, key in MATRICES.items():
        w = st[key]
        assert all(np.linalg.matrix_rank(w[i], tol=1e-6 * np.abs(w[i]).max()) == 1 for i in range(3)), name
    assert st[MATRICES["W_2"]] == pytest.approx(np.transpose(st[MATRICES["W_1"]], (0, 2, 1)), abs=0)
    w1 = st[MATRICES["W_1"]]
    assert np.abs(w1) == pytest.approx(
        np.abs(w1[:, :1, :1]) * np.ones_like(w1), rel=1e-6
    )  # s * xi alpha^T: |entries| = s
    assert _np_right_cos(w1, e) == pytest.approx(np.ones(3), abs=1e-6)
    # W_V = g alpha^T: alpha is "the row in W_V" (its right, input-side singular vector); W_O = alpha g^T.
    assert _np_right_cos(st[MATRICES["W_V"]], e) == pytest.approx(np.ones(3), abs=1e-6)
    u, _, _ = np.linalg.svd(st[MATRICES["W_O"]])
    assert np.abs(np.sum(u[:, :, 0] * alpha, 1)) / np.sqrt(alpha.shape[1]) == pytest.approx(np.ones(3), abs=1e-6)
    # Member i is the model built from seed i alone; members differ.
    alone = rank_one_init_(GPT(cfg.arm_model(), seeds[1:2]), cfg.rank_one).state_dict()
    for k, v in alone.items():
        assert torch.equal(v[0], model.state_dict()[k][1]), k
    assert not np.allclose(alpha[0], alpha[1]) or not np.isclose(c[0], c[1])


@pytest.mark.parametrize("optimizer,lr", [("adamw", 1e-3), ("sgd", 0.3)])
def test_rank_one_init_stays_rank_one_under_training_by_construction(optimizer, lr, one_thread):
    """Every gradient keeps the alpha factor, so every matrix stays rank one to round-off (Fig. 6 holds by
    construction); with alpha on the output side of W_V (W_V = alpha g^T) a second direction appears."""
    cfg = EXP.make_config("quick", ["train.seq_len=16"], members=2)
    seeds = member_seeds(3, 2)

    def trained(flip: bool) -> dict[str, np.ndarray]:
        def build(s):
            model = rank_one_init_(GPT(cfg.arm_model(), s), cfg.rank_one)
            if flip:
                with torch.no_grad():
                    model.blocks[0].attn.W_V.weight.copy_(model.blocks[0].attn.W_V.weight.transpose(1, 2).clone())
            return model

        tc = TrainConfig(steps=20, batch=8, seq_len=16, optimizer=optimizer, lr=lr, eval_every=20, eval_batches=1)
        res = Trainer(tc, progress=False).fit(build, seeds, MarkovChain(0.2, 0.3))
        return {n: np_ratio(np.stack([s[k].double().numpy() for s in res.states])) for n, k in MATRICES.items()}

    kept = trained(flip=False)
    assert max(v.max() for v in kept.values()) < cfg.claims.roundoff
    assert trained(flip=True)["W_V"].max() > 1e-3


def test_app_c_measurements_on_a_planted_optimum_match_closed_forms(planted):
    """App. C's identities on the planted optimum: p/e = 1/2 exactly, cos(p, e) = -1, W_2 = W_1^T
    (cos_F = 1), W_O W_V and W_Q^T W_K rank one along e, <v, alpha> = 0."""
    rng = np.random.default_rng(0)
    good = [planted.rank_one(8, 8, rng) for _ in range(2)]
    st = {k: torch.stack([g[k] for g in good]) for k in good[0]}
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


def test_bias_step_excess_against_a_direct_computation(planted):
    """bias_step_excess against the model's own cross-entropy computed directly (float64 weights of
    moderate size): b* is a minimum (central difference ~ 0, both neighbours higher), the excesses
    before and after the step are the direct differences."""
    cfg = EXP.make_config("quick", ["train.seq_len=8"], members=2)
    rng = np.random.default_rng(4)
    st = {k: 0.4 * torch.stack([v, planted.gaussian(8, 8, rng)[k]]) for k, v in planted.gaussian(8, 8, rng).items()}
    st["b"] = torch.tensor([0.3, -0.2])
    tokens = planted.bias_tokens(cfg)
    r = bias_step_excess(cfg.arm_model(), st, tokens, 4.0)
    model = GPT(cfg.arm_model(), [0, 1]).double()

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
    assert r["excess_before"] == pytest.approx(direct(np.array([0.3, -0.2])) - low, abs=1e-6)
    assert r["excess_after"] == pytest.approx(direct(r["b_after"]) - low, abs=1e-6)
    assert (r["excess_before"] > 1e-3).all() and (r["excess_after"] < r["excess_before"]).all()


@pytest.mark.parametrize("without", ["mlp", "out_proj"])
def test_rank_one_init_refuses_a_model_without_the_matrices_it_sets(without):
    """The init writes W^O and the MLP's W_1, W_2: a model without them is refused up front, before any
    parameter is touched (it used to fail half-way with an AttributeError on None)."""
    cfg = EXP.make_config("quick", ["train.seq_len=16"], members=1)
    arm = cfg.arm_model()
    mc = type(arm)(**{**arm.model_dump(), without: False})
    model = GPT(mc, member_seeds(7, 1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="W\\^O and the MLP"):
        rank_one_init_(model, cfg.rank_one)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
