"""The topic-model task of seed 004 (§3.1, §3.2, §6.1) against its closed forms: Dirichlet moments,
Beta marginals, the masking probabilities of §3.2 and the masked-token distribution F.17.

Monte Carlo checks compare a sample mean with its closed form to 5 standard errors estimated from
the same sample (fixed seeds, so each check is deterministic)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from tdlab.config import ConfigError, validate_config
from tdlab.seeding import generators
from tdlab.tasks.topics import (
    Topics,
    TopicsConfig,
    draw_theta,
    masked_distribution,
    topic_of,
    topic_words,
    word_distribution,
)
from tdlab.train.objectives import mask_tokens

Z = 5.0  # standard errors allowed between a Monte Carlo mean and its closed form


def _close(samples: torch.Tensor, expected: float | torch.Tensor) -> None:
    """Mean of ``samples`` (leading axis = draws) within Z standard errors of ``expected``."""
    samples = samples.double()
    mean = samples.mean(0)
    se = samples.std(0) / math.sqrt(samples.shape[0])
    dev = (mean - expected).abs()
    assert torch.all(dev <= Z * se + 1e-15), f"mean {mean} vs {expected}, {dev / se} standard errors"


# ---------------------------------------------------------------------------------------------
# Vocabulary (Def. 1)


def test_topics_are_disjoint_blocks_and_topic_of_is_ceil():
    T, v = 7, 5
    words = torch.arange(1, T * v + 1)
    assert torch.equal(topic_of(words, v), torch.tensor([math.ceil(i / v) for i in range(1, T * v + 1)]))
    assert topic_of(0, v) == 0  # [MASK]
    blocks = [set(topic_words(t, v)) for t in range(1, T + 1)]
    assert set().union(*blocks) == set(range(1, T * v + 1))
    assert sum(len(b) for b in blocks) == T * v  # pairwise disjoint, v words each
    assert all(topic_of(i, v) == t for t, b in enumerate(blocks, 1) for i in b)
    task = Topics(TopicsConfig(T=T, v=v))
    assert task.vocab == T * v + 1 and task.words == (1, T * v + 1) and task.mask_id == 0


# ---------------------------------------------------------------------------------------------
# Sampling


def test_shapes_lengths_and_padding():
    cfg = TopicsConfig(n_min=3, n_max=9, generator="uniform-tau", tau=2)
    out = Topics(cfg).sample_latent(generators([0, 1, 2], "data"), 400)
    n = out["length"]
    assert n.min() == 3 and n.max() == 9  # both ends of U{n_min..n_max} are drawn
    counts = torch.bincount(n.flatten() - 3, minlength=7).double()
    assert (counts - counts.mean()).abs().max() < Z * math.sqrt(counts.mean())  # uniform lengths
    W = out["tokens"].shape[-1]
    assert W == 9 and out["tokens"].dtype == torch.long and out["key_mask"].dtype == torch.bool
    assert torch.equal(out["key_mask"], torch.arange(W) < n.unsqueeze(-1))
    tok, km = out["tokens"], out["key_mask"]
    assert torch.all(tok[~km] == 0) and torch.all(tok[km] >= 1) and torch.all(tok[km] <= cfg.T * cfg.v)
    assert torch.equal(topic_of(tok, cfg.v), out["topic"])  # each word is drawn from its latent topic
    fixed = Topics(cfg).sample(generators([0, 1, 2], "data"), 400, length=12)
    assert fixed["tokens"].shape == (3, 400, 12) and torch.equal(fixed["tokens"][..., :W], tok)
    with pytest.raises(ValueError, match="n_max"):
        Topics(cfg).sample(generators([0], "data"), 2, length=8)


@pytest.mark.parametrize("generator", ["uniform-tau", "lda"])
def test_member_data_do_not_depend_on_other_members(generator):
    task = Topics(TopicsConfig(generator=generator))
    together = task.sample_latent(generators([5, 6, 7], "data"), 8, length=150)
    alone = task.sample_latent(generators([6], "data"), 8, length=150)
    for k in ("tokens", "key_mask", "theta", "topic", "length"):
        assert torch.equal(together[k][1], alone[k][0]), k
    c1, s1 = mask_tokens(together["tokens"], together["key_mask"], generators([5, 6, 7], "mask"), words=task.words)
    c2, s2 = mask_tokens(alone["tokens"], alone["key_mask"], generators([6], "mask"), words=task.words)
    assert torch.equal(c1[1], c2[0]) and torch.equal(s1[1], s2[0])


def test_uniform_tau_documents():
    cfg = TopicsConfig(generator="uniform-tau", T=6, v=4, tau=2, n_min=40, n_max=60)
    out = Topics(cfg).sample_latent(generators([3, 4], "data"), 3000)
    theta, topic, km = out["theta"].flatten(0, 1), out["topic"].flatten(0, 1), out["key_mask"].flatten(0, 1)
    chosen = theta > 0
    assert torch.all(chosen.sum(-1) == cfg.tau)
    assert torch.allclose(theta[chosen], torch.tensor(1 / cfg.tau, dtype=torch.float64), rtol=1e-15, atol=0)
    # Every word's topic is one of the document's τ topics ...
    in_doc = chosen.gather(-1, (topic - 1).clamp_min(0))
    assert torch.all(in_doc[km])
    # ... the subset is uniform (each topic in a document with probability τ/T) ...
    _close(chosen.double(), cfg.tau / cfg.T)
    # ... the position's topic uniform among the τ (its count over N has mean N/τ per chosen topic) ...
    one_hot = torch.nn.functional.one_hot(topic, cfg.T + 1)[..., 1:] * km[..., None]
    share = one_hot.sum(1).double() / km.sum(-1, keepdim=True)
    _close(share[chosen].reshape(-1, cfg.tau)[:, 0], 1 / cfg.tau)
    # ... and the word uniform within its topic.
    offset = (out["tokens"].flatten(0, 1)[km] - 1) % cfg.v
    _close(torch.nn.functional.one_hot(offset, cfg.v).double(), 1 / cfg.v)


def test_lda_theta_has_dirichlet_moments():
    T, alpha = 10, 0.1
    cfg = TopicsConfig(T=T, alpha=alpha, n_min=2, n_max=2)
    theta = Topics(cfg).sample_latent(generators([0, 1], "data"), 20000)["theta"].flatten(0, 1)  # (n, T)
    a0 = T * alpha
    mean, var, cov = 1 / T, alpha * (a0 - alpha) / (a0**2 * (a0 + 1)), -alpha * alpha / (a0**2 * (a0 + 1))
    assert torch.allclose(theta.sum(-1), torch.ones(theta.shape[0], dtype=torch.float64), rtol=0, atol=1e-12)
    _close(theta, mean)
    centred = theta - mean
    _close(centred**2, var)
    _close(centred[:, 0] * centred[:, 1], cov)
    # draw_theta is the plain-function form of the same draws (one member's generator).
    g = generators([0], "data")[0]
    torch.randint(2, 3, (20000,), generator=g)  # the member's length draws come first in sample_latent
    assert torch.equal(draw_theta(g, 20000, T, alpha), theta[:20000])


def test_lda_topic_shares_follow_theta():
    cfg = TopicsConfig(T=5, v=3, alpha=0.5)
    out = Topics(cfg).sample_latent(generators([8], "data"), 4000)
    km = out["key_mask"][0]
    one_hot = torch.nn.functional.one_hot(out["topic"][0], cfg.T + 1)[..., 1:] * km[..., None]
    share = one_hot.sum(1).double() / km.sum(-1, keepdim=True)
    _close(share - out["theta"][0], 0.0)  # E[count_t / N | θ] = θ_t


def _expected_distinct_topics(T: int, alpha: float, n_min: int, n_max: int) -> float:
    """Σ_t (1 − E(1 − θ_t)^N) with θ_t ~ Beta(α, (T − 1)α) and N ~ U{n_min..n_max}:
    E(1 − θ)^N = B(α, (T − 1)α + N) / B(α, (T − 1)α)."""
    a, b = alpha, (T - 1) * alpha

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    miss = sum(math.exp(log_beta(a, b + n) - log_beta(a, b)) for n in range(n_min, n_max + 1)) / (n_max - n_min + 1)
    return T * (1.0 - miss)


@pytest.mark.parametrize("T,alpha,n_min,n_max", [(10, 0.1, 100, 150), (6, 0.3, 5, 20)])
def test_lda_expected_number_of_distinct_topics(T, alpha, n_min, n_max):
    cfg = TopicsConfig(T=T, v=4, alpha=alpha, n_min=n_min, n_max=n_max)
    out = Topics(cfg).sample_latent(generators([11, 12], "data"), 3000)
    present = torch.nn.functional.one_hot(out["topic"], T + 1)[..., 1:].amax(-2)  # (E, B, T), padding is topic 0
    distinct = present.sum(-1).flatten().double()
    expected = _expected_distinct_topics(T, alpha, n_min, n_max)
    _close(distinct, expected)
    if (T, alpha) == (10, 0.1):
        # §6.1: "most sentences contain 2 to 4 topics": true as a majority (about 58% of documents)
        # though the mean is 4.22 — a topic with a small θ_t still shows up among 100-150 words.
        assert 4.2 < expected < 4.25
        assert ((distinct >= 2) & (distinct <= 4)).double().mean() > 0.5


# ---------------------------------------------------------------------------------------------
# Masking (§3.2) and F.17


def test_masking_frequencies():
    p_m, p_c, p_r = 0.3, 0.2, 0.25
    cfg = TopicsConfig(generator="uniform-tau", T=4, v=5, tau=2, n_min=50, n_max=80)
    task = Topics(cfg)
    docs = task.sample(generators([1, 2], "data"), 1500)
    tok, km = docs["tokens"], docs["key_mask"]
    corrupted, sel = mask_tokens(tok, km, generators([1, 2], "mask"), p_m, p_c, p_r, words=task.words)
    assert not torch.any(sel & ~km)  # padding never joins M ...
    assert torch.equal(corrupted[~sel], tok[~sel])  # ... and nothing outside M changes
    _close(sel[km].double(), p_m)
    c, t = corrupted[sel], tok[sel]
    Tv = cfg.T * cfg.v
    _close((c == 0).double(), 1 - p_c - p_r)  # set to [MASK]
    _close((c == t).double(), p_c + p_r / Tv)  # kept, or replaced by the same word
    _close(((c != 0) & (c != t)).double(), p_r * (1 - 1 / Tv))  # replaced by another word
    # Replacements are uniform over the words (positions whose fate was "replace", seen where c != t).
    other = c[(c != 0) & (c != t)]
    assert other.min() >= 1 and other.max() <= Tv
    # c != t removes the original word: condition on t to see the uniform law over the Tv − 1 others.
    t_other = t[(c != 0) & (c != t)]
    shift = (other - t_other) % Tv  # 1..Tv−1, uniform
    _close(torch.nn.functional.one_hot(shift - 1, Tv - 1).double(), 1 / (Tv - 1))


@pytest.mark.parametrize("generator", ["uniform-tau", "lda"])
def test_masked_document_distribution_is_F17(generator):
    """Given θ every real position of the masked document is iid with law F.17; pooled counts of
    each id over documents against Σ_d N_d q_d(i), in standard errors √(Σ_d N_d q_d(1 − q_d))."""
    p_m, p_c, p_r = 0.15, 0.1, 0.1
    cfg = TopicsConfig(generator=generator, T=5, v=4, tau=2, alpha=0.3)
    task = Topics(cfg)
    out = task.sample_latent(generators([21], "data"), 3000)
    corrupted, _ = mask_tokens(
        out["tokens"], out["key_mask"], generators([21], "mask"), p_m, p_c, p_r, words=task.words
    )
    km, n = out["key_mask"][0], out["length"][0].double()
    counts = (torch.nn.functional.one_hot(corrupted[0], cfg.vocab) * km[..., None]).sum((0, 1)).double()
    q = masked_distribution(word_distribution(out["theta"][0], cfg.v), p_m, p_c, p_r)  # (B, V)
    assert torch.allclose(q.sum(-1), torch.ones_like(n), rtol=0, atol=1e-12)
    expected = (n[:, None] * q).sum(0)
    se = (n[:, None] * q * (1 - q)).sum(0).sqrt()
    assert torch.all((counts - expected).abs() <= Z * se), (counts - expected) / se


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"tau": 11}, "tau"),
        ({"T": 3, "tau": 4}, "tau"),
        ({"tau": 0}, "tau"),
        ({"p_m": 1.5}, "p_m"),
        ({"p_c": -0.1}, "p_c"),
        ({"p_r": 2}, "p_r"),
        ({"p_c": 0.6, "p_r": 0.5}, "p_c + p_r"),
        ({"n_min": 0}, "n_min"),
        ({"n_min": 200, "n_max": 150}, "n_min"),
        ({"alpha": 0.0}, "alpha"),
        ({"generator": "plsa"}, "generator"),
        ({"T": 0}, "T"),
    ],
)
def test_bad_config_names_the_field(bad, field):
    with pytest.raises(ValidationError) as exc:
        TopicsConfig(**bad)
    assert field in str(exc.value)
    with pytest.raises(ConfigError, match=field.replace("+", "\\+")):
        validate_config(TopicsConfig, bad)
