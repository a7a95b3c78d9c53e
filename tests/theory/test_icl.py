"""Closed forms of the seed paper (arXiv:2602.04872) against simulation and against each other."""

import itertools
import math

import numpy as np
import pytest
import torch

from tdlab.models.linear_attention import LCA
from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory import icl

F64 = torch.float64
APP_H = MultiModalPrompts()  # d1 = d2 = 16, per-modality norms ~ U[0, 5], zeta ~ N(0, 1)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_alpha_star_app_h_is_one_over_26():
    # Thm 6.2: alpha* = 2/(2 + m_lower + m_upper); App. H states 1/26 (per-modality reading).
    assert icl.alpha_star(APP_H) == pytest.approx(1 / 26, abs=1e-15)
    assert icl.alpha_star(MultiModalPrompts(norm_mode="total")) == pytest.approx(2 / 27, abs=1e-15)
    assert icl.alpha_star(MultiModalPrompts(norm_range=(1.0, 2.0))) == pytest.approx(2 / (2 + 2 + 8))


def test_alpha_star_T_values_and_limit():
    expected = {1: 0.0411, 2: 0.0402, 5: 0.0392, 10: 0.0389, 20: 0.0387, 50: 0.0385}
    got = {T: icl.alpha_star_T(T, APP_H) for T in expected}
    for T, v in expected.items():
        assert got[T] == pytest.approx(v, abs=5e-5)
    # T = 1 in closed form: E[(Z-1)(1 - alpha Z)] = 0 -> alpha = E[Z-1] / E[Z(Z-1)], with
    # E|m|^2 = 2 * 25/3 and E|m|^4 = 2 * 625/5 + 2 * (25/3)^2 for two U[0, 5] norms.
    e2, e4 = 50 / 3, 250 + 2 * (25 / 3) ** 2
    assert got[1] == pytest.approx(e2 / (e2 + e4), rel=1e-10)
    # it minimises the (strictly convex) Lemma D.1 loss, and decreases towards alpha* = 1/26
    for T in (2, 10):
        loss = icl.infinite_context_excess_risk(got[T] + np.array([-1e-5, 0.0, 1e-5]), T, APP_H)
        assert loss[1] < loss[0] and loss[1] < loss[2]
    values = list(got.values())
    assert all(a > b for a, b in itertools.pairwise(values)) and values[-1] > 1 / 26


def test_quadrature_moments():
    for task in (APP_H, MultiModalPrompts(norm_mode="total", norm_range=(1.0, 3.0)), MultiModalPrompts(dims=(1, 1, 1))):
        z, w = icl.z_quadrature(task)
        lo, hi = task.norm_range
        e_r2 = (lo**2 + lo * hi + hi**2) / 3
        assert w.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.sum(w * z) == pytest.approx(1 + task.n_norms * e_r2, rel=1e-12)


def test_bayes_risk_closed_form_vs_simulation():
    r = icl.bayes_risk(APP_H)
    assert r == pytest.approx(0.10905, abs=1e-5)
    mean, se = icl.bayes_risk_mc(APP_H, gen(0), 40_000)
    assert abs(mean - r) < 4 * se


def test_bayes_predictor_is_the_conditional_mean():
    # For fixed (m, zeta), E[y | x] is linear; least squares on a long prompt recovers w of Eq. (3.3).
    task = MultiModalPrompts(dims=(2, 2), norm_range=(0.5, 1.5))
    b = task.sample([gen(1)], 1, 100_000, dtype=F64)
    X, y = b.X[0, 0], b.y[0, 0]
    w_mc = torch.linalg.lstsq(X, y[:, None]).solution[:, 0]
    basis = torch.eye(4, dtype=F64)
    w_theory = icl.bayes_predictor(b.m[0, 0].expand(4, 4), b.zeta[0, 0].expand(4), basis)
    noise_sd = abs(b.zeta[0, 0].item()) / math.sqrt(1 + b.m[0, 0].square().sum().item())
    assert torch.allclose(w_mc, w_theory, atol=5 * noise_sd / math.sqrt(100_000))


def test_sample_mean_risk_vs_simulation():
    b = MultiModalPrompts(dims=(2, 2)).sample([gen(2)], 40_000, 5, dtype=F64)
    err2 = (b.y_query - icl.sample_mean_predictor(b.y)) ** 2
    se = err2.std().item() / math.sqrt(err2.numel())
    assert abs(err2.mean().item() - icl.sample_mean_risk(APP_H, 5)) < 4 * se


