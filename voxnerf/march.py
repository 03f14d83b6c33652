"""Ray marching through the occupancy: which sample points a ray visits, chosen without gradients.

Two-level marching: coarse steps of half a brick test the dilated brick occupancy; each occupied coarse step
expands into fine steps that test the cell occupancy. Rays advance in chunks of coarse steps; after each chunk
the density of the new samples (asked of the field through `sigma_fn`) updates each ray's transmittance, samples
with alpha below `alpha_min` are dropped, and rays whose transmittance fell below `transmittance_min` stop (early
ray termination). The space (voxnerf.space) says where rays start and end, how the march parameter u turns into
distances and grid points, and how long each sample's interval is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from voxnerf.fields.base import Lookup
from voxnerf.space import MarchRays
from voxnerf.sparse_grid import BRICK
from voxnerf.volrend import exclusive_segment_cumsum

SigmaFn = Callable[[torch.Tensor], tuple[torch.Tensor, Lookup]]
"""(N, 3) grid points -> sigma (N,) and the points' Lookup."""


@dataclass
class Samples:
    """Packed samples, sorted by ray then distance.

    Attributes:
        ray_idx: (M,) int64 ray of each sample.
        t: (M,) distance of each sample point from its march ray's origin.
        u: (M,) its march parameter (samples are evenly spaced in u, `step` apart).
        delta: (M,) length of the interval each sample stands for (same units as t).
        lookup: the field's Lookup of each sample point (tensors (M, ...)), reused for density and color.
        candidates: number of fine sample positions the rays crossed (before any skipping).
    """

    ray_idx: torch.Tensor
    t: torch.Tensor
    u: torch.Tensor
    delta: torch.Tensor
    lookup: Lookup
    candidates: int


@torch.no_grad()
def march(
    occupancy,
    rays: MarchRays,
    sigma_fn: SigmaFn,
    step: float,
    offsets: torch.Tensor,
    alpha_min: float = 1e-4,
    transmittance_min: float = 1e-4,
    chunk: int = 16,
) -> Samples:
    """Sample points along rays, skipping empty space and stopping where rays become opaque.

    Args:
        occupancy: the OccupancyGrid (voxnerf.occupancy): its cells, bricks, occupied box and space.
        rays: (R) rays in the space's march coordinates.
        sigma_fn: density of grid points, used without gradients.
        step: fine step length in u; coarse steps span half a brick, a whole number of fine steps.
        offsets: (R,) in [0, 1): where in its fine step each ray's samples sit (0.5 for deterministic renders).
        alpha_min: samples less opaque than this are dropped.
        transmittance_min: a ray stops once its transmittance falls below this.
        chunk: coarse steps marched per round before transmittance is updated.
    Returns:
        Samples, sorted by ray and distance.
    """
    space, origins, dirs, extra = occupancy.space, rays.origins, rays.dirs, rays.extra
    device = origins.device
    substeps = max(1, int(round(0.5 * BRICK * occupancy.cell_size / (space.inner_scale * step))))
    coarse = substeps * step
    u_near, u_far = space.march_span(rays, occupancy.bbox[0], occupancy.bbox[1])
    n_coarse = int(((u_far - u_near).clamp_min(0) / coarse).ceil().max().item()) if len(origins) else 0
    tau_max = -torch.log(torch.tensor(transmittance_min)).item()
    tau = torch.zeros(len(origins), device=device)
    active = torch.nonzero(u_far > u_near).squeeze(-1)
    fine = torch.arange(substeps, device=device)
    kept: list[tuple] = []
    candidates = int(((u_far - u_near).clamp_min(0) / step).ceil().sum().item())
    for start in range(0, n_coarse, chunk):
        if len(active) == 0:
            break
        j = torch.arange(start, min(start + chunk, n_coarse), device=device)
        u_c = u_near[active, None] + j * coarse
        alive = u_c < u_far[active, None]
        x_c = space.march_points(origins[active, None], dirs[active, None],
                                 space.march_distance(u_c, extra[active, None]))
        alive[alive.clone()] = occupancy.in_occupied_brick(x_c[alive])
        a_idx, j_idx = torch.nonzero(alive, as_tuple=True)
        ray = active[a_idx]
        u = (u_c[a_idx, j_idx].unsqueeze(-1) + (fine + offsets[ray, None]) * step).reshape(-1)
        ray = ray.repeat_interleave(substeps)
        keep_u = u < u_far[ray]
        ray, u = ray[keep_u], u[keep_u]
        t = space.march_distance(u, extra[ray])
        x = space.march_points(origins[ray], dirs[ray], t)
        inside = occupancy.is_occupied(x)
        ray, u, t, x = ray[inside], u[inside], t[inside], x[inside]
        delta = space.intervals(u, step, u_far[ray], extra[ray])
        sigma, lookup = sigma_fn(x)
        tau_step = sigma * delta
        before = tau[ray] + exclusive_segment_cumsum(tau_step, ray)
        keep = (before < tau_max) & (-torch.expm1(-tau_step) >= alpha_min)
        kept.append((ray[keep], t[keep], u[keep], delta[keep], *(a[keep] for a in lookup)))
        tau.index_add_(0, ray, tau_step)
        active = active[(tau[active] < tau_max) & (u_near[active] + (start + chunk) * coarse < u_far[active])]
    if not kept:
        sigma, lookup = sigma_fn(torch.zeros(0, 3, device=device))
        empty = torch.zeros(0, device=device)
        return Samples(empty.long(), empty, empty, empty, lookup, candidates)
    columns = [torch.cat(c) for c in zip(*kept)]
    order = torch.argsort(columns[0], stable=True)  # chunks come in distance order: stable sort suffices
    ray_idx, t, u, delta, *lookup = (c[order] for c in columns)
    return Samples(ray_idx, t, u, delta, tuple(lookup), candidates)
