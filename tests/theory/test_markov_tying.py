"""θ_π of seed 003 Part I on the exact population loss: L = H(π), ∇L = 0, Hessian signs tied vs
untied, against closed forms and brute force."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.tasks.markov import entropy_rate, marginal_entropy, stationary
from tdlab.theory import markov_tying as th

N = 3  # 2**4 = 16 sequences: exact and fast


def model(d: int, tied: bool, seeds=(11,), std: float = 0.02) -> GPT:
    return GPT(GPTConfig(arch="sec2", d=d, max_len=N, tie_weights=tied, init_std=std), list(seeds)).double()


def test_enumerate_chain_is_the_stationary_chain():
    p, q = 0.3, 0.9
    tokens, probs = th.enumerate_chain(p, q, 5)
    assert tokens.shape == (32, 5) and math.isclose(float(probs.sum()), 1.0, abs_tol=1e-14)
    pi1 = stationary(p, q)[1]
    for n in range(5):  # every position has the stationary marginal
        assert math.isclose(float((probs * tokens[:, n]).sum()), pi1, abs_tol=1e-14)
    # P(x_1 = 0, x_2 = 1) = π0 p
    both = float(probs[(tokens[:, 0] == 0) & (tokens[:, 1] == 1)].sum())
    assert math.isclose(both, stationary(p, q)[0] * p, abs_tol=1e-14)


def test_population_loss_matches_a_loop_over_sequences():
    p, q = 0.6, 0.7
    m = model(3, False, seeds=(1, 2), std=0.5)
    got = th.population_loss(m, p, q, N, per_position=True)  # (E, N)
    want = torch.zeros(2, N, dtype=torch.float64)
    P = [[1 - p, p], [q, 1 - q]]
    pi = stationary(p, q)
    for seq in itertools.product([0, 1], repeat=N + 1):
        w = pi[seq[0]] * math.prod(P[a][b] for a, b in itertools.pairwise(seq))
        x = torch.tensor(seq).expand(2, 1, N + 1)
        with torch.no_grad():
            nll = F.cross_entropy(m(x[..., :-1]).reshape(-1, 2), x[..., 1:].reshape(-1), reduction="none").reshape(2, N)
        want += w * nll
    torch.testing.assert_close(got.detach(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("others", ["zero", "keep"])
@pytest.mark.parametrize("pq", [(0.5, 0.8), (0.2, 0.3)])
def test_theta_pi_loss_is_marginal_entropy_and_gradient_vanishes(tied, others, pq):
    p, q = pq
    m = th.set_theta_pi(model(3, tied, seeds=(5, 6), std=0.3), p, q, others)
    loss = th.population_loss(m, p, q, N)
    torch.testing.assert_close(
        loss.detach(), torch.full((2,), marginal_entropy(p, q), dtype=torch.float64), rtol=0, atol=1e-13
    )
    assert loss.min() > entropy_rate(p, q)  # a *bad* stationary point: above the global minimum
    for e in range(2):
        assert th.gradient(m, p, q, N, e).abs().max() < 1e-13
    with torch.no_grad():  # prediction is the marginal π1 at every position (claim ii)
        x = torch.randint(0, 2, (2, 3, N))
        probs = m(x).softmax(-1)[..., 1]
    torch.testing.assert_close(probs, torch.full_like(probs, stationary(p, q)[1]), rtol=0, atol=1e-14)


def test_hessian_matches_finite_differences_of_the_gradient():
    p, q = 0.4, 0.9
    m = model(2, False, std=0.4)
    H = th.hessian(m, p, q, N)
    fn, theta0, _ = th.flat_loss(m, p, q, N)
    eps = 1e-5
    for i in (0, 3, 7, theta0.numel() - 1):
        grads = []
        for s in (1, -1):
            t = theta0.clone()
            t[i] += s * eps
            t.requires_grad_(True)
            grads.append(torch.autograd.grad(fn(t), t)[0])
        torch.testing.assert_close(H[i], (grads[0] - grads[1]) / (2 * eps), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("pq,dims", [((0.5, 0.8), (2, 3)), ((0.9, 0.6), (2,)), ((0.2, 0.3), (2,))])
@pytest.mark.parametrize("tied", [True, False])
def test_canonical_theta_pi_has_the_closed_form_spectrum(pq, dims, tied):
    p, q = pq
    for d in dims:
        m = th.set_theta_pi(model(d, tied), p, q, "zero")
        ev = torch.linalg.eigvalsh(th.hessian(m, p, q, N))
        torch.testing.assert_close(ev, th.theta_pi_spectrum(p, q, d, tied, ev.numel()), rtol=0, atol=1e-12)


def test_hessian_sign_tied_vs_untied_at_a_generic_theta_pi():
    """p + q > 1: tied = positive semi-definite (local minimum); untied = a clearly negative
    eigenvalue (saddle), near -c with c = π0 π1 (p + q - 1)."""
    p, q = 0.5, 0.8
    c = th.switching_curvature(p, q)
    assert math.isclose(c, stationary(p, q)[0] * stationary(p, q)[1] * 0.3)
    tied = th.set_theta_pi(model(3, True, seeds=(3,)), p, q, "keep")
    lo, hi = th.hessian_extremes(th.hessian(tied, p, q, N))
    assert lo >= -1e-9 * hi and hi > 0
    untied = th.set_theta_pi(model(3, False, seeds=(3,)), p, q, "keep")
    lo, hi = th.hessian_extremes(th.hessian(untied, p, q, N))
    assert lo < -0.9 * c and hi > 0
    # p + q < 1: even tied, θ_π is a saddle (2c < 0).
    p, q = 0.2, 0.3
    tied = th.set_theta_pi(model(2, True, seeds=(3,)), p, q, "keep")
    lo, _ = th.hessian_extremes(th.hessian(tied, p, q, N))
    assert lo < 1.9 * th.switching_curvature(p, q) < 0


def test_perturbation_probe_separates_minimum_and_saddle():
    p, q = 0.5, 0.8
    g = torch.Generator().manual_seed(0)
    tied = th.set_theta_pi(model(2, True), p, q, "keep")
    rnd, bottom = th.perturbation_probe(tied, p, q, N, 1e-2, 8, g)
    assert rnd >= -1e-14 and bottom >= -1e-14
    untied = th.set_theta_pi(model(2, False), p, q, "keep")
    _, bottom = th.perturbation_probe(untied, p, q, N, 1e-2, 8, g)
    assert bottom < -0.9 * th.switching_curvature(p, q) * 1e-4 / 2


@pytest.mark.parametrize("tied", [True, False])
def test_landscape_readings_at_canonical_theta_pi(tied):
    """At the canonical θ_π: L = H(π), ∇L = 0, the Hessian's extremes and its whole spectrum the closed
    form's, as many parameters as the member has, and the probes' signs: no descent tied, descent untied."""
    p, q, d = 0.5, 0.8, 2
    m = th.set_theta_pi(model(d, tied, seeds=(4, 9)), p, q, "zero")
    gens = [torch.Generator().manual_seed(s) for s in (0, 1)]
    got = th.landscape_readings(m, p, q, N, 1e-2, 4, gens, (d, tied))
    assert len(got) == 2
    per_member = sum(t.numel() for t in m.parameters()) // 2
    for r in got:
        cf = th.theta_pi_spectrum(p, q, d, tied, per_member)
        assert math.isclose(r["loss"], marginal_entropy(p, q), abs_tol=1e-13)
        assert r["grad_max"] < 1e-13 and r["num_params"] == per_member
        assert math.isclose(r["eig_min"], float(cf[0]), abs_tol=1e-12)
        assert math.isclose(r["eig_max"], float(cf[-1]), abs_tol=1e-12)
        assert r["spectrum_err"] < 1e-12
        c = th.switching_curvature(p, q)
        if tied:
            assert r["probe_random"] >= -1e-14 and r["probe_bottom"] >= -1e-14
        else:
            assert r["probe_bottom"] < -0.9 * c * 1e-4 / 2
    # the same readings as the functions it reads, member by member (the second member's own generator)
    g1 = torch.Generator().manual_seed(1)
    assert (got[1]["probe_random"], got[1]["probe_bottom"]) == th.perturbation_probe(m, p, q, N, 1e-2, 4, g1, 1)
    assert "spectrum_err" not in th.landscape_readings(m, p, q, N, 1e-2, 4, gens[:1])[0]


def test_set_theta_pi_rejects_other_architectures():
    with pytest.raises(ValueError):
        th.set_theta_pi(GPT(GPTConfig(arch="gpt2", d=4), [0]), 0.5, 0.8)
    with pytest.raises(ValueError):
        th.enumerate_chain(0.5, 0.5, 0)


def test_theta_pi_on_a_model_without_the_output_bias_is_refused():
    """θ_π sets b = log(p/q): a sec2 model built without it (head_bias=False) is refused in one line, not
    with an AttributeError on None."""
    m = GPT(GPTConfig(arch="sec2", d=3, max_len=8, head_bias=False), [0]).double()
    with pytest.raises(ValueError, match="output bias b"):
        th.set_theta_pi(m, 0.2, 0.3)


def test_normalised_position():
    p, q = 0.5, 0.8
    assert th.normalised_position(marginal_entropy(p, q), p, q) == pytest.approx(1.0)
    assert th.normalised_position(entropy_rate(p, q), p, q) == pytest.approx(0.0)
    assert stationary(p, q)[1] == pytest.approx(0.5 / 1.3)
