"""Ray marching through the sparse occupancy: which sample points a ray visits, chosen without gradients.

Two-level marching: coarse steps of half a brick test the dilated brick occupancy; each occupied coarse step
expands into fine steps that test the cell occupancy. Rays advance in chunks of coarse steps; after each chunk
the density of the new samples updates each ray's transmittance, samples with alpha below `alpha_min` are
dropped, and rays whose transmittance fell below `transmittance_min` stop (early ray termination).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from voxnerf.interpolate import weighted_row_sum
from voxnerf.sparse_grid import BRICK, SparseVoxelGrid
from voxnerf.volrend import exclusive_segment_cumsum


@dataclass
class Samples:
    """Packed samples, sorted by ray then distance.

    Attributes:
        ray_idx: (M,) int64 ray of each sample.
        t: (M,) distance of each sample point from its ray's origin (unit-box units).
        delta: (M,) length of the interval each sample stands for.
        rows, weights: (M, 8) the grid stencil of each sample point (reused for density and color).
        candidates: number of fine sample positions the rays crossed inside the box (before any skipping).
    """

    ray_idx: torch.Tensor
    t: torch.Tensor
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
    """(N, 3) unit-box points -> (N,) bool, whether each lies in a (dilated) occupied brick."""
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
) -> Samples:
    """Sample points along rays, skipping empty space and stopping where rays become opaque.

    Args:
        grid: the sparse grid (its occupancy and occupied bounding box).
        activate: raw grid density (N,) -> sigma (N,), used without gradients.
        origins, dirs: (R, 3) rays in unit-box coordinates, dirs unit length.
        step: fine step length (unit-box units); coarse steps span half a brick, a whole number of fine steps.
        offsets: (R,) in [0, 1): where in its fine step each ray's samples sit (0.5 for deterministic renders).
        alpha_min: samples less opaque than this are dropped.
        transmittance_min: a ray stops once its transmittance falls below this.
        chunk: coarse steps marched per round before transmittance is updated.
    Returns:
        Samples, sorted by ray and distance.
    """
    device = origins.device
    substeps = max(1, int(round(0.5 * BRICK * grid.cell_size / step)))
    coarse = substeps * step
    lo, hi = grid.occupied_bbox
    t_near, t_far = ray_box(origins, dirs, lo, hi)
    n_coarse = int(((t_far - t_near).clamp_min(0) / coarse).ceil().max().item()) if len(origins) else 0
    tau_max = -torch.log(torch.tensor(transmittance_min)).item()
    tau = torch.zeros(len(origins), device=device)
    active = torch.nonzero(t_far > t_near).squeeze(-1)
    fine = torch.arange(substeps, device=device)
    kept_ray, kept_t, kept_rows, kept_w = [], [], [], []
    candidates = int(((t_far - t_near).clamp_min(0) / step).ceil().sum().item())
    for start in range(0, n_coarse, chunk):
        if len(active) == 0:
            break
        j = torch.arange(start, min(start + chunk, n_coarse), device=device)
        t_c = t_near[active, None] + j * coarse
        alive = t_c < t_far[active, None]
        x_c = origins[active, None] + t_c.unsqueeze(-1) * dirs[active, None]
        alive[alive.clone()] = _occupied_bricks(grid, x_c[alive])
        a_idx, j_idx = torch.nonzero(alive, as_tuple=True)
        rays = active[a_idx]
        t = (t_c[a_idx, j_idx].unsqueeze(-1) + (fine + offsets[rays, None]) * step).reshape(-1)
        rays = rays.repeat_interleave(substeps)
        x = origins[rays] + t.unsqueeze(-1) * dirs[rays]
        inside = (t < t_far[rays]) & grid.is_occupied(x)
        rays, t, x = rays[inside], t[inside], x[inside]
        rows, w = grid.stencil(x)
        tau_step = activate(weighted_row_sum(grid.density.detach(), rows, w)) * step
        before = tau[rays] + exclusive_segment_cumsum(tau_step, rays)
        keep = (before < tau_max) & (-torch.expm1(-tau_step) >= alpha_min)
        kept_ray.append(rays[keep])
        kept_t.append(t[keep])
        kept_rows.append(rows[keep])
        kept_w.append(w[keep])
        tau.index_add_(0, rays, tau_step)
        active = active[(tau[active] < tau_max) & (t_near[active] + (start + chunk) * coarse < t_far[active])]
    if not kept_ray:
        empty = torch.zeros(0, device=device)
        rows = torch.zeros(0, 8, dtype=torch.long, device=device)
        return Samples(empty.long(), empty, empty, rows, rows.float(), candidates)
    order = torch.argsort(torch.cat(kept_ray), stable=True)  # chunks come in distance order: stable sort suffices
    ray_idx, t = torch.cat(kept_ray)[order], torch.cat(kept_t)[order]
    return Samples(ray_idx, t, torch.full_like(t, step), torch.cat(kept_rows)[order], torch.cat(kept_w)[order],
                   candidates)
