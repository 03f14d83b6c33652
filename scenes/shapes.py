"""Solid primitives with exact signed distance functions and area-uniform surface sampling.

Every shape answers three questions, in world coordinates:
- `sdf(x)`: (N, 3) points -> (N,) signed distance, negative inside. Exact outside the solid (the Euclidean
  distance to it) and 1-Lipschitz everywhere, which is what `ToyScene.occupancy` relies on.
- `area()`: the surface area, to share surface samples between the parts of a scene.
- `sample_surface(n, generator)`: n points uniformly distributed over the surface by area, with their unit
  outward normals, both (n, 3) float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

Vec3 = tuple[float, float, float]


def as_tensor(values, like: torch.Tensor) -> torch.Tensor:
    """`values` (numbers or nested tuples) as a tensor with the dtype and device of `like`."""
    return torch.tensor(values, dtype=like.dtype, device=like.device)


@dataclass(frozen=True)
class Sphere:
    """A ball of `radius` around `center`."""

    center: Vec3
    radius: float

    def sdf(self, x: torch.Tensor) -> torch.Tensor:
        return (x - as_tensor(self.center, x)).norm(dim=-1) - self.radius

    def area(self) -> float:
        return 4 * math.pi * self.radius**2

    def sample_surface(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        normals = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator, dtype=torch.float64), dim=-1)
        return torch.tensor(self.center, dtype=torch.float64) + self.radius * normals, normals


@dataclass(frozen=True)
class Box:
    """An axis-aligned box: `center` ± `half_size` along each axis."""

    center: Vec3
    half_size: Vec3

    def _excess(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) how far each coordinate lies beyond its face pair (negative between the two faces)."""
        return (x - as_tensor(self.center, x)).abs() - as_tensor(self.half_size, x)

    def sdf(self, x: torch.Tensor) -> torch.Tensor:
        q = self._excess(x)
        return q.clamp(min=0).norm(dim=-1) + q.amax(dim=-1).clamp(max=0)

    def face(self, x: torch.Tensor) -> torch.Tensor:
        """(N,) int64 index of the face nearest inside points (and facing outside ones): 0..5 for +x, -x, +y, -y, +z, -z."""
        axis = self._excess(x).argmax(dim=-1)
        below = (x - as_tensor(self.center, x)).gather(-1, axis[:, None])[:, 0] < 0
        return 2 * axis + below.long()

    def _face_areas(self) -> torch.Tensor:
        """(6,) areas of the faces +x, -x, +y, -y, +z, -z."""
        a, b, c = self.half_size
        per_axis = torch.tensor([4 * b * c, 4 * a * c, 4 * a * b], dtype=torch.float64)
        return per_axis.repeat_interleave(2)

    def area(self) -> float:
        return float(self._face_areas().sum())

    def sample_surface(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        face = torch.multinomial(self._face_areas(), n, replacement=True, generator=generator)
        axis, sign = face // 2, 1.0 - 2.0 * (face % 2).double()
        half = torch.tensor(self.half_size, dtype=torch.float64)
        offset = (2 * torch.rand(n, 3, generator=generator, dtype=torch.float64) - 1) * half
        offset[torch.arange(n), axis] = sign * half[axis]
        normals = torch.zeros(n, 3, dtype=torch.float64)
        normals[torch.arange(n), axis] = sign
        return torch.tensor(self.center, dtype=torch.float64) + offset, normals


@dataclass(frozen=True)
class Torus:
    """A ring around the z axis through `center`: tube of radius `minor` around a circle of radius `major`."""

    center: Vec3
    major: float
    minor: float

    def sdf(self, x: torch.Tensor) -> torch.Tensor:
        p = x - as_tensor(self.center, x)
        from_circle = torch.stack([p[:, :2].norm(dim=-1) - self.major, p[:, 2]], -1)
        return from_circle.norm(dim=-1) - self.minor

    def area(self) -> float:
        return 4 * math.pi**2 * self.major * self.minor

    def _tube_angles(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """(n,) angles around the tube, drawn with density proportional to the ring's local circumference."""
        accepted = torch.zeros(0, dtype=torch.float64)
        while len(accepted) < n:
            phi = 2 * math.pi * torch.rand(2 * n, generator=generator, dtype=torch.float64)
            keep = torch.rand(2 * n, generator=generator, dtype=torch.float64) * (self.major + self.minor)
            accepted = torch.cat([accepted, phi[keep < self.major + self.minor * torch.cos(phi)]])
        return accepted[:n]

    def sample_surface(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        theta = 2 * math.pi * torch.rand(n, generator=generator, dtype=torch.float64)
        phi = self._tube_angles(n, generator)
        normals = torch.stack([phi.cos() * theta.cos(), phi.cos() * theta.sin(), phi.sin()], -1)
        on_circle = self.major * torch.stack([theta.cos(), theta.sin(), torch.zeros_like(theta)], -1)
        return torch.tensor(self.center, dtype=torch.float64) + on_circle + self.minor * normals, normals


Shape = Sphere | Box | Torus
