"""γ-init (seed 001 §3.4): empirical std = d^{-γ} per width and layout; per-member γ and generators.
Seed 000's structured starts of the Sec. 2 model: the Fig. 6 rank-one init is what App. C describes (W_V
reads the embedding direction) and stays exactly rank one under SGD and AdamW (why Fig. 6 is a sanity
check); App. D's canonical point gives Eq. (24)'s logits; A.3.2's proposed point in App. D's coordinates."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.init import (
    canonical_init_,
    gamma_normal_,
    gamma_std,
    near_zero_qkv_init_,
    proposed_point,
    rank_one_init_,
)
from tdlab.seeding import member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.theory.markov_regions import icommon_boundary, in_icommon
from tdlab.train.trainer import TrainConfig, Trainer


def test_gamma_std_values():
    assert gamma_std(200, 64, 0.5) == pytest.approx(200**-0.5)
    assert gamma_std(200, 64, 0.5, fan="in") == pytest.approx(64**-0.5)
    assert gamma_std(10, 10, 0.0) == 1.0
    with pytest.raises(ValueError, match="fan"):
        gamma_std(2, 2, 0.5, fan="both")


@pytest.mark.parametrize("fan", ["out", "in"])
@pytest.mark.parametrize("layout", ["out_in", "in_out"])
def test_empirical_std_within_2_percent(fan, layout):
    # (E, 300, 150): out = 300, in = 150 in the "out_in" layout, the other way round in "in_out".
    gammas = [0.3, 0.5, 0.8]
    w = torch.empty(3, 300, 150, dtype=torch.float64)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    gamma_normal_(w, gammas, fan=fan, generators=gens, layout=layout)
    d_out, d_in = (300, 150) if layout == "out_in" else (150, 300)
    for e, g in enumerate(gammas):
        want = (d_out if fan == "out" else d_in) ** -g
        assert float(w[e].std()) == pytest.approx(want, rel=0.02)
        assert abs(float(w[e].mean())) < 0.02 * want


def test_member_draw_independent_of_ensemble():
    w3 = torch.empty(3, 20, 30)
    gamma_normal_(w3, 0.5, generators=[torch.Generator().manual_seed(s) for s in (5, 6, 7)])
    w1 = torch.empty(20, 30)
    gamma_normal_(w1, 0.5, generators=torch.Generator().manual_seed(6))
    assert torch.equal(w3[1], w1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="members"):
        gamma_normal_(torch.empty(2, 3, 3), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="generators"):
        gamma_normal_(torch.empty(2, 3, 3), 0.5, generators=[torch.Generator()])
    with pytest.raises(ValueError, match="shape"):
        gamma_normal_(torch.empty(3), 0.5)
    with pytest.raises(ValueError, match="layout"):
        gamma_normal_(torch.empty(3, 3), 0.5, layout="rows")


# --- seed 000: the Fig. 6 rank-one init --------------------------------------------------------------

# The Sec. 2 model's weight matrices (markov-rank's names) -> state-dict keys, (out, in).
SEC2_MATRICES = {
    "W_Q": "blocks.0.attn.W_Q.weight",
    "W_K": "blocks.0.attn.W_K.weight",
    "W_V": "blocks.0.attn.W_V.weight",
    "W_O": "blocks.0.attn.W_O.weight",
    "W_1": "blocks.0.mlp.W_1.weight",
    "W_2": "blocks.0.mlp.W_2.weight",
}
SCALES = SimpleNamespace(e_std=0.1, w_std=0.1, attn_std=0.02)  # markov-rank's defaults


def sec2(max_len: int, **kw) -> GPTConfig:
    return GPTConfig(arch="sec2", d=8, max_len=max_len, **kw)


def np_ratio(w: np.ndarray) -> np.ndarray:
    s = np.linalg.svd(w, compute_uv=False)
    return s[:, 1] / s[:, 0]


def _np_right_cos(w: np.ndarray, e: np.ndarray) -> np.ndarray:
    _, _, vh = np.linalg.svd(w)
    return np.abs(np.sum(vh[:, 0, :] * e, 1)) / np.linalg.norm(e, axis=1)


def test_rank_one_init_has_the_app_c_structure_and_is_per_member():
    mc = sec2(16, init_std=0.001)
    seeds = member_seeds(7, 3)
    model = rank_one_init_(GPT(mc, seeds), SCALES)
    st = {k: v.double().numpy() for k, v in model.state_dict().items()}
    e = st["e"]  # (E, d)
    c = np.abs(e).mean(1)
    alpha = e / c[:, None]
    assert np.abs(alpha) == pytest.approx(np.ones_like(alpha), abs=1e-6)  # e = c * alpha, alpha in {±1}^d
    assert st["wpe"] == pytest.approx(np.broadcast_to(-0.5 * e[:, None, :], st["wpe"].shape), abs=1e-7)
    for name, key in SEC2_MATRICES.items():
        w = st[key]
        assert all(np.linalg.matrix_rank(w[i], tol=1e-6 * np.abs(w[i]).max()) == 1 for i in range(3)), name
    assert st[SEC2_MATRICES["W_2"]] == pytest.approx(np.transpose(st[SEC2_MATRICES["W_1"]], (0, 2, 1)), abs=0)
    w1 = st[SEC2_MATRICES["W_1"]]
    assert np.abs(w1) == pytest.approx(
        np.abs(w1[:, :1, :1]) * np.ones_like(w1), rel=1e-6
    )  # s * xi alpha^T: |entries| = s
    assert _np_right_cos(w1, e) == pytest.approx(np.ones(3), abs=1e-6)
    # W_V = g alpha^T: alpha is "the row in W_V" (its right, input-side singular vector); W_O = alpha g^T.
    assert _np_right_cos(st[SEC2_MATRICES["W_V"]], e) == pytest.approx(np.ones(3), abs=1e-6)
    u, _, _ = np.linalg.svd(st[SEC2_MATRICES["W_O"]])
    assert np.abs(np.sum(u[:, :, 0] * alpha, 1)) / np.sqrt(alpha.shape[1]) == pytest.approx(np.ones(3), abs=1e-6)
    # Member i is the model built from seed i alone; members differ.
    alone = rank_one_init_(GPT(mc, seeds[1:2]), SCALES).state_dict()
    for k, v in alone.items():
        assert torch.equal(v[0], model.state_dict()[k][1]), k
    assert not np.allclose(alpha[0], alpha[1]) or not np.isclose(c[0], c[1])


@pytest.mark.parametrize("optimizer,lr", [("adamw", 1e-3), ("sgd", 0.3)])
def test_rank_one_init_stays_rank_one_under_training_by_construction(optimizer, lr, one_thread):
    """Every gradient keeps the alpha factor, so every matrix stays rank one to round-off (Fig. 6 holds by
    construction); with alpha on the output side of W_V (W_V = alpha g^T) a second direction appears."""
    mc = sec2(16, init_std=0.001)
    seeds = member_seeds(3, 2)

    def trained(flip: bool) -> dict[str, np.ndarray]:
        def build(s):
            model = rank_one_init_(GPT(mc, s), SCALES)
            if flip:
                with torch.no_grad():
                    model.blocks[0].attn.W_V.weight.copy_(model.blocks[0].attn.W_V.weight.transpose(1, 2).clone())
            return model

        tc = TrainConfig(steps=20, batch=8, seq_len=16, optimizer=optimizer, lr=lr, eval_every=20, eval_batches=1)
        res = Trainer(tc, progress=False).fit(build, seeds, MarkovChain(0.2, 0.3))
        return {n: np_ratio(np.stack([s[k].double().numpy() for s in res.states])) for n, k in SEC2_MATRICES.items()}

    kept = trained(flip=False)
    assert max(v.max() for v in kept.values()) < 1e-5  # markov-rank's claims.roundoff
    assert trained(flip=True)["W_V"].max() > 1e-3


@pytest.mark.parametrize("without", ["mlp", "out_proj"])
def test_rank_one_init_refuses_a_model_without_the_matrices_it_sets(without):
    """The init writes W^O and the MLP's W_1, W_2: a model without them is refused up front, before any
    parameter is touched (it used to fail half-way with an AttributeError on None)."""
    model = GPT(sec2(16, init_std=0.001, **{without: False}), member_seeds(7, 1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="W\\^O and the MLP"):
        rank_one_init_(model, SCALES)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# --- seed 000: App. D's canonical point and A.3.2's proposed one ---------------------------------------


def test_canonical_point_in_the_full_model_gives_eq24_logits_for_both_signs_of_e(one_thread):
    seeds = member_seeds(5, 4)
    theta = torch.tensor([[0.9, -0.4], [-1.3, -1.2], [1.7, 0.6], [-0.5, 0.2]], dtype=torch.float64)
    model = canonical_init_(GPT(sec2(12), seeds), theta)
    with torch.no_grad():
        model.blocks[0].attn.W_V.weight.zero_()  # App. D: v = 0, the attention path off
        tokens = torch.randint(0, 2, (4, 3, 12), generator=torch.Generator().manual_seed(0))
        logit = model(tokens)[..., 1].double()
    e, w = theta[:, 0], theta[:, 1]
    b = model.b.detach().double()
    expected = (e**2 * (1 + 2 * w * w.abs()))[:, None, None] * tokens + (b - e**2 / 2)[:, None, None]  # Eq. (24)
    assert torch.allclose(logit, expected, atol=1e-5)
    st = {k: v.detach().double() for k, v in model.state_dict().items()}
    for m in range(4):
        alpha = st["e"][m] / st["e"][m].norm()
        assert st["e"][m].norm() == pytest.approx(abs(float(e[m])), rel=1e-6)
        assert torch.allclose(
            alpha.abs(), torch.full((8,), 8**-0.5, dtype=torch.float64), atol=1e-6
        )  # on the hypercube
        assert torch.allclose(st["wpe"][m], (-0.5 * st["e"][m]).expand(12, 8), atol=1e-6)  # p_n = -(e/2) alpha
        w1, w2 = st["blocks.0.mlp.W_1.weight"][m], st["blocks.0.mlp.W_2.weight"][m]
        assert torch.allclose(w2, torch.sign(w[m]) * w1.T, atol=1e-6)  # W_2 = sign(w) W_1^T
        assert torch.allclose(
            w1, abs(float(w[m])) / 8**0.5 * torch.outer(torch.ones(32, dtype=torch.float64), alpha), atol=1e-6
        )
    whole = canonical_init_(GPT(sec2(12), seeds), theta).state_dict()
    alone = canonical_init_(GPT(sec2(12), seeds[2:3]), theta[2:3]).state_dict()
    for k, v in alone.items():  # member i is the model built from seed i alone
        assert torch.equal(v[0], whole[k][2]), k
    with pytest.raises(ValueError, match="theta must be"):
        canonical_init_(GPT(sec2(12), seeds), theta[:2])


def test_proposed_point_is_app_d_coordinates_and_outside_icommon():
    """A.3.2's e = 0.5 per coordinate, W_1 = 1, W_2 = -1 at d = 8: (e, w) = (0.5 √8, -8), below g(w)."""
    e, w = proposed_point(sec2(12))
    assert (e, w) == pytest.approx((0.5 * math.sqrt(8), -8.0))
    assert abs(e) < float(icommon_boundary(torch.tensor(w))) and not bool(in_icommon(torch.tensor([e, w])))
    assert proposed_point(GPTConfig(arch="sec2", d=2, init_e=1.0, init_w2=-0.25)) == pytest.approx((math.sqrt(2), -0.5))


def test_near_zero_init_is_uniform_in_0_s_per_member_and_equals_the_member_built_alone():
    cfg = GPTConfig(arch="gpt2", vocab=7, d=8, layers=2, heads=2, max_len=8, causal=False)
    ens = near_zero_qkv_init_(GPT(cfg, [3, 4]), 1e-3)
    alone = near_zero_qkv_init_(GPT(cfg, [4]), 1e-3)
    for blk, one in zip(ens.blocks, alone.blocks, strict=True):
        for name in ("W_Q", "W_K", "W_V"):
            w = getattr(blk.attn, name).weight
            assert float(w.detach().min()) >= 0.0 and float(w.detach().max()) < 1e-3
            torch.testing.assert_close(w[1], getattr(one.attn, name).weight[0])
        assert float(blk.mlp.W_1.weight.detach().std()) > 0.01  # everything else keeps the BERT init
    assert not torch.equal(ens.blocks[0].attn.W_V.weight[0], ens.blocks[0].attn.W_V.weight[1])
    normal = near_zero_qkv_init_(GPT(cfg, [3]), 1e-3, "normal").blocks[0].attn.W_V.weight.detach()
    assert float(normal.min()) < 0.0 < float(normal.max())