def test_posterior_mean_is_the_finite_context_bayes_rule():
    # A posterior mean is calibrated (E[y_q | y_hat] = y_hat) and its residual is orthogonal to every
    # function of the prompt; its risk lies between the oracle's E[1/Z] and any other rule's.
    task = MultiModalPrompts(dims=(1, 1), norm_range=(0.0, 2.0))
    b = task.sample([gen(3)], 2000, 3, dtype=F64)
    post = icl.posterior_mean_predictor(task, b.X, b.y, b.x_query, generator=gen(4), n_samples=10_000)[0]
    yq = b.y_query[0]
    res = yq - post
    slope = (yq * post).sum() / (post * post).sum()
    slope_se = torch.sqrt((res**2).mean() / (post * post).sum())
    assert abs(slope.item() - 1.0) < 4 * slope_se.item()
    plug_in = torch.einsum("nl,nld,nd->n", b.y[0], b.X[0], b.x_query[0]) / 3  # LSA/C.1 readout
    for h in (plug_in, b.y[0].sum(-1) * b.x_query[0, :, 0]):
        corr = (res * h).mean() / torch.sqrt((res**2).mean() * (h**2).mean())
        assert abs(corr.item()) < 4 / math.sqrt(2000)

    def risk(p):
        return ((yq - p) ** 2).mean().item()

    oracle = icl.bayes_predictor(b.m[0], b.zeta[0], b.x_query[0])
    assert risk(oracle) < risk(post) < min(risk(torch.zeros_like(yq)), risk(icl.sample_mean_predictor(b.y[0])))


