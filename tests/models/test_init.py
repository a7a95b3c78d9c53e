"""γ-init (seed 001 §3.4): empirical std = d^{-γ} per width and layout; per-member γ and generators."""

from __future__ import annotations

import pytest
import torch

from tdlab.models.init import gamma_normal_, gamma_std


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
