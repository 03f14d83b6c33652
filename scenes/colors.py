"""Surface colors: view-independent (Lambertian) RGB in [0, 1] at any point, (N, 3) -> (N, 3).

Each is a frozen dataclass, so a scene's colors are plain parameters that `groundtruth.json` can record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from voxnerf_scenes.shapes import Box, Vec3, as_tensor

RGB = tuple[float, float, float]

# Face colors of `FaceColors`, in `Box.face` order: +x red, -x cyan, +y green, -y magenta, +z blue, -z yellow.
FACE_PALETTE: tuple[RGB, ...] = (
    (0.9, 0.1, 0.1),
    (0.1, 0.9, 0.9),
    (0.1, 0.9, 0.1),
    (0.9, 0.1, 0.9),
    (0.1, 0.1, 0.9),
    (0.9, 0.9, 0.1),
)


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


Color = Constant | Radial | FaceColors | RingHue
