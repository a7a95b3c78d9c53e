"""Normalised (cosine) attention: the hand-set 3-layer construction tends to the k-gram (add-β)
estimator as κ grows on every binary sequence of length ≤ 10; the forward pass against a slow
per-position reference; ensemble members are independent single models."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tdlab.models.normalised_attention import (
    NormalisedAttention,
    NormAttnConfig,
    code_weights,
    construction,
    construction_probs,
    full_mean_distance,
)
from tdlab.theory.kgram import kgram_probs


def all_sequences(length: int) -> torch.Tensor:
    idx = torch.arange(2**length)
    return (idx[:, None] // 2 ** torch.arange(length - 1, -1, -1)) % 2


def max_kl(k: int, kappa: float, beta: float = 1.0, max_len: int = 10) -> float:
    """Largest KL(estimator || construction) over every position of every sequence of length <= max_len
    (each shorter sequence is a prefix of a longer one, and the model is causal: length 10 covers all)."""
    x = all_sequences(max_len)
    ref = kgram_probs(x, k, 2, beta)
    p = construction_probs(x, k, kappa, beta)
    kl = (ref * (ref.log() - p.log())).sum(-1)
    return float(kl.max())


@pytest.mark.parametrize("k", [1, 2])
def test_construction_tends_to_the_laplace_estimator_as_kappa_grows(k):
    kappas = [2.0, 8.0, 32.0, 128.0]
    gaps = [max_kl(k, kap) for kap in kappas]
    assert all(b < a for a, b in itertools.pairwise(gaps)), gaps  # decreasing in κ
    assert gaps[0] > 1e-2  # small κ is far from it (the test can tell)
    assert gaps[-1] < {1: 1e-12, 2: 1e-8}[k], gaps  # small at large κ
    x = all_sequences(10)
    p = construction_probs(x, k, 400.0)
    torch.testing.assert_close(p, kgram_probs(x, k, 2, 1.0), atol=1e-9, rtol=0)


def test_construction_with_other_smoothing_and_causality():
    # β = 1/2 (Krichevsky-Trofimov): the null slot's logit κ + ln(2β) sets the pseudo-counts.
    x = all_sequences(10)
    torch.testing.assert_close(construction_probs(x, 2, 400.0, beta=0.5), kgram_probs(x, 2, 2, 0.5), atol=1e-9, rtol=0)
    # It is not some other estimator: the order-1 estimator differs from the order-2 construction.
    assert float((construction_probs(x, 2, 400.0) - kgram_probs(x, 1, 2, 1.0)).abs().max()) > 0.1
    # Causal: the prediction at t does not depend on later tokens.
    y = x.clone()
    y[:, 6:] = 1 - y[:, 6:]
    torch.testing.assert_close(construction_probs(x[:64], 2, 50.0)[:, :6], construction_probs(y[:64], 2, 50.0)[:, :6])


def test_construction_layers_compute_the_context_code_and_the_match():
    k, kappa = 2, 200.0
    model = construction(k, kappa)
    x = torch.tensor([[[1, 0, 1, 1, 0, 1, 0]]])
    _, cache = model.run_with_cache(x)
    h1 = cache["blocks.0.out"][0, 0]
    w = code_weights(k)
    u = [float(w[0] * x[0, 0, t] + w[1] * x[0, 0, t - 1]) for t in range(1, 7)]
    torch.testing.assert_close(h1[1:, 3], torch.tensor(u, dtype=torch.float64), atol=1e-9, rtol=0)
    assert float(h1[1, 4]) == pytest.approx(full_mean_distance(k), abs=1e-9)
    assert float(h1[0, 4]) == pytest.approx(0.0, abs=1e-12)  # position 0: a shorter context
    h2 = cache["blocks.1.out"][0, 0]
    assert float(h2[0, 7]) == pytest.approx(1.0) and float(h2[3:, 7].abs().max()) < 1e-9  # first-position flag
    # Layer 3 of the last query (context "1 0" at t = 6) puts its real mass on keys 2 and 5 (the tokens
    # that followed "1 0" before), 1/(N + 2) each, the rest on the null slot.
    pat = cache["blocks.2.attn.pattern"][0, 0, 0, 6]
    torch.testing.assert_close(pat, torch.tensor([0, 0, 0.25, 0, 0, 0.25, 0], dtype=torch.float64), atol=1e-9, rtol=0)
    assert float(cache["blocks.2.attn.null"][0, 0, 0, 6]) == pytest.approx(0.5, abs=1e-9)


def reference_forward(model: NormalisedAttention, tokens: torch.Tensor, e: int) -> torch.Tensor:
    """Member ``e``'s logits, one query and one key at a time (no batching over positions or members)."""
    cfg = model.cfg
    out = []
    for seq in tokens[e]:
        h = [model.wte[e, int(t)].clone() for t in seq]
        for blk in model.blocks:
            kappa = blk.log_kappa[e].detach().exp()
            new = []
            for n in range(len(h)):
                q = blk.W_Q.weight[e] @ h[n]
                scores, vals = [], []
                for i in range(n + 1):
                    j = min(n - i, cfg.rel_clip)
                    key = blk.W_K.weight[e] @ h[i] + blk.rel_k[e, j]
                    scores.append(kappa * torch.dot(q, key) / (q.norm() * key.norm()))
                    vals.append(blk.W_V.weight[e] @ h[i] + blk.rel_v[e, j])
                if cfg.null_slot:
                    scores.append(kappa + blk.null_bias[e])
                    vals.append(blk.null_v[e])
                att = torch.stack(scores).softmax(0)
                new.append(h[n] + blk.W_O.weight[e] @ sum(a * v for a, v in zip(att, vals, strict=True)))
            h = new
        out.append(torch.stack([model.lm_head[e] @ v for v in h]))
    return torch.stack(out)