def test_infinite_context_excess_risk_vs_long_context_lca():
    # Lemma D.1 (and its two-parameter analogue) at fixed (alpha, beta) against LCA_T simulated at
    # L and L/2 on nested contexts, Richardson-extrapolated to remove the O(1/L) term. The excess over
    # the Bayes predictor given the context is delta^T Lambda delta, delta = F_T^T y / L - w (Lemma C.1
    # readout, exact over x_q); dividing by zeta^2 (delta is proportional to zeta) uses E[zeta^2] = 1.
    task = MultiModalPrompts(dims=(3, 3), norm_range=(0.0, 1.5))
    T, N, L = 3, 1000, 300
    alphas, betas = [0.1, 0.25, 0.15], [-0.1, -0.25, -0.1]
    model = LCA(task.d, T, seeds=[0, 1, 2], param="two", dtype=F64)
    with torch.no_grad():
        model.alpha.copy_(torch.tensor(alphas)), model.beta.copy_(torch.tensor(betas))
    b = task.sample([gen(5)], N, L, dtype=F64)
    lam = torch.eye(task.d, dtype=F64) + b.m[..., :, None] * b.m[..., None, :]
    w = b.zeta[..., None] * b.m / (1 + b.m.square().sum(-1, keepdim=True))

    def excess(Lc):
        with torch.no_grad():
            _, inter = model(b.X[:, :, :Lc], b.y[:, :, :Lc], b.x_query, return_intermediates=True)
        delta = torch.einsum("enld,enl->end", inter["F"][-1], b.y[:, :, :Lc]) / Lc - w
        return torch.einsum("eni,enij,enj->en", delta, lam, delta) / b.zeta**2

    extrapolated = 2 * excess(L) - excess(L // 2)
    theory = icl.infinite_context_excess_risk(np.array(alphas), T, task, np.array(betas))
    mean, se = extrapolated.mean(-1).numpy(), extrapolated.std(-1).numpy() / math.sqrt(N)
    assert np.all(np.abs(mean - theory) < 4 * se + 1e-4), (mean, theory, se)
    # beta = -alpha is the one-parameter loss of Lemma D.1
    assert theory[0] == pytest.approx(icl.infinite_context_excess_risk(0.1, T, task))


def test_lemma_d1_formula_directly():
    z, w = icl.z_quadrature(APP_H)
    for T, a in [(1, 0.03), (10, 0.0389)]:
        direct = np.sum(w * (z - 1) / z * (1 - a * z) ** (2 * T))
        assert icl.infinite_context_excess_risk(a, T, APP_H) == pytest.approx(direct, rel=1e-12)


def test_alpha_of_beta_minimises_two_parameter_loss():
    T = 5
    for beta in (-0.02, -0.035):
        a = icl.alpha_of_beta(beta, T, APP_H)
        loss = icl.infinite_context_excess_risk(a + np.array([-1e-4, 0.0, 1e-4]), T, APP_H, beta)
        assert loss[1] < loss[0] and loss[1] < loss[2]  # the loss is quadratic in alpha
    # along beta = -alpha*_T the minimiser is close to alpha*_T (alpha*(beta) ~ -beta, App. F)
    a50 = icl.alpha_star_T(50, APP_H)
    assert icl.alpha_of_beta(-a50, 50, APP_H) == pytest.approx(a50, rel=0.05)


def test_whitening_error_limit_vs_long_context_model():
    # ||X F_T^T / L - I||_F / sqrt(d) -> sqrt((g(Z)^2 + (d-1) g(1)^2)/d), g(z) = (1 - alpha z)^T.
    task = MultiModalPrompts(dims=(3, 3), norm_range=(0.0, 1.5))
    b = task.sample([gen(6)], 8, 40_000, dtype=F64)
    alpha, T = 0.2, 4
    model = LCA(task.d, T, seeds=[0], alpha0=alpha, dtype=F64)
    _, inter = model(b.X, b.y, b.x_query, return_intermediates=True)
    got = icl.whitening_error(b.X, inter["F"][-1])
    limit = icl.whitening_error_limit(b.m, alpha, T)
    assert torch.allclose(got, limit, atol=0.02)
    assert icl.whitening_error(b.X, inter["F"][0]).sub(1).abs().max() < 1e-12  # F_0 = 0: error = 1


def test_whitening_error_limit_by_layer_vs_long_context_model_at_every_layer():
    task = MultiModalPrompts(dims=(3, 3), norm_range=(0.0, 1.5))
    b = task.sample([gen(7)], 8, 40_000, dtype=F64)
    alpha, T = 0.2, 3
    model = LCA(task.d, T, seeds=[0], alpha0=alpha, dtype=F64)
    _, inter = model(b.X, b.y, b.x_query, return_intermediates=True)
    limit = icl.whitening_error_limit_by_layer(b.m, alpha, T)
    assert limit.shape == (1, T + 1, 8)
    assert torch.equal(limit[:, 0], torch.ones(1, 8, dtype=F64))  # F_0 = 0: no whitening, error 1
    for t in range(T + 1):
        assert torch.allclose(icl.whitening_error(b.X, inter["F"][t]), limit[:, t], atol=0.02), t
        if t:
            assert torch.equal(limit[:, t], icl.whitening_error_limit(b.m, alpha, t))


def test_response_second_moment_is_the_zero_predictors_risk():
    from tdlab.theory.icl import response_second_moment

    for zeta in ("gaussian", "rademacher"):
        task = MultiModalPrompts(dims=(3, 2), zeta=zeta)
        b = task.sample([torch.Generator().manual_seed(5)], 40_000, 1, dtype=torch.float64)
        mc = float((b.y_query**2).mean())
        assert response_second_moment(task) == 1.0
        assert mc == pytest.approx(1.0, abs=4 * math.sqrt(9.0 if zeta == "gaussian" else 3.0) / 200)


def test_variance_floor_is_the_least_squares_excess_on_gaussian_tokens():
    """d E[1/Z] / (L - d - 1): the excess of the context's least-squares fit, which deep LCA tends to."""
    from tdlab.theory.icl import bayes_risk, finite_context_variance_floor

    task = MultiModalPrompts(dims=(3, 2))
    L = 40
    b = task.sample([torch.Generator().manual_seed(9)], 20_000, L, dtype=torch.float64)
    G = b.X.transpose(-1, -2) @ b.X
    w_ols = torch.linalg.solve(G, (b.X * b.y[..., None]).sum(-2, keepdim=False)[..., None])[..., 0]
    w = (b.zeta[..., None] * b.m) / (1 + (b.m**2).sum(-1, keepdim=True))
    excess = float((((w_ols - w) * b.x_query).sum(-1) ** 2).mean())
    assert finite_context_variance_floor(task, L) == pytest.approx(bayes_risk(task) * 5 / (L - 6))
    assert excess == pytest.approx(finite_context_variance_floor(task, L), rel=0.1)
    assert finite_context_variance_floor(task, 6) == math.inf


def test_lsa_floor_is_min_over_c_of_the_odd_part_and_an_lsa_attains_it():
    from tdlab.models.linear_attention import LSA
    from tdlab.theory.icl_stats import population_stats
    from tdlab.train.regression import predict

    z, w = icl.z_quadrature(APP_H)
    c = np.sum(w * (z - 1)) / np.sum(w * (z - 1) * z)
    floor = np.sum(w * (z - 1) * z * (c - 1 / z) ** 2)
    assert icl.lsa_infinite_context_floor(APP_H) == pytest.approx(floor, rel=1e-9)
    assert floor == pytest.approx(0.2060, abs=1e-3)
    # W^KQ = C.1 (K_x = I), last row of W^PV = (0, c): at infinite context the LSA predicts c zeta m.x_q
    lsa = LSA(APP_H.d, [0], dtype=F64)
    with torch.no_grad():
        lsa.W_PV[0, -1, -1] = float(c)
    st = population_stats(APP_H, [gen(0)], 40_000)
    with torch.no_grad():
        exc = ((predict(lsa, st) - st.bayes) ** 2).mean()
    assert float(exc) == pytest.approx(floor, rel=0.1)


def test_the_initialisations_sit_in_the_middle_of_their_windows():
    # m_upper = 50 (two modalities, norms on [0, 5]): windows (0, 2/51) for alpha and (-2/51, 0) for beta
    assert icl.one_param_init(APP_H) == pytest.approx(1 / 51)
    a0, b0 = icl.two_param_init(APP_H, 3)
    assert b0 == pytest.approx(-1 / 51) and a0 == pytest.approx(icl.alpha_of_beta(-1 / 51, 3, APP_H))
    assert icl.two_param_init(APP_H, 3, fraction=0.25)[1] == pytest.approx(-0.5 / 51)


def test_two_parameter_stationary_point_is_stationary_and_tends_to_alpha_star():
    beta0 = -1.0 / (APP_H.m_sq_range[1] + 1.0)  # the middle of Thm 6.3's window
    for T in (2, 20):
        a, b = icl.two_param_stationary(APP_H, T, icl.alpha_of_beta(beta0, T, APP_H), beta0)
        h = 1e-7
        ga = (
            icl.infinite_context_excess_risk(a + h, T, APP_H, beta=b)
            - icl.infinite_context_excess_risk(a - h, T, APP_H, beta=b)
        ) / (2 * h)
        gb = (
            icl.infinite_context_excess_risk(a, T, APP_H, beta=b + h)
            - icl.infinite_context_excess_risk(a, T, APP_H, beta=b - h)
        ) / (2 * h)
        assert abs(ga) < 1e-5 and abs(gb) < 1e-5
    assert a == pytest.approx(icl.alpha_star(APP_H), rel=0.02) and b == pytest.approx(-icl.alpha_star(APP_H), rel=0.02)


# ---------------------------------------------------------------------------------------------
# Fresh settings (issue 38) against numpy/scipy code written from the paper only: Z = 1 + |m|^2 with
# |m|^2 the sum of the squared uniform norms (Sec. 3 / App. H's law), the Bayes risk E[zeta^2 / Z] = E[1/Z]
# (Eq. 3.3), Lemma D.1's loss E[(Z - 1)/Z (1 - alpha Z)^{2T}] and its minimiser alpha*_T, Thm 6.2's limit,
# and the single-layer LSA floor from App. B's odd part (B.4)-(B.5), minimised over an unrestricted matrix B.

FRESH_002 = [
    MultiModalPrompts(dims=(2, 3), norm_range=(0.5, 2.0)),  # per-modality norms: |m|^2 in [0.5, 8]
    MultiModalPrompts(dims=(3, 1), norm_range=(1.0, 3.0), norm_mode="total", zeta="rademacher"),  # |m|^2 in [1, 9]
]


def _ind_expect(task, f):
    """E[f(Z)] by adaptive scipy quadrature over the independent uniform norms (one per modality, or one)."""
    from scipy.integrate import dblquad, quad

    lo, hi = task.norm_range
    if task.norm_mode == "total":
        return quad(lambda a: f(1 + a * a), lo, hi, epsabs=0.0, epsrel=1e-12)[0] / (hi - lo)
    assert len(task.dims) == 2
    val = dblquad(lambda a, b: f(1 + a * a + b * b), lo, hi, lo, hi, epsabs=0.0, epsrel=1e-12)[0]
    return val / (hi - lo) ** 2


def _ind_alpha_star_T(task, T):
    """Lemma D.1: the unique zero in (0, 1) of d/da E[(Z-1)/Z (1-aZ)^{2T}] = -2T E[(Z-1)(1-aZ)^{2T-1}]."""
    from scipy.optimize import brentq

    return brentq(lambda a: _ind_expect(task, lambda z: (z - 1) * (1 - a * z) ** (2 * T - 1)), 0.0, 1.0, xtol=1e-15)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # roundoff notes near 1e-16
@pytest.mark.parametrize("task", FRESH_002, ids=["d2+3-per-modality", "d3+1-total"])
def test_fresh_setting_closed_forms_against_independent_quadrature(task):
    lo, hi = task.norm_range
    k = len(task.dims) if task.norm_mode == "per_modality" else 1
    assert icl.alpha_star(task) == pytest.approx(2 / (2 + k * lo**2 + k * hi**2), rel=1e-15)
    assert abs(icl.bayes_risk(task) - _ind_expect(task, lambda z: 1 / z)) < 1e-13
    for T in (1, 2, 5, 12):
        a = _ind_alpha_star_T(task, T)
        assert abs(icl.alpha_star_T(T, task) - a) < 1e-10
        loss = _ind_expect(task, lambda z, a=a, T=T: (z - 1) / z * (1 - a * z) ** (2 * T))
        assert abs(icl.infinite_context_excess_risk(a, T, task) - loss) < 1e-12
    # Thm 6.2: alpha*_T -> alpha* (slowly: the gap at T = 60 is already below the gap at T = 12)
    assert abs(_ind_alpha_star_T(task, 60) - icl.alpha_star(task)) < abs(
        _ind_alpha_star_T(task, 12) - icl.alpha_star(task)
    )


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("task", FRESH_002, ids=["d2+3-per-modality", "d3+1-total"])
def test_fresh_setting_lsa_floor_against_an_unrestricted_least_squares(task):
    """App. B: the zeta-odd part of any LSA's infinite-context output is zeta m^T B x_q with B = u b^T + v A
    arbitrary (B.5); its excess risk E[(B^T m - m/Z)^T Lambda (B^T m - m/Z)] (x_q ~ N(0, Lambda), E zeta^2 = 1)
    is a least-squares problem in the d^2 entries of B, solved here on sampled m without assuming B = c I."""
    rng = np.random.default_rng(2602)
    n, d = 100_000, task.d
    lo, hi = task.norm_range
    g = rng.normal(size=(n, d))
    if task.norm_mode == "per_modality":
        blocks = np.split(g, np.cumsum(task.dims)[:-1], axis=1)
        m = np.concatenate(
            [b / np.linalg.norm(b, axis=1, keepdims=True) * rng.uniform(lo, hi, (n, 1)) for b in blocks], 1
        )
    else:
        m = g / np.linalg.norm(g, axis=1, keepdims=True) * rng.uniform(lo, hi, (n, 1))
    Z = 1 + (m * m).sum(1)
    # residual r = B^T m - m/Z; excess = |r|^2 + (m.r)^2 = |L^T r|^2 with Lambda = I + m m^T.
    # B^T m is linear in vec(B): (B^T m)_j = sum_i B_ij m_i, so the design for output j is m (x) e_j.
    # Stack both terms: rows j = 0..d-1 for |r|^2 and one row for m.r, each with target from m/Z.
    rows = np.zeros((n, d + 1, d * d))
    for j in range(d):
        rows[:, j, np.arange(d) * d + j] = m  # coefficient of B_ij in (B^T m)_j
    rows[:, d, :] = (m[:, :, None] * m[:, None, :]).reshape(n, d * d)  # m^T B^T m = sum_ij B_ij m_i m_j
    target = np.concatenate([m / Z[:, None], ((m * m).sum(1) / Z)[:, None]], axis=1)
    A, y = rows.reshape(-1, d * d), target.reshape(-1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    floor_mc = np.mean(((A @ coef - y) ** 2).reshape(n, d + 1).sum(1))
    B = coef.reshape(d, d)
    floor = icl.lsa_infinite_context_floor(task)
    # the unrestricted optimum is c I to sampling error, and its excess is tdlab's floor (in-sample, so <=)
    c = np.trace(B) / d
    assert np.max(np.abs(B - c * np.eye(d))) < 0.02
    assert abs(floor_mc - floor) < 0.01 * floor
    # and the c of the floor is 1-D exact: c* = E[(Z-1)] / E[(Z-1) Z] (min_c E[(Z-1) Z (c - 1/Z)^2])
    c_star = _ind_expect(task, lambda z: z - 1) / _ind_expect(task, lambda z: (z - 1) * z)
    exact = _ind_expect(task, lambda z: (z - 1) * z * (c_star - 1 / z) ** 2)
    assert abs(floor - exact) < 1e-12
    assert abs(c - c_star) < 0.02
