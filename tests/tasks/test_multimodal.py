"""MultiModalPrompts: the latent factor model of Sec. 3 (seed paper arXiv:2602.04872), App. H defaults."""

import math

import pytest
import torch
from scipy import stats

from tdlab.tasks.multimodal import MultiModalPrompts


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_shapes_dtypes_and_defaults():
    task = MultiModalPrompts()
    assert task.dims == (16, 16) and task.d == 32 and task.m_sq_range == (0.0, 50.0)
    b = task.sample(gens(0, 1, 2), n_prompts=5, L=7)
    assert b.shape == (3, 5, 7, 32)
    assert b.y.shape == (3, 5, 7) and b.x_query.shape == (3, 5, 32) and b.y_query.shape == (3, 5)
    assert b.m.shape == (3, 5, 32) and b.zeta.shape == (3, 5)
    assert all(t.dtype == torch.float32 for t in (b.X, b.y, b.x_query, b.y_query, b.m, b.zeta))
    assert task.sample(gens(0), 2, 3, dtype=torch.float64).X.dtype == torch.float64
    assert b.member(1).shape == (1, 5, 7, 32)


def test_same_seed_same_data_and_members_independent():
    task = MultiModalPrompts(dims=(3, 2))
    a = task.sample(gens(11, 12, 13), 4, 6)
    b = task.sample(gens(11, 12, 13), 4, 6)
    assert torch.equal(a.X, b.X) and torch.equal(a.y_query, b.y_query)
    # member e depends only on its own generator
    single = task.sample(gens(12), 4, 6)
    for name in ("X", "y", "x_query", "y_query", "m", "zeta"):
        assert torch.equal(getattr(a, name)[1], getattr(single, name)[0])
    assert not torch.equal(a.X[0], a.X[1])


def test_latent_factor_structure():
    # Eq. (3.1): y_i = zeta u_i and x_i = u_i m + noise, exactly, token by token.
    task = MultiModalPrompts(dims=(2, 3))
    n, L = 400, 50
    b = task.sample(gens(5), n, L, dtype=torch.float64)
    u = b.y / b.zeta[..., None]
    noise = (b.X - u[..., None] * b.m[..., None, :]).reshape(-1, 5)  # should be N(0, I_5)
    assert noise.mean(0).abs().max() < 5 / math.sqrt(n * L)
    assert (noise.T @ noise / (n * L) - torch.eye(5, dtype=torch.float64)).abs().max() < 5 * math.sqrt(2 / (n * L))


def test_conditional_covariance_eq_3_2():
    # Given (m, zeta), (x, y) ~ N(0, [[I + m m^T, zeta m], [zeta m^T, zeta^2]]).
    task = MultiModalPrompts(dims=(2, 2), norm_range=(1.0, 2.0))
    L = 40_000
    b = task.sample(gens(3), 3, L, dtype=torch.float64)
    for n in range(3):
        m, zeta = b.m[0, n], b.zeta[0, n]
        sigma = torch.zeros(5, 5, dtype=torch.float64)
        sigma[:4, :4] = torch.eye(4, dtype=torch.float64) + torch.outer(m, m)
        sigma[:4, 4] = sigma[4, :4] = zeta * m
        sigma[4, 4] = zeta**2
        tokens = torch.cat([b.X[0, n], b.y[0, n, :, None]], dim=-1)
        emp = tokens.T @ tokens / L
        se = torch.sqrt((torch.outer(sigma.diagonal(), sigma.diagonal()) + sigma**2) / L)
        assert ((emp - sigma).abs() <= 5 * se + 1e-12).all()


@pytest.mark.parametrize("mode", ["per_modality", "total"])
def test_norm_law(mode):
    # per_modality: each block's norm ~ U[lo, hi] (|m|^2 in [0, 50] in App. H); total: |m| ~ U[lo, hi].
    task = MultiModalPrompts(dims=(4, 3), norm_range=(0.5, 2.5), norm_mode=mode)
    m, _zeta = task.sample_latents(torch.Generator().manual_seed(8), 4000, dtype=torch.float64)
    norms = [m[:, :4].norm(dim=-1), m[:, 4:].norm(dim=-1)] if mode == "per_modality" else [m.norm(dim=-1)]
    for r in norms:
        assert stats.kstest(r.numpy(), stats.uniform(loc=0.5, scale=2.0).cdf).pvalue > 1e-3
    lo, hi = task.m_sq_range
    assert (lo, hi) == ((0.5, 12.5) if mode == "per_modality" else (0.25, 6.25))
    # isotropic directions: E[theta theta^T] = I / dim
    theta = m / m.norm(dim=-1, keepdim=True)
    assert torch.allclose(theta.T @ theta / 4000, torch.eye(7, dtype=torch.float64) / 7, atol=0.03)


@pytest.mark.parametrize("law", ["gaussian", "rademacher"])
def test_zeta_mean_zero_variance_one(law):
    _, zeta = MultiModalPrompts(zeta=law).sample_latents(torch.Generator().manual_seed(2), 40_000, dtype=torch.float64)
    assert abs(zeta.mean().item()) < 4 / math.sqrt(40_000)
    assert abs(zeta.var().item() - 1.0) < 0.03
    if law == "rademacher":
        assert set(zeta.unique().tolist()) == {-1.0, 1.0}


def test_rejects_bad_config():
    with pytest.raises(ValueError):
        MultiModalPrompts(norm_range=(2.0, 1.0))
    with pytest.raises(ValueError):
        MultiModalPrompts(norm_mode="sum")  # type: ignore[arg-type]
