"""Where the grid lies in the scene: world -> unit box -> grid coordinates in [-1, 1]^3.

World points enter the unit box by a shift and a scale, `(x - center) * scale` (chosen by `voxnerf.data.normalize`);
rays reach the renderer in unit-box coordinates. A space class then decides what the grid covers and how rays
are marched through it:

- `Box`: the grid is the unit box itself (bounded objects: Blender, masked captures).
- `Contract`: unbounded scenes. The unit box holds the cameras and the region of interest and fills the middle
  share s of the grid ([-s, s]^3); outside it, a point at L-infinity radius r > 1 goes to grid radius
  1 - (1 - s) / r (the L-infinity form of Mip-NeRF 360's contraction, which keeps the inner region an axis-aligned
  box; s = 1/2 is theirs, [-2, 2]^3 scaled by 1/2). Everything out to infinity gets the shell around the inner box.
  Rays march in a parameter u that equals the distance t inside the unit box and runs like disparity beyond it:
  with a = max(1, distance to the unit box's exit) and k = (1 - s) / s, t = a^2 / (a - (u - a) / k) for u > a.
  Equal steps in u are then about equal steps in the contracted grid, so the far background costs about as many
  samples as the inner box; each sample stands for the distance its step covers.
- `Ndc`: forward-facing scenes. Normalized device coordinates of a reference camera (at the unit-box origin,
  near plane at depth 1): x and y across its image, z from the near plane (-1) to infinity (+1). NDC maps
  straight lines to straight lines, so rays are transformed once and marched like in a box.

Only this module turns a space's name into a class (`space_from_dict`, `SPACES`); everything else calls methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from voxnerf.errors import VoxnerfError

NEAR_MARGIN = 0.9  # rays start (Contract) or the near plane sits (Ndc) at this fraction of the nearest content's depth
MIN_FORWARD = 1e-4  # NDC: rays are tilted at least this much toward the reference camera's view direction
UNIT_BOX = torch.tensor([[-1.0] * 3, [1.0] * 3])  # the unit box's low and high corners (2, 3)


def contract(x: torch.Tensor, inner: float = 0.5) -> torch.Tensor:
    """(N, 3) unit-box points -> (N, 3) grid points in [-1, 1]^3: the unit box scaled to [-inner, inner]^3, the
    rest of space in the shell around it."""
    r = x.abs().amax(-1, keepdim=True).clamp_min(1e-12)
    return torch.where(r <= 1, inner * x, (1 - (1 - inner) / r) * x / r)


def uncontract(g: torch.Tensor, inner: float = 0.5) -> torch.Tensor:
    """Inverse of `contract` on (N, 3) grid points with L-infinity radius < 1."""
    rho = g.abs().amax(-1, keepdim=True).clamp(1e-12, 1 - 1e-7)
    return torch.where(rho <= inner, g / inner, g * (1 - inner) / (rho * (1 - rho)))


def ray_box(origins: torch.Tensor, dirs: torch.Tensor, box: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Slab test of rays against an axis-aligned box.

    Args:
        origins, dirs: (R, 3) rays (dirs need not be unit).
        box: (2, 3) its low and high corners.
    Returns:
        t_near (R,) clamped to >= 0 and t_far (R,); a ray misses the box where t_far <= t_near.
    """
    safe = torch.copysign(dirs.abs().clamp_min(1e-12), dirs)  # a ray along a slab crosses it at +-1e12
    t = (box.unsqueeze(1) - origins) / safe  # (2, R, 3): where each ray crosses the low and the high planes
    return t.amin(0).amax(-1).clamp_min(0), t.amax(0).amin(-1)


