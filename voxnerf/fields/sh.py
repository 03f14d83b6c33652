"""Real spherical harmonics of unit view directions (the decoder's view encoding), bands 0-4.

Each band l holds 2l + 1 functions, orthonormal over the sphere (m = -l ... l, as polynomials in x, y, z); the
signs of the odd-m functions are a convention that the decoder's first layer absorbs. Glossy real objects need the
higher bands: a highlight that moves across a surface as the camera turns is a sharp function of the direction.
"""

from __future__ import annotations

import torch

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
    """Real SH basis up to `degree` (0 ... MAX_DEGREE) of unit directions.

    Args:
        d: (N, 3) unit directions.
        degree: highest band.
    Returns:
        (N, (degree + 1) ** 2) basis values.
    """
    if not 0 <= degree <= MAX_DEGREE:
        raise ValueError(f"SH degree must be 0 to {MAX_DEGREE}, got {degree}")
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
