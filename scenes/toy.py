"""ToyScene: colored solids inside the box [-1, 1]^3 whose geometry, density and color are known exactly.

The density is a soft step of the signed distance,

    sigma(x) = density_scale * sigmoid(-sdf(x) / density_eps),

full density `density_scale` inside, half of it on the surface, fading outside over a few `density_eps`. The
defaults (400 per unit, eps 0.005) make the step from 10% to 90% about 0.022 units thick, about 1.4 cells of a
128^3 grid over [-1, 1]^3: sharp, yet a 128^3 grid can hold it. With these values a ray that meets the surface
head-on is 75% absorbed by the time it reaches sdf = 0, and its expected stopping point lies about 0.004
units (0.9 eps) outside the true surface.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from voxnerf.scenes.colors import Color
from voxnerf.scenes.shapes import Shape

BOX_MIN, BOX_MAX = -1.0, 1.0
SCENE_RADIUS = 0.85  # every catalog scene lies inside the ball of this radius around the origin
DENSITY_SCALE = 400.0
DENSITY_EPS = 0.005
OCCUPANCY_REFINE_LEVELS = 3


@dataclass(frozen=True)
class Part:
    """One solid of a scene and the color of its surface."""

    shape: Shape
    color: Color


@dataclass(frozen=True)
class ToyScene:
    """A union of disjoint colored solids, with ground truth for every test that needs one.

    Attributes:
        name: the catalog name (`voxnerf scene make NAME`).
        description: one line for `voxnerf scene list`.
        parts: the solids; they must not overlap (surface sampling assumes every part's surface is visible).
        density_scale: sigma deep inside a solid, per world unit.
        density_eps: width of the density's soft step, world units.
    """

    name: str
    description: str
    parts: tuple[Part, ...]
    density_scale: float = DENSITY_SCALE
    density_eps: float = DENSITY_EPS

    def _part_sdfs(self, x: torch.Tensor) -> torch.Tensor:
        """(N, P) signed distance of the points x (N, 3) to each of the P parts."""
        return torch.stack([part.shape.sdf(x) for part in self.parts], -1)

    def sdf(self, x: torch.Tensor) -> torch.Tensor:
        """Signed distance (N,) of points x (N, 3) to the union of the parts, negative inside."""
        return self._part_sdfs(x).amin(dim=-1)

    def density_from_sdf(self, sdf: torch.Tensor) -> torch.Tensor:
        """Volume density sigma (any shape) for signed distances of the same shape."""
        return self.density_scale * torch.sigmoid(-sdf / self.density_eps)

    def density(self, x: torch.Tensor) -> torch.Tensor:
        """Volume density sigma (N,) at points x (N, 3), per world unit."""
        return self.density_from_sdf(self.sdf(x))

    def _color_of_nearest(self, x: torch.Tensor, part_sdfs: torch.Tensor) -> torch.Tensor:
        """(N, 3) color at x (N, 3) of the part with the smallest signed distance (part_sdfs (N, P))."""
        colors = torch.stack([part.color(x) for part in self.parts], 1)
        nearest = part_sdfs.argmin(dim=-1)
        return colors[torch.arange(len(x), device=x.device), nearest]

    def color(self, x: torch.Tensor) -> torch.Tensor:
        """RGB (N, 3) in [0, 1] at points x (N, 3): the color of the nearest part's surface there."""
        return self._color_of_nearest(x, self._part_sdfs(x))

    def field(self, x: torch.Tensor, dirs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Radiance field form for `toy_scenes.reference.render_rays`: points x (N, 3) and (ignored, the
        color is view independent) unit directions (N, 3) -> sigma (N,), rgb (N, 3)."""
        part_sdfs = self._part_sdfs(x)
        return self.density_from_sdf(part_sdfs.amin(dim=-1)), self._color_of_nearest(x, part_sdfs)

    def normal(self, x: torch.Tensor) -> torch.Tensor:
        """Unit outward normals (N, 3): the normalized gradient of the SDF at points x (N, 3), by autograd."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.sdf(x).sum(), x)
        return torch.nn.functional.normalize(grad, dim=-1)

    def occupancy(self, resolution: int) -> torch.Tensor:
        """Ground-truth occupied cells of a resolution^3 grid over the box [-1, 1]^3.

        Cell [i, j, k] spans [-1 + i*c, -1 + (i+1)*c] in x (j in y, k in z), c = 2 / resolution. It is occupied
        iff the closed cell meets the closed solid {sdf <= 0}. This is exact up to a tolerance: a cell that the
        solid misses by less than c * sqrt(3) / 2**(OCCUPANCY_REFINE_LEVELS + 1) (0.11 c) may also count.

        Returns:
            (resolution, resolution, resolution) bool.
        """
        cell = (BOX_MAX - BOX_MIN) / resolution
        axis = BOX_MIN + cell * (torch.arange(resolution, dtype=torch.float64) + 0.5)
        centers = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
        occupied = self._cells_meeting_solid(centers, cell / 2)
        return occupied.reshape(resolution, resolution, resolution)

    def _cells_meeting_solid(self, centers: torch.Tensor, half: float) -> torch.Tensor:
        """(N,) bool: does the cube of half-size `half` around each center (N, 3) meet the solid?

        A cube whose center has sdf <= 0 meets it; one whose center is farther than its half-diagonal cannot (the
        SDF is 1-Lipschitz); the rest are split into 8 sub-cubes and asked again, OCCUPANCY_REFINE_LEVELS times.
        Sub-cubes still undecided after that count as meeting it.
        """
        occupied = torch.zeros(len(centers), dtype=torch.bool)
        owner = torch.arange(len(centers))
        corners = torch.tensor([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], dtype=torch.float64)
        for level in range(OCCUPANCY_REFINE_LEVELS + 1):
            if level > 0:
                half = half / 2
                centers = (centers[:, None, :] + half * corners).reshape(-1, 3)
                owner = owner.repeat_interleave(8)
            d = self.sdf(centers)
            occupied[owner[d <= 0]] = True
            undecided = (d > 0) & (d <= half * math.sqrt(3)) & ~occupied[owner]
            centers, owner = centers[undecided], owner[undecided]
        occupied[owner] = True
        return occupied

    def sample_surface(self, n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """n points uniformly distributed (by area) on the exact surface, with their unit outward normals.

        Returns:
            points (n, 3) and normals (n, 3), deterministic for a given seed.
        """
        generator = torch.Generator().manual_seed(seed)
        areas = torch.tensor([part.shape.area() for part in self.parts], dtype=torch.float64)
        which = torch.multinomial(areas, n, replacement=True, generator=generator)
        points, normals = torch.zeros(n, 3, dtype=torch.float64), torch.zeros(n, 3, dtype=torch.float64)
        for p, part in enumerate(self.parts):
            mine = which == p
            points[mine], normals[mine] = part.shape.sample_surface(int(mine.sum()), generator)
        return points.to(dtype), normals.to(dtype)

    def parameters(self) -> dict:
        """Everything that defines the scene, as plain values (for groundtruth.json)."""
        parts = [
            {"shape": type(p.shape).__name__, **asdict(p.shape), "color": {"kind": type(p.color).__name__, **asdict(p.color)}}
            for p in self.parts
        ]
        return {
            "scene": self.name,
            "description": self.description,
            "parts": parts,
            "density": {"formula": "sigma = scale * sigmoid(-sdf / eps)", "scale": self.density_scale, "eps": self.density_eps},
            "box": [[BOX_MIN] * 3, [BOX_MAX] * 3],
        }
