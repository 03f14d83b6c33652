"""Opaque backgrounds of the real-capture toy scenes, hit analytically: every ray that leaves the scene's
objects ends on one, so images have no alpha and the background is content to reconstruct.

Each is a frozen dataclass (its fields go into `groundtruth.json`) with two methods:
- `hit(origins, dirs)`: rays (R, 3), unit directions (R, 3) -> (R,) distance to the surface (inf: a miss).
- `color(x)`: points on the surface (R, 3) -> RGB (R, 3) in [0, 1].

Both patterns are tiles whose hue and brightness change from tile to tile, so a blurred or grey background
scores badly against them. A shell can also be speckled: each tile split into a finer grid of cells of random
brightness, corners and blobs enough for structure from motion (SIFT) to match views of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from voxnerf.scenes.colors import speckle
from voxnerf.scenes.shapes import Vec3, as_tensor

DARK_TILE = 0.55  # brightness of every other tile; the rest are at full brightness


def hue(phase: torch.Tensor) -> torch.Tensor:
    """A rainbow color for each phase (N,) (period 1): (N, 3) in [0.1, 0.9]."""
    offsets = torch.tensor([0.0, 1 / 3, 2 / 3], dtype=phase.dtype, device=phase.device)
    return 0.5 + 0.4 * torch.cos(2 * math.pi * (phase[:, None] - offsets))


def checker(i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """(N, 1) brightness of tile (i, j) (integer tensors (N,)): 1 or DARK_TILE, alternating."""
    return torch.where((i + j) % 2 == 0, 1.0, DARK_TILE)[:, None]


@dataclass(frozen=True)
class Shell:
    """The inside of a sphere of `radius` around the origin, tiled by direction: `sectors` slices of azimuth
    (hue follows the azimuth) times `bands` slices of elevation, brightness alternating like a checkerboard;
    with `speckles` > 0 each tile is split into speckles x speckles cells of random brightness."""

    radius: float
    sectors: int = 16
    bands: int = 8
    speckles: int = 0

    def hit(self, origins: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
        b = (origins * dirs).sum(-1)
        c = (origins * origins).sum(-1) - self.radius**2
        return -b + torch.sqrt((b * b - c).clamp(min=0))

    def color(self, x: torch.Tensor) -> torch.Tensor:
        u = torch.nn.functional.normalize(x, dim=-1)
        azimuth = torch.atan2(u[:, 1], u[:, 0]) / (2 * math.pi) % 1.0
        elevation = torch.asin(u[:, 2].clamp(-1, 1)) / math.pi + 0.5
        sector, band = (azimuth * self.sectors).floor().long(), (elevation * self.bands).floor().long()
        color = hue(azimuth) * checker(sector, band)
        if self.speckles:
            fine = self.speckles
            cells = torch.stack([azimuth * self.sectors * fine, elevation * self.bands * fine], -1).floor().long()
            color = color * speckle(cells).to(color.dtype)
        return color


@dataclass(frozen=True)
class Wall:
    """The plane through `point` with unit `normal` facing away from the cameras, tiled in squares of `tile`
    along two in-plane axes; the hue drifts slowly from tile to tile, brightness alternates like a checkerboard."""

    point: Vec3
    normal: Vec3
    tile: float

    def hit(self, origins: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
        n = as_tensor(self.normal, origins)
        t = ((as_tensor(self.point, origins) - origins) @ n) / (dirs @ n)
        return torch.where(t > 0, t, torch.inf)

    def _axes(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two unit vectors (3,) spanning the plane."""
        n = as_tensor(self.normal, like)
        helper = as_tensor((0.0, 0.0, 1.0) if abs(self.normal[2]) < 0.9 else (1.0, 0.0, 0.0), like)
        u = torch.nn.functional.normalize(torch.linalg.cross(helper, n), dim=0)
        return u, torch.linalg.cross(n, u)

    def color(self, x: torch.Tensor) -> torch.Tensor:
        u, v = self._axes(x)
        p = x - as_tensor(self.point, x)
        i, j = (p @ u / self.tile).floor().long(), (p @ v / self.tile).floor().long()
        return hue((0.09 * i + 0.13 * j).to(x.dtype) % 1.0) * checker(i, j)


Background = Shell | Wall
