"""The decoder's view encoding (voxnerf.fields.sh): real spherical harmonics, orthonormal over the sphere."""

import math

import pytest
import torch

from voxnerf.fields.decoder import ColorDecoder
from voxnerf.fields.sh import MAX_DEGREE, sh_encode, sh_formulas


def fibonacci_sphere(n: int) -> torch.Tensor:
    """(n, 3) float64 unit directions spread evenly over the sphere (equal areas)."""
    k = torch.arange(n, dtype=torch.float64) + 0.5
    z = 1 - 2 * k / n
    phi = k * math.pi * (3 - math.sqrt(5))
    r = torch.sqrt(1 - z * z)
    return torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], -1)


@pytest.mark.parametrize("degree", range(MAX_DEGREE + 1))
def test_every_band_is_orthonormal_over_the_sphere(degree):
    basis = sh_encode(fibonacci_sphere(200_000), degree)
    gram = basis.T @ basis * (4 * math.pi / len(basis))  # the integral of Y_i Y_j over the sphere
    assert basis.shape[1] == (degree + 1) ** 2
    torch.testing.assert_close(gram, torch.eye(len(gram), dtype=torch.float64), atol=1e-4, rtol=0)


def test_degrees_beyond_the_highest_band_are_refused():
    with pytest.raises(ValueError, match=f"0 to {MAX_DEGREE}"):
        sh_encode(torch.zeros(1, 3), MAX_DEGREE + 1)


@pytest.mark.parametrize("degree", range(MAX_DEGREE + 1))
def test_the_monomial_product_is_the_formulas(degree):
    d = torch.nn.functional.normalize(torch.randn(1000, 3, generator=torch.Generator().manual_seed(1),
                                                  dtype=torch.float64), dim=-1)
    torch.testing.assert_close(sh_encode(d, degree), sh_formulas(d, degree), atol=1e-12, rtol=0)


def test_a_view_encoded_per_ray_colors_as_one_encoded_per_point():
    torch.manual_seed(0)
    decoder = ColorDecoder(feature_dim=6, hidden=16, layers=2, sh_degree=4)
    torch.nn.init.normal_(decoder.mlp[-1].weight)
    dirs = torch.nn.functional.normalize(torch.randn(5, 3), dim=-1)
    rays = torch.tensor([0, 0, 3, 4, 4, 4, 1])
    features = torch.randn(len(rays), 6)
    per_ray = decoder(features, dirs, rays=rays)
    torch.testing.assert_close(per_ray, decoder(features, dirs[rays]))
    assert per_ray.std(0).min() > 0.01  # the colors differ: the comparison is not between constants
