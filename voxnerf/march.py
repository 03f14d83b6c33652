"""Ray marching through the sparse occupancy: which sample points a ray visits, chosen without gradients.

Two-level marching: coarse steps of half a brick test the dilated brick occupancy; each occupied coarse step
expands into fine steps that test the cell occupancy. Rays advance in chunks of coarse steps; after each chunk
the density of the new samples updates each ray's transmittance, samples with alpha below `alpha_min` are
dropped, and rays whose transmittance fell below `transmittance_min` stop (early ray termination).

In a contracted space (see voxnerf.space) rays march in a parameter u that equals the distance t inside the
unit box and runs like disparity beyond it: with a = max(1, distance to the unit box's exit), t = a^2 / (2a - u)
for u > a. Equal steps in u are then about equal steps in the contracted grid, so the far background costs
about as many samples as the inner box; each sample stands for the distance its step covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from voxnerf.interpolate import weighted_row_sum
from voxnerf.space import contract
from voxnerf.sparse_grid import BRICK, SparseVoxelGrid
from voxnerf.volrend import exclusive_segment_cumsum


@dataclass
class Samples:
    """Packed samples, sorted by ray then distance.

    Attributes:
        ray_idx: (M,) int64 ray of each sample.
        t: (M,) distance of each sample point from its ray's origin (units of the rays given to `march`).
        u: (M,) its march parameter: t, or disparity-like beyond the unit box when contracted (samples are
            evenly spaced in u, `step` apart).
        delta: (M,) length of the interval each sample stands for (same units).
        rows, weights: (M, 8) the grid stencil of each sample point (reused for density and color).
        candidates: number of fine sample positions the rays crossed inside the box (before any skipping).
    """

    ray_idx: torch.Tensor
    t: torch.Tensor
    u: torch.Tensor
    delta: torch.Tensor
    rows: torch.Tensor
    weights: torch.Tensor
    candidates: int


def ray_box(origins: torch.Tensor, dirs: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Slab test of rays against an axis-aligned box.

    Args:
        origins, dirs: (R, 3) rays (dirs need not be unit).
        lo, hi: (3,) box corners.
    Returns:
        t_near (R,) clamped to >= 0 and t_far (R,); a ray misses the box where t_far <= t_near.
    """
    safe = torch.where(dirs.abs() < 1e-12, torch.full_like(dirs, 1e-12), dirs)
    t0 = (lo - origins) / safe
    t1 = (hi - origins) / safe
    t_near = torch.minimum(t0, t1).amax(-1).clamp_min(0)
    t_far = torch.maximum(t0, t1).amin(-1)
    return t_near, t_far


def _occupied_bricks(grid: SparseVoxelGrid, x: torch.Tensor) -> torch.Tensor:
    """(N, 3) grid coordinates -> (N,) bool, whether each lies in a (dilated) occupied brick."""
    n = grid.layout.bricks_per_axis
    b = (grid.layout.to_grid(x).long() >> 3).clamp_max(n - 1)
    return grid.brick_occupied.view(-1)[(b[:, 0] * n + b[:, 1]) * n + b[:, 2]]


