"""Seed 002 Table 1 models: shapes, an independent re-implementation of I.2–I.4 with torch's own layers,
the closed-gate identity, the keys of the no-cross ablation, hand parameter counts, member independence."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tdlab.config import ConfigError
from tdlab.models.multimodal_ca import (
    BiCAConfig,
    BidirectionalCA,
    EnsembleMHA,
    MultimodalCA,
    MultimodalCAConfig,
    parameter_count,
)

SMALL = dict(d=8, layers=2, heads=2, d_h=12, conv_width=4)  # a small instance for speed; counts use I.5's sizes
VARIANTS = [(True, True), (False, True), (True, False), (False, False)]


def _x(E: int, B: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(E, B, 2, 28, 28, generator=torch.Generator().manual_seed(seed))


# --- an independent forward pass, written from Appendix I with torch's layers ---------------------------


def _ref_tokens(P: dict, x: torch.Tensor, d: int) -> list[torch.Tensor]:
    """Φ_I(I), Φ_A(A) of I.2 for one member: ``x (B, 2, 28, 28)`` -> two ``(B, 16, d)``."""
    out = []
    for m, ln in ((0, "ln_image"), (1, "ln_audio")):
        h = x[:, m : m + 1]
        for i in range(4):
            w, b = P[f"encoder.convs.{i}.weight"][m], P[f"encoder.convs.{i}.bias"][m]
            h = F.relu(F.conv2d(h, w, b, padding=w.shape[-1] // 2))
            if i in (1, 3):
                h = F.max_pool2d(h, 2)
        h = F.adaptive_avg_pool2d(h, (4, 4)).flatten(2).transpose(1, 2)  # (B, 16, d): grid row-major
        out.append(F.layer_norm(h, (d,), P[f"encoder.{ln}.weight"], P[f"encoder.{ln}.bias"]))
    return out


def _torch_mha(P: dict, prefix: str, d: int, heads: int) -> nn.MultiheadAttention:
    mha = nn.MultiheadAttention(d, heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([P[f"{prefix}.W_{k}.weight"] for k in "qkv"]))
        mha.in_proj_bias.copy_(torch.cat([P[f"{prefix}.W_{k}.bias"] for k in "qkv"]))
        mha.out_proj.weight.copy_(P[f"{prefix}.W_o.weight"])
        mha.out_proj.bias.copy_(P[f"{prefix}.W_o.bias"])
    return mha.eval()


def _ln(P: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], P[f"{name}.weight"], P[f"{name}.bias"])


def _lin(P: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, P[f"{name}.weight"], P[f"{name}.bias"])


def _ffn(P: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return _lin(P, f"{name}.fc2", F.gelu(_lin(P, f"{name}.fc1", x)))


def ref_ca(P: dict, cfg: MultimodalCAConfig, x: torch.Tensor) -> torch.Tensor:
    """I.2 + I.3 for one member, eval mode: ``x (B, 2, 28, 28)`` -> logits ``(B, 10)``."""
    d = cfg.d
    phi_i, phi_a = _ref_tokens(P, x, d)
    B = x.shape[0]
    X = torch.cat(
        [P["cls"].expand(B, 1, d), phi_i + P["pos_image"] + P["mod_image"], phi_a + P["pos_audio"] + P["mod_audio"]],
        dim=1,
    )
    Fs = _lin(P, "W_0", X)
    for t in range(cfg.layers):
        b = f"blocks.{t}"
        q = _ln(P, f"{b}.ln_f", Fs)
        kv = _ln(P, f"{b}.ln_x", X) if cfg.cross else q
        Ft = Fs + _torch_mha(P, f"{b}.attn", d, cfg.heads)(q, kv, kv, need_weights=False)[0]
        S = torch.sigmoid(_lin(P, f"{b}.gate", Ft)) * _lin(P, f"{b}.inj", X) if cfg.inject else 0.0
        Fb = Ft + S
        Fs = Fb + _ffn(P, f"{b}.ffn", _ln(P, f"{b}.ln_ffn", Fb))
    return _ffn(P, "head.mlp", _ln(P, "head.ln", Fs[:, 0]))


def ref_bica(P: dict, cfg: BiCAConfig, x: torch.Tensor) -> torch.Tensor:
    """I.2 + I.4 for one member, eval mode."""
    d = cfg.d
    phi_i, phi_a = _ref_tokens(P, x, d)
    U, V = phi_i + P["pos_image"], phi_a + P["pos_audio"]
    for t in range(cfg.layers):
        b = f"blocks.{t}"
        u, v = _ln(P, f"{b}.ln_u", U), _ln(P, f"{b}.ln_v", V)
        Ut = U + _torch_mha(P, f"{b}.attn_i", d, cfg.heads)(u, v, v, need_weights=False)[0]
        Vt = V + _torch_mha(P, f"{b}.attn_a", d, cfg.heads)(v, u, u, need_weights=False)[0]
        U = Ut + _ffn(P, f"{b}.ffn_i", _ln(P, f"{b}.ln_fu", Ut))
        V = Vt + _ffn(P, f"{b}.ffn_a", _ln(P, f"{b}.ln_fv", Vt))
    return _ffn(P, "head.mlp", _ln(P, "head.ln", torch.cat([U.mean(1), V.mean(1)], -1)))


@pytest.mark.parametrize("inject,cross", VARIANTS)
def test_ca_models_match_an_independent_implementation_of_appendix_I(inject, cross, one_thread):
    cfg = MultimodalCAConfig(**SMALL, inject=inject, cross=cross)
    model = MultimodalCA(cfg, [3, 4]).eval()
    x = _x(2, 5)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, 5, 10)
        for e in range(2):
            ref = ref_ca(model.member_state(e), cfg, x[e])
            torch.testing.assert_close(out[e], ref, atol=2e-5, rtol=1e-4)


def test_bica_matches_an_independent_implementation_of_I4(one_thread):
    cfg = BiCAConfig(**SMALL)
    model = BidirectionalCA(cfg, [3, 4]).eval()
    x = _x(2, 5)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, 5, 10)
        for e in range(2):
            torch.testing.assert_close(out[e], ref_bica(model.member_state(e), cfg, x[e]), atol=2e-5, rtol=1e-4)


def test_named_activations_have_the_documented_shapes(one_thread):
    cfg = MultimodalCAConfig(**SMALL)
    model = MultimodalCA(cfg, [1, 2, 3])
    _, cache = model.run_with_cache(_x(3, 4))
    L = 1 + 16 + 16
    assert cache["tokens.X"].shape == (3, 4, L, 8)
    assert cache["blocks.-1.F"].shape == cache["blocks.1.F"].shape == (3, 4, L, 8)
    assert cache["blocks.0.attn.pattern"].shape == (3, 4, 2, L, L)
    torch.testing.assert_close(cache["blocks.0.attn.pattern"].sum(-1), torch.ones(3, 4, 2, L))
    assert cache["blocks.1.gate"].shape == cache["blocks.1.S"].shape == (3, 4, L, 8)
    assert cache["cls"].shape == (3, 4, 8)
    bi = BidirectionalCA(BiCAConfig(**SMALL), [1, 2])
    _, c2 = bi.run_with_cache(_x(2, 4))
    assert c2["blocks.1.U"].shape == c2["blocks.1.V"].shape == (2, 4, 16, 8)
    assert c2["blocks.0.attn_image.pattern"].shape == (2, 4, 2, 16, 16) and c2["pooled"].shape == (2, 4, 16)


# --- the ablations ------------------------------------------------------------------------------------


@pytest.mark.parametrize("train", [False, True])
def test_no_injection_equals_the_full_model_with_its_gate_closed(train, one_thread):
    """σ(F̃ W^Gᵀ + b^G) with W^G = 0, b^G = −∞ is exactly 0, so S ≡ 0: the two models agree bit for bit
    (in training mode too: the gate draws no dropout, so both consume the same masks)."""
    full = MultimodalCA(MultimodalCAConfig(**SMALL), [5, 6])
    noinj = MultimodalCA(MultimodalCAConfig(**SMALL, inject=False), [5, 6])
    missing, unexpected = noinj.load_state_dict(full.state_dict(), strict=False)
    assert not missing and all(".gate." in k or ".inj." in k for k in unexpected) and unexpected
    with torch.no_grad():
        for blk in full.blocks:
            blk.gate.weight.zero_()
            blk.gate.bias.fill_(-math.inf)
    full.train(train)
    noinj.train(train)
    x = _x(2, 4)
    torch.manual_seed(0)
    a, cache = full(x), None
    torch.manual_seed(0)
    b = noinj(x)
    assert torch.equal(a, b)
    with torch.no_grad():
        full.eval()
        _, cache = full.run_with_cache(x, names=["blocks.0.S", "blocks.1.S"])
    assert torch.count_nonzero(cache["blocks.0.S"]) == 0 and torch.count_nonzero(cache["blocks.1.S"]) == 0
    # and an open gate changes the output: the injection is not a no-op
    with torch.no_grad():
        full.blocks[0].gate.bias.fill_(0.0)
        assert not torch.allclose(full(x), noinj.eval()(x))


def test_cross_attention_keys_are_X_and_self_attention_keys_are_F(one_thread):
    x = _x(2, 3)
    cross = MultimodalCA(MultimodalCAConfig(**SMALL), [7, 8])
    _, c = cross.run_with_cache(x)
    for t in range(2):
        torch.testing.assert_close(c[f"blocks.{t}.attn.kv"], cross.blocks[t].ln_x(c["tokens.X"]), rtol=0, atol=0)
    selfm = MultimodalCA(MultimodalCAConfig(**SMALL, cross=False), [7, 8])
    assert all(blk.ln_x is None for blk in selfm.blocks)
    _, s = selfm.run_with_cache(x)
    for t in range(2):
        prev = s[f"blocks.{t - 1}.F"]  # F_{t-1}
        torch.testing.assert_close(s[f"blocks.{t}.attn.kv"], selfm.blocks[t].ln_f(prev), rtol=0, atol=0)
    # with keys from F, the attention pattern of layer 1 moves when F_0's map W_0 changes but X does not
    with torch.no_grad():
        _, before = selfm.run_with_cache(x, names=["blocks.0.attn.pattern"])
        selfm.W_0.weight.mul_(2.0)
        _, after = selfm.run_with_cache(x, names=["blocks.0.attn.pattern"])
        _, cb = cross.run_with_cache(x, names=["blocks.0.attn.pattern"])
        cross.W_0.weight.mul_(2.0)
        _, ca = cross.run_with_cache(x, names=["blocks.0.attn.pattern"])
    assert not torch.allclose(before["blocks.0.attn.pattern"], after["blocks.0.attn.pattern"])
    assert not torch.allclose(cb["blocks.0.attn.pattern"], ca["blocks.0.attn.pattern"])  # queries move too


def test_ensemble_mha_equals_torch_multihead_attention(one_thread):
    d, H = 8, 2
    mha = EnsembleMHA(2, d, H, dropout=0.0)
    from tdlab.seeding import generators

    mha.reset_parameters(generators([1, 2], "init"))
    q, kv = torch.randn(2, 3, 5, d), torch.randn(2, 3, 7, d)
    out = mha(q, kv)
    for e in range(2):
        P = {f"a.{k}": v[e] for k, v in mha.state_dict().items()}
        ref = _torch_mha(P, "a", d, H)(q[e], kv[e], kv[e], need_weights=False)[0]
        torch.testing.assert_close(out[e], ref, atol=1e-6, rtol=1e-5)


# --- parameter counts -----------------------------------------------------------------------------------


def _hand_counts(d: int = 16, w: int = 16, k: int = 3, T: int = 10, d_h: int = 32, classes: int = 10) -> dict[str, int]:
    """Counts from the layer sizes of I.2–I.5 (weights + biases), written out by hand."""
    conv = (1 * w * k * k + w) + (w * w * k * k + w) + (w * w * k * k + w) + (w * d * k * k + d)
    encoders = 2 * (conv + 2 * d)  # Φ_I, Φ_A, each with its token LayerNorm (2d)
    ln = 2 * d
    mha = 3 * (d * d + d) + (d * d + d)  # in-projection (3d × d + 3d) and out-projection
    ffn = (d * d_h + d_h) + (d_h * d + d)
    lin = d * d + d
    head = lambda n: 2 * n + (n * n + n) + (n * classes + classes)  # noqa: E731  LN + n→n→classes MLP
    tokens = encoders + 2 * 16 * d + 2 * d + d  # + P_I, P_A, M_I, M_A, CLS
    layer = {
        ("inj", "cross"): ln + ln + mha + 2 * lin + ln + ffn,  # LN(F), LN(X), MHA, W^G, W^S, LN, FFN
        ("cross",): ln + ln + mha + ln + ffn,
        ("inj",): ln + mha + 2 * lin + ln + ffn,
        (): ln + mha + ln + ffn,
    }
    out = {key: tokens + lin + T * layer[key] + head(d) for key in layer}  # + W_0
    bica = encoders + 2 * 16 * d + T * 2 * (ln + mha + ln + ffn) + head(2 * d)
    return {
        "full": out[("inj", "cross")],
        "no-injection": out[("cross",)],
        "no-cross": out[("inj",)],
        "neither": out[()],
        "bi-ca": bica,
    }


def test_parameter_counts_equal_a_hand_count_and_round_to_the_seeds():
    hand = _hand_counts()
    ours = {
        "full": parameter_count(MultimodalCA(MultimodalCAConfig(), [0])),
        "no-injection": parameter_count(MultimodalCA(MultimodalCAConfig(inject=False), [0])),
        "no-cross": parameter_count(MultimodalCA(MultimodalCAConfig(cross=False), [0])),
        "neither": parameter_count(MultimodalCA(MultimodalCAConfig(inject=False, cross=False), [0])),
        "bi-ca": parameter_count(BidirectionalCA(BiCAConfig(), [0])),
    }
    assert ours == hand
    assert ours == {"full": 43_610, "no-injection": 38_170, "no-cross": 43_290, "neither": 37_850, "bi-ca": 60_746}
    # Table 1's three significant digits: 4.36e4, 3.82e4, 6.07e4 (no-cross: the seed kept an unused LN(X))
    for arm, seed in (("full", 4.36e4), ("no-injection", 3.82e4), ("bi-ca", 6.07e4)):
        assert float(f"{ours[arm]:.3g}") == seed
    # per member, whatever the ensemble size
    assert parameter_count(MultimodalCA(MultimodalCAConfig(**SMALL), [0, 1, 2])) == parameter_count(
        MultimodalCA(MultimodalCAConfig(**SMALL), [0])
    )


# --- ensembles ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ca", "bica"])
def test_a_member_equals_the_same_model_built_and_trained_alone(kind, one_thread):
    """Init: bit-identical. Training (dropout off: masks come from a global stream) on each member's own
    batch, 3 AdamW steps of the summed loss: member e of the ensemble equals the model trained alone."""
    if kind == "ca":
        cfg = MultimodalCAConfig(**{**SMALL, "dropout": 0.0})
        make = lambda s: MultimodalCA(cfg, s)  # noqa: E731
    else:
        cfg = BiCAConfig(**{**SMALL, "dropout": 0.0})
        make = lambda s: BidirectionalCA(cfg, s)  # noqa: E731
    seeds = [11, 12, 13]
    ens = make(seeds)
    alone = [make([s]) for s in seeds]
    for e, m in enumerate(alone):
        for (name, p), (_, q) in zip(ens.named_parameters(), m.named_parameters(), strict=True):
            assert torch.equal(p[e], q[0]), (name, e)
    x = _x(3, 6, seed=1)
    y = torch.randint(0, 10, (3, 6), generator=torch.Generator().manual_seed(2))

    def train(model, xs, ys):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
        for _ in range(3):
            logits = model(xs)
            loss = F.cross_entropy(logits.reshape(-1, 10), ys.reshape(-1), reduction="none").reshape(ys.shape).mean(1)
            opt.zero_grad()
            loss.sum().backward()
            opt.step()

    train(ens, x, y)
    for e, m in enumerate(alone):
        train(m, x[e : e + 1], y[e : e + 1])
        for (name, p), (_, q) in zip(ens.named_parameters(), m.named_parameters(), strict=True):
            torch.testing.assert_close(p[e], q[0], atol=2e-5, rtol=1e-4, msg=f"{name} member {e}")


def test_dropout_is_active_in_training_only_and_independent_across_members(one_thread):
    cfg = MultimodalCAConfig(**SMALL, dropout=0.5)
    model = MultimodalCA(cfg, [4, 4])  # two members with identical weights
    x = _x(1, 3).expand(2, -1, -1, -1, -1)
    model.eval()
    with torch.no_grad():
        a = model(x)
        assert torch.equal(a[0], a[1]) and torch.equal(a, model(x))
        model.train()
        b = model(x)
    assert not torch.allclose(b[0], b[1])  # each member draws its own masks


def test_bad_configs_and_inputs_are_refused():
    with pytest.raises((ValueError, ConfigError), match="multiple of heads"):
        MultimodalCAConfig(d=10, heads=4)
    with pytest.raises((ValueError, ConfigError), match="odd"):
        BiCAConfig(kernel=4)
    with pytest.raises((ValueError, ConfigError)):
        MultimodalCAConfig(dropout=1.0)
    model = MultimodalCA(MultimodalCAConfig(**SMALL), [1])
    with pytest.raises(ValueError, match=r"\(E, B, 2, 28, 28\)"):
        model(torch.rand(1, 2, 28, 28))
    with pytest.raises(ValueError, match="members"):
        model(torch.rand(2, 1, 2, 28, 28))
    with pytest.raises(ValueError, match="at least one member"):
        MultimodalCA(MultimodalCAConfig(**SMALL), [])


def test_activation_bytes_is_the_size_of_a_full_resolution_conv_map():
    """The bytes the CPU chunking reads are those of the largest tensor the encoder makes: every output of
    its first two convolutions, (B, E·2·conv_width, 28, 28) float32, per member."""
    from tdlab.models.multimodal_ca import activation_bytes

    cfg = MultimodalCAConfig(**SMALL)
    model = MultimodalCA(cfg, [0, 1])
    sizes: list[int] = []
    hooks = [
        c.register_forward_hook(lambda m, i, o: sizes.append(o.numel() * o.element_size())) for c in model.encoder.convs
    ]
    model(_x(2, 3))
    for h in hooks:
        h.remove()
    assert max(sizes) == 2 * activation_bytes(cfg, 3)  # two members
