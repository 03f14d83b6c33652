"""Where the grid lies in the scene: world -> unit box -> grid coordinates in [-1, 1]^3.

World points enter the unit box by a shift and a scale, `(x - center) * scale` (chosen by `voxnerf.normalize`);
rays reach the renderer in unit-box coordinates. The space's kind then decides what the grid covers:

- "box": the grid is the unit box itself (bounded objects: Blender, masked captures).
- "contract": unbounded scenes. The unit box holds the cameras and the region of interest; outside it, a point at
  L-infinity radius r > 1 is pulled in to radius 2 - 1/r (the L-infinity form of Mip-NeRF 360's contraction,
  which keeps the inner region an axis-aligned box), and the grid covers the contracted cube [-2, 2]^3 scaled
  by 1/2. The inner box gets the middle half of the grid; everything out to infinity gets the shell around it.
- "ndc": forward-facing scenes. Normalized device coordinates of a reference camera (at the unit-box origin,
  near plane at depth 1): x and y across its image, z from the near plane (-1) to infinity (+1). NDC maps
  straight lines to straight lines, so rays are transformed once and marched like in a box.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from voxnerf.errors import VoxnerfError

KINDS = ("box", "contract", "ndc")
MIN_FORWARD = 1e-4  # NDC: rays are tilted at least this much toward the reference camera's view direction


def contract(x: torch.Tensor) -> torch.Tensor:
    """(N, 3) unit-box points -> (N, 3) contracted points in [-2, 2]^3 (identity inside the unit box)."""
    r = x.abs().amax(-1, keepdim=True).clamp_min(1e-12)
    return torch.where(r <= 1, x, (2 - 1 / r) * x / r)


def uncontract(c: torch.Tensor) -> torch.Tensor:
    """Inverse of `contract` on (N, 3) points with L-infinity radius < 2."""
    rho = c.abs().amax(-1, keepdim=True).clamp(1e-12, 2 - 1e-6)
    return torch.where(rho <= 1, c, c / (rho * (2 - rho)))


@dataclass
class Space:
    """How unit-box points map to the grid (see the module docstring).

    Attributes:
        kind: "box", "contract" or "ndc".
        center: (3,) world point at the unit box's origin.
        scale: unit-box length per world length.
        far: contract: rays end this far from their origin (unit-box units; the grid's outer shell reaches
            infinity, this only bounds the marching).
        ndc_rotation: ndc: (3, 3) camera-to-world rotation of the reference camera (OpenCV axes).
        ndc_projection: ndc: (4,) ax, ay, bx, by with NDC x = ax * X / Z + bx, y = ay * Y / Z + by in the
            reference camera's frame (for one pinhole camera ax = 2 fx / width, bx = 2 cx / width - 1;
            `voxnerf.normalize.ndc_space` widens it until every training ray falls inside).
    """

    kind: str = "box"
    center: list = field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: float = 1.0
    far: float = 1000.0
    ndc_rotation: list = field(default_factory=list)
    ndc_projection: list = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise VoxnerfError(f"space '{self.kind}': expected one of {', '.join(KINDS)}")
        self.center = [float(c) for c in self.center]
        self.scale = float(self.scale)

    @property
    def inner_scale(self) -> float:
        """Grid length per unit-box length in the inner region (1, or 1/2 when contracted)."""
        return 0.5 if self.kind == "contract" else 1.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Space":
        return cls(**data) if data else cls()

    # ---- points ---------------------------------------------------------------------------------------------
    def world_to_unit(self, x: np.ndarray) -> np.ndarray:
        """World points (..., 3) -> unit-box coordinates."""
        return (np.asarray(x) - np.asarray(self.center)) * self.scale

    def unit_to_world(self, x: np.ndarray) -> np.ndarray:
        """Unit-box points (..., 3) -> world coordinates."""
        return np.asarray(x) / self.scale + np.asarray(self.center)

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N, 3) grid coordinates."""
        if self.kind == "contract":
            return 0.5 * contract(x)
        if self.kind == "ndc":
            p = x @ self._rotation(x)
            ax, ay, bx, by = self.ndc_projection
            z = p[:, 2].clamp_min(1e-6)
            return torch.stack([ax * p[:, 0] / z + bx, ay * p[:, 1] / z + by, 1 - 2 / z], -1)
        return x

    def to_unit(self, g: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid coordinates -> (N, 3) unit-box points (inverse of `to_grid`; NDC z must be < 1)."""
        if self.kind == "contract":
            return uncontract(2 * g)
        if self.kind == "ndc":
            ax, ay, bx, by = self.ndc_projection
            z = 2 / (1 - g[:, 2]).clamp_min(1e-6)
            p = torch.stack([(g[:, 0] - bx) / ax * z, (g[:, 1] - by) / ay * z, z], -1)
            return p @ self._rotation(g).T
        return g

    def displayable(self, g: torch.Tensor) -> torch.Tensor:
        """(N,) bool: grid points whose unit-box points are finite enough to show (the inner box when contracted,
        nearer than NDC z = 0.9, everything in a box)."""
        if self.kind == "contract":
            return g.abs().amax(-1) <= 0.5
        if self.kind == "ndc":
            return g[:, 2] < 0.9
        return torch.ones(len(g), dtype=torch.bool, device=g.device)

    def world_step_scale(self, g: torch.Tensor) -> torch.Tensor:
        """(N,) unit-box length per grid length along a ray through grid points g (N, 3), radially.

        What a sample interval of grid length h stands for in the volume-rendering integral: h for box and
        NDC (densities are learned per grid length there), 2 r^2 h in the contracted shell (r = unit-box
        radius of the point), 2 h inside the inner box.
        """
        if self.kind != "contract":
            return torch.ones(len(g), device=g.device)
        rho = (2 * g).abs().amax(-1).clamp(max=2 - 1e-6)
        r = 1 / (2 - rho.clamp_min(1))
        return 2 * r * r

    # ---- rays -----------------------------------------------------------------------------------------------
    def ndc_rays(self, origins: torch.Tensor, dirs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit-box rays -> NDC rays.

        Args:
            origins, dirs: (R, 3) unit-box rays, dirs unit length.
        Returns:
            NDC origins on the near plane (R, 3), unit NDC directions (R, 3), and (R, 2) per-ray constants
            (distance from the origin to the near plane, forward component of dirs) for `ndc_distance`.
        """
        rot = self._rotation(origins)
        o, d = origins @ rot, dirs @ rot
        dz = d[:, 2].clamp_min(MIN_FORWARD)
        t_near = (1 - o[:, 2]) / dz
        o_near = o + t_near[:, None] * torch.cat([d[:, :2], dz[:, None]], -1)
        ax, ay, bx, by = self.ndc_projection
        start = torch.stack([ax * o_near[:, 0] + bx, ay * o_near[:, 1] + by, -torch.ones_like(dz)], -1)
        end = torch.stack([ax * d[:, 0] / dz + bx, ay * d[:, 1] / dz + by, torch.ones_like(dz)], -1)
        return start, torch.nn.functional.normalize(end - start, dim=-1), torch.stack([t_near, dz], -1)

    @staticmethod
    def ndc_distance(z_ndc: torch.Tensor, constants: torch.Tensor, far: float) -> torch.Tensor:
        """(M,) NDC depths z of samples and their rays' (M, 2) `ndc_rays` constants -> (M,) unit-box distance
        along the original rays, capped at `far`."""
        depth = 2 / (1 - z_ndc).clamp_min(2 / (far + 1))  # camera-frame depth, 1 on the near plane
        return (constants[:, 0] + (depth - 1) / constants[:, 1]).clamp_max(far)

    def _rotation(self, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.ndc_rotation, dtype=like.dtype, device=like.device)