def box_span(origins: np.ndarray, dirs: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry (>= 0) and exit distances (R,) of rays (R, 3) through an axis-aligned box (2, 3), float64; exit <=
    entry: a miss. `ray_box` on numpy arrays."""
    near, far = ray_box(*(torch.as_tensor(np.asarray(a, np.float64)) for a in (origins, dirs, box)))
    return near.numpy(), far.numpy()


@dataclass
class MarchRays:
    """Rays as a space marches them.

    Attributes:
        origins, dirs: (R, 3) in the space's march coordinates (unit box for Box / Contract, NDC for Ndc),
            dirs unit length.
        extra: (R, K) per-ray constants the space needs to turn march parameters back into distances
            (K = 0 for Box; Contract: the exit distance a; Ndc: distance to the near plane, forward component).
    """

    origins: torch.Tensor
    dirs: torch.Tensor
    extra: torch.Tensor


class Space:
    """How unit-box points map to the grid, and how rays are marched through it (see the module docstring).

    Attributes:
        center: (3,) world point at the unit box's origin.
        scale: unit-box length per world length.
    """

    kind = "box"
    inner_scale = 1.0  # grid length per unit-box length in the inner region
    bounded = True  # the grid is the unit box: density lattices over the box describe the whole field
    faces_forward = False  # every camera looks one way (a video sweeps the image plane instead of orbiting)

    def __init__(self, center=(0.0, 0.0, 0.0), scale: float = 1.0):
        self.center = [float(c) for c in center]
        self.scale = float(scale)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "center": list(self.center), "scale": self.scale}

    # ---- points ---------------------------------------------------------------------------------------------
    def world_to_unit(self, x: np.ndarray) -> np.ndarray:
        """World points (..., 3) -> unit-box coordinates."""
        return (np.asarray(x) - np.asarray(self.center)) * self.scale

    def unit_to_world(self, x: np.ndarray) -> np.ndarray:
        """Unit-box points (..., 3) -> world coordinates."""
        return np.asarray(x) / self.scale + np.asarray(self.center)

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N, 3) grid coordinates."""
        return x

    def from_grid(self, g: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid coordinates -> (N, 3) unit-box points (inverse of `to_grid`)."""
        return g

    def displayable(self, g: torch.Tensor) -> torch.Tensor:
        """(N,) bool: grid points whose unit-box points are finite enough to show."""
        return torch.ones(len(g), dtype=torch.bool, device=g.device)

    def world_step_scale(self, g: torch.Tensor) -> torch.Tensor:
        """(N,) unit-box length per grid length along a ray through grid points g (N, 3), radially: what a
        sample interval of grid length h stands for in the volume-rendering integral."""
        return torch.ones(len(g), device=g.device)

    # ---- marching -------------------------------------------------------------------------------------------
    def march_rays(self, origins: torch.Tensor, dirs: torch.Tensor, near: torch.Tensor | None = None) -> MarchRays:
        """Unit-box rays (R, 3), unit dirs -> the rays this space marches. `near` (R,): the depth (unit-box units)
        of the nearest content in each ray's view, where the space starts rays from it (Contract), else None."""
        return MarchRays(origins, dirs, origins.new_zeros(len(origins), 0))

    def march_span(self, rays: MarchRays, box: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R,) march parameters u where each ray enters and leaves what may be occupied, given the occupied
        grid box (2, 3) (low and high corners); u_far <= u_near: nothing to march."""
        return ray_box(rays.origins, rays.dirs, box)

    def march_distance(self, u: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        """March parameters u (...) -> distances t along the march rays, with the rays' `extra` (..., K)."""
        return u

    def march_points(self, origins: torch.Tensor, dirs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(..., 3) grid coordinates of the points at distances t (...) along march rays (..., 3)."""
        return origins + t.unsqueeze(-1) * dirs

    def intervals(self, u: torch.Tensor, step: float, ray: torch.Tensor, u_far: torch.Tensor,
                  extra: torch.Tensor) -> torch.Tensor:
        """(N,) length along the ray of the steps [u - step/2, u + step/2] (u (N,) on rays `ray` (N,), of the rays'
        u_far (R,) and extra (R, K))."""
        return torch.full_like(u, step)

    def ray_distance(self, t: torch.Tensor, rays: MarchRays, ray_idx: torch.Tensor) -> torch.Tensor:
        """(M,) distances t of samples along their march rays -> (M,) unit-box distances along the given rays."""
        return t


Box = Space


class Contract(Space):
    """Unbounded scenes: the unit box in the middle of the grid, the rest of space contracted around it.

    Attributes:
        near: rays start this far from their origin (unit-box units) unless their view has a near bound of its own
            (`march_rays`): nothing is closer to a camera.
        far: rays end this far from their origin (unit-box units; the grid's outer shell reaches infinity, this
            only bounds the marching).
        inner_scale: s, the share of the grid's half-width the unit box fills (grid length per unit-box length).
    """

    kind = "contract"
    bounded = False

    def __init__(self, center=(0.0, 0.0, 0.0), scale: float = 1.0, far: float = 1000.0, near: float = 0.0,
                 inner: float = 0.5):
        super().__init__(center, scale)
        self.far, self.near = float(far), float(near)
        if not 0 < inner < 1:
            raise VoxnerfError(f"contract space: inner share {inner} must lie in (0, 1)")
        self.inner_scale = float(inner)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "far": self.far, "near": self.near, "inner": self.inner_scale}

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        return contract(x, self.inner_scale)

    def from_grid(self, g: torch.Tensor) -> torch.Tensor:
        return uncontract(g, self.inner_scale)

    def displayable(self, g: torch.Tensor) -> torch.Tensor:
        """The inner box only (the shell stands for space out to infinity)."""
        return g.abs().amax(-1) <= self.inner_scale

    def world_step_scale(self, g: torch.Tensor) -> torch.Tensor:
        """r^2 / (1 - s) in the contracted shell (r = unit-box radius of the point), 1 / s inside the inner box."""
        s = self.inner_scale
        rho = g.abs().amax(-1).clamp(max=1 - 1e-7)
        r = (1 - s) / (1 - rho)
        return torch.where(rho <= s, 1 / s, r * r / (1 - s))

    def march_rays(self, origins: torch.Tensor, dirs: torch.Tensor, near: torch.Tensor | None = None) -> MarchRays:
        """The exit distance a from the unit box, and where each ray starts: NEAR_MARGIN times its view's `near`
        (R,), else `self.near` for all."""
        a = ray_box(origins, dirs, UNIT_BOX.to(origins.device))[1]
        start = torch.full_like(a, self.near) if near is None else NEAR_MARGIN * near.to(a.dtype)
        return MarchRays(origins, dirs, torch.stack([a.clamp_min(1.0), start], -1))

    def march_span(self, rays: MarchRays, box: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From each ray's start out to `far` (every ray crosses the whole contracted grid)."""
        a, start = rays.extra[:, 0], rays.extra[:, 1]
        return self._march_parameter(start, a), self._march_parameter(self.far, a)

    @property
    def _shell_ratio(self) -> float:
        """k = (1 - s) / s: how much longer the march parameter runs in the shell than inside, relative to a."""
        return (1 - self.inner_scale) / self.inner_scale

    def march_distance(self, u: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        a = extra[..., 0]
        return torch.where(u <= a, u, a * a / (a - (u - a) / self._shell_ratio).clamp_min(1e-9))

    def _march_parameter(self, t, a: torch.Tensor) -> torch.Tensor:
        """Inverse of `march_distance`: (R,) march parameters u of distances t (a number or (R,)) on rays with exit
        distances a (R,)."""
        t = torch.as_tensor(t, dtype=a.dtype, device=a.device)
        return torch.where(t <= a, t, a + self._shell_ratio * (a - a * a / t.clamp_min(1e-9)))

    def march_points(self, origins: torch.Tensor, dirs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return contract(origins + t.unsqueeze(-1) * dirs, self.inner_scale)

    def intervals(self, u: torch.Tensor, step: float, ray: torch.Tensor, u_far: torch.Tensor,
                  extra: torch.Tensor) -> torch.Tensor:
        """Exact even where the disparity-like spacing stretches one step over a long stretch of the ray; a ray's
        last sample covers the rest of it, to u_far."""
        u_far, extra = u_far[ray], extra[ray]
        upper = torch.where(u + step >= u_far, u_far, u + 0.5 * step)
        return self.march_distance(upper, extra) - self.march_distance((u - 0.5 * step).clamp_min(0), extra)


class Ndc(Space):
    """Forward-facing scenes: normalized device coordinates of a reference camera.

    Attributes:
        far: distances along rays are capped here (unit-box units).
        rotation: (3, 3) camera-to-world rotation of the reference camera (OpenCV axes), nested lists.
        projection: (4,) ax, ay, bx, by with NDC x = ax * X / Z + bx, y = ay * Y / Z + by in the reference
            camera's frame (for one pinhole camera ax = 2 fx / width, bx = 2 cx / width - 1;
            `voxnerf.data.normalize.ndc_space` widens it until every training ray falls inside).
    """

    kind = "ndc"
    bounded = False
    faces_forward = True

    def __init__(self, center=(0.0, 0.0, 0.0), scale: float = 1.0, far: float = 1000.0, rotation=None,
                 projection=(1.0, 1.0, 0.0, 0.0)):
        super().__init__(center, scale)
        self.far = float(far)
        self.rotation = [list(map(float, row)) for row in (np.eye(3) if rotation is None else rotation)]
        self.projection = [float(p) for p in projection]

    def to_dict(self) -> dict:
        return {**super().to_dict(), "far": self.far, "rotation": self.rotation, "projection": self.projection}

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        p = x @ self._rotation(x)
        ax, ay, bx, by = self.projection
        z = p[:, 2].clamp_min(1e-6)
        return torch.stack([ax * p[:, 0] / z + bx, ay * p[:, 1] / z + by, 1 - 2 / z], -1)

    def from_grid(self, g: torch.Tensor) -> torch.Tensor:
        """Inverse of `to_grid` (NDC z must be < 1)."""
        ax, ay, bx, by = self.projection
        z = 2 / (1 - g[:, 2]).clamp_min(1e-6)
        p = torch.stack([(g[:, 0] - bx) / ax * z, (g[:, 1] - by) / ay * z, z], -1)
        return p @ self._rotation(g).T

    def displayable(self, g: torch.Tensor) -> torch.Tensor:
        """Points nearer than NDC z = 0.9."""
        return g[:, 2] < 0.9

    def march_rays(self, origins: torch.Tensor, dirs: torch.Tensor, near: torch.Tensor | None = None) -> MarchRays:
        """NDC origins on the near plane, unit NDC directions, and the constants (distance from the origin to the
        near plane, forward component of dirs) that `ray_distance` needs."""
        rot = self._rotation(origins)
        o, d = origins @ rot, dirs @ rot
        dz = d[:, 2].clamp_min(MIN_FORWARD)
        t_near = (1 - o[:, 2]) / dz
        o_near = o + t_near[:, None] * torch.cat([d[:, :2], dz[:, None]], -1)
        ax, ay, bx, by = self.projection
        start = torch.stack([ax * o_near[:, 0] + bx, ay * o_near[:, 1] + by, -torch.ones_like(dz)], -1)
        end = torch.stack([ax * d[:, 0] / dz + bx, ay * d[:, 1] / dz + by, torch.ones_like(dz)], -1)
        return MarchRays(start, torch.nn.functional.normalize(end - start, dim=-1), torch.stack([t_near, dz], -1))

    def ray_distance(self, t: torch.Tensor, rays: MarchRays, ray_idx: torch.Tensor) -> torch.Tensor:
        """Unit-box distance along the original rays of samples at NDC distance t, capped at `far`."""
        z_ndc = rays.origins[ray_idx, 2] + t * rays.dirs[ray_idx, 2]
        constants = rays.extra[ray_idx]
        depth = 2 / (1 - z_ndc).clamp_min(2 / (self.far + 1))  # camera-frame depth, 1 on the near plane
        return (constants[:, 0] + (depth - 1) / constants[:, 1]).clamp_max(self.far)

    def _rotation(self, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.rotation, dtype=like.dtype, device=like.device)


SPACES = {cls.kind: cls for cls in (Box, Contract, Ndc)}


def space_from_dict(data: dict) -> Space:
    """The space saved by `Space.to_dict`."""
    data = dict(data)
    kind = data.pop("kind")
    if kind not in SPACES:
        raise VoxnerfError(f"space '{kind}': expected one of {', '.join(SPACES)}")
    return SPACES[kind](**data)
