"""Real spherical harmonics of unit view directions (the decoder's view encoding), bands 0-4.

Each band l holds 2l + 1 functions, orthonormal over the sphere (m = -l ... l, as polynomials in x, y, z); the
signs of the odd-m functions are a convention that the decoder's first layer absorbs. Glossy real objects need the
higher bands: a highlight that moves across a surface as the camera turns is a sharp function of the direction.

The formulas below define the basis; `sh_encode` evaluates it as one product of the directions' monomials
x^a y^b z^c (a + b + c <= degree) with a coefficient matrix solved once from the formulas: a dozen operations for
any degree, where the formulas dispatch one per product (about a hundred at degree 4).
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F

MAX_DEGREE = 4
C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
C3 = (0.5900435899266435, 2.890611442640554, 0.4570457994644658, 0.3731763325901154, 1.445305721320277)
C4 = (2.5033429417967046, 1.7701307697799304, 0.9461746957575601, 0.6690465435572892, 0.10578554691520431,
      0.47308734787878004, 0.6258357354491761)


def _band3(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> list[torch.Tensor]:
    xx, yy, zz = x * x, y * y, z * z
    return [C3[0] * y * (3 * xx - yy), C3[1] * x * y * z, C3[2] * y * (4 * zz - xx - yy),
            C3[3] * z * (2 * zz - 3 * xx - 3 * yy), C3[2] * x * (4 * zz - xx - yy), C3[4] * z * (xx - yy),
            C3[0] * x * (xx - 3 * yy)]


def _band4(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> list[torch.Tensor]:
    xx, yy, zz = x * x, y * y, z * z
    return [C4[0] * x * y * (xx - yy), C4[1] * y * z * (3 * xx - yy), C4[2] * x * y * (7 * zz - 1),
            C4[3] * y * z * (7 * zz - 3), C4[4] * (35 * zz * zz - 30 * zz + 3), C4[3] * x * z * (7 * zz - 3),
            C4[5] * (xx - yy) * (7 * zz - 1), C4[1] * x * z * (xx - 3 * yy),
            C4[6] * (xx * (xx - 3 * yy) - yy * (3 * xx - yy))]


def sh_encode(d: torch.Tensor, degree: int) -> torch.Tensor:
    """Real SH basis up to `degree` (0 ... MAX_DEGREE) of unit directions: `sh_formulas` as monomials @ coefficients.

    Args:
        d: (N, 3) unit directions.
        degree: highest band.
    Returns:
        (N, (degree + 1) ** 2) basis values, in the dtype of `d`.
    """
    _check_degree(degree)
    columns, coefficients = _monomial_basis_on(degree, d.device, d.dtype)
    powers = F.pad(d.unsqueeze(-1).expand(-1, -1, degree).cumprod(-1), (1, 0), value=1.0)  # (N, 3, degree + 1)
    x, y, z = powers.flatten(1).index_select(1, columns).view(len(d), 3, -1).unbind(1)  # (N, K): x^a, y^b, z^c
    return (x * y * z) @ coefficients


def sh_formulas(d: torch.Tensor, degree: int) -> torch.Tensor:
    """The basis of `sh_encode`, band by band from its formulas: (N, 3) unit directions -> (N, (degree + 1) ** 2)."""
    _check_degree(degree)
    x, y, z = d.unbind(-1)
    bands = [torch.full_like(x, C0)]
    if degree >= 1:
        bands += [-C1 * y, C1 * z, -C1 * x]
    if degree >= 2:
        bands += [C2[0] * x * y, C2[1] * y * z, C2[2] * (2 * z * z - x * x - y * y), C2[3] * x * z,
                  C2[4] * (x * x - y * y)]
    if degree >= 3:
        bands += _band3(x, y, z)
    if degree >= 4:
        bands += _band4(x, y, z)
    return torch.stack(bands, -1)


def _check_degree(degree: int) -> None:
    if not 0 <= degree <= MAX_DEGREE:
        raise ValueError(f"SH degree must be 0 to {MAX_DEGREE}, got {degree}")


@cache
def _monomial_basis(degree: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The monomials x^a y^b z^c of total degree <= `degree` and the basis in them.

    Returns:
        columns: for x, y and z, (K,) int64 columns of each monomial's power in `sh_encode`'s powers table, (N, 3,
            degree + 1) flattened: x^0 ... x^degree, y^0 ..., z^0 ....
        coefficients: (K, (degree + 1) ** 2) float64, solved by least squares from `sh_formulas` at 4K generic
            points (every basis function is such a polynomial, so the fit is exact to rounding).
    """
    exponents = torch.tensor([(a, b, c) for a in range(degree + 1) for b in range(degree + 1 - a)
                              for c in range(degree + 1 - a - b)])
    points = torch.randn(4 * len(exponents), 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    monomials = (points.unsqueeze(1) ** exponents).prod(-1)
    coefficients = torch.linalg.lstsq(monomials, sh_formulas(points, degree)).solution
    columns = tuple(exponents[:, axis] + axis * (degree + 1) for axis in range(3))
    return columns, coefficients


@cache
def _monomial_basis_on(degree: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`_monomial_basis` where `sh_encode` uses it: the three axes' columns as one (3K,) index, and the coefficients
    (K, (degree + 1) ** 2) in `dtype`, on `device` (made once, not copied there at every call)."""
    columns, coefficients = _monomial_basis(degree)
    return torch.cat(columns).to(device), coefficients.to(device, dtype)