@torch.no_grad()
def march(
    grid: SparseVoxelGrid,
    activate: Callable[[torch.Tensor], torch.Tensor],
    origins: torch.Tensor,
    dirs: torch.Tensor,
    step: float,
    offsets: torch.Tensor,
    alpha_min: float = 1e-4,
    transmittance_min: float = 1e-4,
    chunk: int = 16,
    contract_far: float | None = None,
) -> Samples:
    """Sample points along rays, skipping empty space and stopping where rays become opaque.

    Args:
        grid: the sparse grid (its occupancy and occupied bounding box).
        activate: raw grid density (N,) -> sigma (N,), used without gradients.
        origins, dirs: (R, 3) rays in grid coordinates (unit-box coordinates when contracted), dirs unit length.
        step: fine step length in u (ray units); coarse steps span half a brick, a whole number of fine steps.
        offsets: (R,) in [0, 1): where in its fine step each ray's samples sit (0.5 for deterministic renders).
        alpha_min: samples less opaque than this are dropped.
        transmittance_min: a ray stops once its transmittance falls below this.
        chunk: coarse steps marched per round before transmittance is updated.
        contract_far: None for rays in grid coordinates; else the rays are in a contracted space's unit box,
            march to this distance, and sample points are contracted into the grid.
    Returns:
        Samples, sorted by ray and distance.
    """
    device = origins.device
    contracted = contract_far is not None
    grid_step = 0.5 * step if contracted else step
    substeps = max(1, int(round(0.5 * BRICK * grid.cell_size / grid_step)))
    coarse = substeps * step
    if contracted:
        a = ray_box(origins, dirs, -torch.ones(3, device=device), torch.ones(3, device=device))[1].clamp_min(1.0)
        u_near, u_far = torch.zeros_like(a), 2 * a - a * a / contract_far
    else:
        a = None
        u_near, u_far = ray_box(origins, dirs, *grid.occupied_bbox)
    n_coarse = int(((u_far - u_near).clamp_min(0) / coarse).ceil().max().item()) if len(origins) else 0
    tau_max = -torch.log(torch.tensor(transmittance_min)).item()
    tau = torch.zeros(len(origins), device=device)
    active = torch.nonzero(u_far > u_near).squeeze(-1)
    fine = torch.arange(substeps, device=device)
    kept_ray, kept_t, kept_u, kept_delta, kept_rows, kept_w = [], [], [], [], [], []
    candidates = int(((u_far - u_near).clamp_min(0) / step).ceil().sum().item())
    for start in range(0, n_coarse, chunk):
        if len(active) == 0:
            break
        j = torch.arange(start, min(start + chunk, n_coarse), device=device)
        u_c = u_near[active, None] + j * coarse
        alive = u_c < u_far[active, None]
        t_c = _u_to_t(u_c, a[active, None] if contracted else None)
        x_c = _points(origins[active, None], dirs[active, None], t_c, contracted)
        alive[alive.clone()] = _occupied_bricks(grid, x_c[alive])
        a_idx, j_idx = torch.nonzero(alive, as_tuple=True)
        rays = active[a_idx]
        u = (u_c[a_idx, j_idx].unsqueeze(-1) + (fine + offsets[rays, None]) * step).reshape(-1)
        rays = rays.repeat_interleave(substeps)
        keep_u = u < u_far[rays]
        rays, u = rays[keep_u], u[keep_u]
        t = _u_to_t(u, a[rays] if contracted else None)
        x = _points(origins[rays], dirs[rays], t, contracted)
        inside = grid.is_occupied(x)
        rays, u, t, x = rays[inside], u[inside], t[inside], x[inside]
        delta = _interval_lengths(u, step, u_far[rays], a[rays]) if contracted else torch.full_like(t, step)
        rows, w = grid.stencil(x)
        tau_step = activate(weighted_row_sum(grid.density.detach(), rows, w)) * delta
        before = tau[rays] + exclusive_segment_cumsum(tau_step, rays)
        keep = (before < tau_max) & (-torch.expm1(-tau_step) >= alpha_min)
        kept_ray.append(rays[keep])
        kept_t.append(t[keep])
        kept_u.append(u[keep])
        kept_delta.append(delta[keep])
        kept_rows.append(rows[keep])
        kept_w.append(w[keep])
        tau.index_add_(0, rays, tau_step)
        active = active[(tau[active] < tau_max) & (u_near[active] + (start + chunk) * coarse < u_far[active])]
    if not kept_ray:
        empty = torch.zeros(0, device=device)
        rows = torch.zeros(0, 8, dtype=torch.long, device=device)
        return Samples(empty.long(), empty, empty, empty, rows, rows.float(), candidates)
    order = torch.argsort(torch.cat(kept_ray), stable=True)  # chunks come in distance order: stable sort suffices
    ray_idx, t = torch.cat(kept_ray)[order], torch.cat(kept_t)[order]
    return Samples(ray_idx, t, torch.cat(kept_u)[order], torch.cat(kept_delta)[order], torch.cat(kept_rows)[order],
                   torch.cat(kept_w)[order], candidates)


def _u_to_t(u: torch.Tensor, a: torch.Tensor | None) -> torch.Tensor:
    """March parameter u (...) -> distance (...): identity, or disparity-like beyond `a` (broadcastable)."""
    if a is None:
        return u
    return torch.where(u <= a, u, a * a / (2 * a - u).clamp_min(1e-9))


def _interval_lengths(u: torch.Tensor, step: float, u_far: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(N,) distance covered by the steps [u - step/2, u + step/2], exact even where the disparity-like spacing
    stretches one step over a long stretch of the ray; a ray's last sample covers the rest of it, to u_far."""
    upper = torch.where(u + step >= u_far, u_far, u + 0.5 * step)
    return _u_to_t(upper, a) - _u_to_t((u - 0.5 * step).clamp_min(0), a)


def _points(origins: torch.Tensor, dirs: torch.Tensor, t: torch.Tensor, contracted: bool) -> torch.Tensor:
    """(..., 3) grid coordinates of the points at distances t (...) along rays (..., 3) (broadcastable)."""
    x = origins + t.unsqueeze(-1) * dirs
    return 0.5 * contract(x) if contracted else x
