"""Surface colors: view-independent (Lambertian) RGB in [0, 1] at any point, (N, 3) -> (N, 3).

Each is a frozen dataclass, so a scene's colors are plain parameters that `groundtruth.json` can record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from voxnerf.scenes.shapes import Box, Vec3, as_tensor

RGB = tuple[float, float, float]
SPECKLE_FLOOR = 0.3  # brightness of the darkest speckle cell, as a fraction of the color it darkens
HASH_PRIMES = (73856093, 19349663, 83492791)

# Face colors of `FaceColors`, in `Box.face` order: +x red, -x cyan, +y green, -y magenta, +z blue, -z yellow.
FACE_PALETTE: tuple[RGB, ...] = (
    (0.9, 0.1, 0.1),
    (0.1, 0.9, 0.9),
    (0.1, 0.9, 0.1),
    (0.9, 0.1, 0.9),
    (0.1, 0.1, 0.9),
    (0.9, 0.9, 0.1),
)


def speckle(cells: torch.Tensor) -> torch.Tensor:
    """(N, 1) brightness in [SPECKLE_FLOOR, 1] of each integer cell (N, K), K <= 3, from a hash of its indices."""
    code = torch.zeros(len(cells), dtype=torch.long, device=cells.device)
    for k in range(cells.shape[1]):
        code = code ^ (cells[:, k] * HASH_PRIMES[k])
    return SPECKLE_FLOOR + (1 - SPECKLE_FLOOR) * ((code % 1009).to(torch.float32) / 1008)[:, None]


@dataclass(frozen=True)
class Constant:
    """One color everywhere."""

    rgb: RGB

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return as_tensor(self.rgb, x).expand(len(x), 3)


@dataclass(frozen=True)
class Radial:
    """0.5 + 0.4 * the unit direction from `center`: a smooth gradient that differs on every side."""

    center: Vec3

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 + 0.4 * torch.nn.functional.normalize(x - as_tensor(self.center, x), dim=-1)


@dataclass(frozen=True)
class FaceColors:
    """A different flat color on each face of `box`, from `palette` (in `Box.face` order)."""

    box: Box
    palette: tuple[RGB, ...] = FACE_PALETTE

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return as_tensor(self.palette, x)[self.box.face(x)]


@dataclass(frozen=True)
class RingHue:
    """A hue that goes once around the rainbow with the angle about the z axis through `center`."""

    center: Vec3

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        p = x - as_tensor(self.center, x)
        angle = torch.atan2(p[:, 1], p[:, 0])
        phases = angle[:, None] - as_tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3], x)
        return 0.5 + 0.4 * torch.cos(phases)


@dataclass(frozen=True)
class Speckled:
    """`base` darkened by a random brightness per cube of side `cell` (texture for structure from motion)."""

    base: Constant | Radial | FaceColors | RingHue
    cell: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) * speckle(torch.floor(x / self.cell).long()).to(x.dtype)


Color = Constant | Radial | FaceColors | RingHue | Speckled
