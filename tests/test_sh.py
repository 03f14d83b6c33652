"""The decoder's view encoding (voxnerf.fields.sh): real spherical harmonics, orthonormal over the sphere."""

import math

import pytest
import torch

from voxnerf.fields.sh import MAX_DEGREE, sh_encode


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
