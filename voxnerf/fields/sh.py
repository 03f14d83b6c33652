"""Real spherical harmonics of unit view directions (the decoder's view encoding)."""

from __future__ import annotations

import torch

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)


def sh_encode(d: torch.Tensor, degree: int) -> torch.Tensor:
    """Real SH basis up to `degree` (0, 1 or 2) of unit directions.

    Args:
        d: (N, 3) unit directions.
        degree: highest band.
    Returns:
        (N, (degree + 1) ** 2) basis values.
    """
    if degree not in (0, 1, 2):
        raise ValueError(f"SH degree must be 0, 1 or 2, got {degree}")
    x, y, z = d.unbind(-1)
    bands = [torch.full_like(x, C0)]
    if degree >= 1:
        bands += [-C1 * y, C1 * z, -C1 * x]
    if degree >= 2:
        bands += [C2[0] * x * y, C2[1] * y * z, C2[2] * (2 * z * z - x * x - y * y), C2[3] * x * z,
                  C2[4] * (x * x - y * y)]
    return torch.stack(bands, -1)