@pytest.mark.parametrize("null_slot", [True, False])
def test_forward_matches_a_per_position_reference(null_slot):
    cfg = NormAttnConfig(d=6, layers=2, rel_clip=3, kappa=3.0, null_slot=null_slot)
    model = NormalisedAttention(cfg, [3, 4]).double()
    with torch.no_grad():
        for blk in model.blocks:
            blk.log_kappa.copy_(torch.tensor([0.5, 1.5]))
            if null_slot:
                blk.null_bias.copy_(torch.tensor([0.3, -0.2]))
    x = torch.randint(0, 2, (2, 3, 7), generator=torch.Generator().manual_seed(0))
    logits, cache = model.run_with_cache(x)
    for e in range(2):
        torch.testing.assert_close(logits[e], reference_forward(model, x, e).detach(), atol=1e-10, rtol=0)
    pat = cache["blocks.1.attn.pattern"]
    assert pat.shape == (2, 3, 1, 7, 7)
    assert float(pat.triu(1).abs().max()) == 0.0  # causal
    mass = pat.sum(-1) + (cache["blocks.1.attn.null"] if null_slot else 0.0)
    torch.testing.assert_close(mass, torch.ones_like(mass))


def test_member_of_an_ensemble_equals_the_model_alone_in_training():
    cfg = NormAttnConfig(d=8, layers=3, rel_clip=4)
    seeds = [11, 12, 13]
    ens = NormalisedAttention(cfg, seeds).double()  # float64: batching differences stay at rounding level
    alone = NormalisedAttention(cfg, [seeds[1]]).double()
    for name, p in alone.state_dict().items():
        torch.testing.assert_close(ens.state_dict()[name][1:2], p)
    x = torch.randint(0, 2, (3, 4, 12), generator=torch.Generator().manual_seed(1))

    def train(model, tokens):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(5):
            logits = model(tokens[..., :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, -2), tokens[..., 1:].flatten(), reduction="none")
            opt.zero_grad()
            loss.reshape(tokens.shape[0], -1).mean(-1).sum().backward()  # members' losses summed: own gradients
            opt.step()
        return model

    train(ens, x)
    train(alone, x[1:2])
    for name, p in alone.state_dict().items():
        torch.testing.assert_close(ens.state_dict()[name][1:2], p, atol=1e-10, rtol=1e-9)
    assert ens.kappas().shape == (3, 3) and not torch.allclose(
        ens.kappas(), torch.full((3, 3), cfg.kappa, dtype=torch.float64)
    )


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="k must be >= 1"):
        construction(0, 10.0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        construction(1, 10.0, beta=0.0)
    with pytest.raises(ValueError, match="kappa must exceed"):
        construction(4, 0.5)
    with pytest.raises(ValueError, match="readout='prob'"):
        NormAttnConfig(d=4, readout="prob")
    with pytest.raises(ValueError, match="members"):
        NormalisedAttention(NormAttnConfig(d=4), [0, 1])(torch.zeros(3, 1, 4, dtype=torch.long))
    assert math.isclose(float(code_weights(3).sum()), 1.0)
