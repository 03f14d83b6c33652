"""Ray marching through the occupancy: which sample points a ray visits, chosen without gradients.

Coarse-then-fine marching: coarse steps of half a brick test the dilated brick occupancy; each occupied coarse step
expands into fine steps that test the cell occupancy. Rays advance in rounds of `chunk` coarse steps; after each
round the density of the new samples (asked of the field through `sigma_fn`) updates each ray's transmittance,
samples with alpha below `alpha_min` are dropped, and rays whose transmittance fell below `transmittance_min` stop
(early ray termination). The march also marks the kept samples whose compositing weight exceeds `color_weight_min`
(those the renderer asks the field's color of), from the optical depth it already carries: the transmittance before
a sample counts every sample the ray crossed, the dropped faint ones too (each under `alpha_min`), so a weight is at
most the renderer's, by as little as those samples absorb.

Made for a GPU fed by the host: a round compacts twice (one `nonzero` over the coarse steps, one over the fine
ones) and everything else is gathers and masks: a march waits on the device 2 * rounds + 2 times, not once per
filter (tests/test_host_sync.py counts it): the round count, two per round, and one read of the kept and colored
counts, after which both compactions have known sizes (`nonzero_static`).

The space (voxnerf.data.space) says where rays start and end, how the march parameter u turns into distances and grid
points, and how long each sample's interval is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from voxnerf.data.space import MarchRays
from voxnerf.fields.base import Lookup
from voxnerf.fields.bricks import BRICK, CellPoints
from voxnerf.render.volrend import exclusive_segment_cumsum, segment_start_positions

COUNT_BASE = 1 << 32  # two sample counts read from the device as one number: kept * COUNT_BASE + colored

SigmaFn = Callable[[torch.Tensor, CellPoints], tuple[torch.Tensor, Lookup]]
"""(N, 3) grid points in occupied cells, and those cells in the estimator's bricks -> sigma (N,) and the points'
Lookup."""


@dataclass
class Samples:
    """Packed samples, sorted by ray then distance.

    Attributes:
        ray_idx: (M,) int64 ray of each sample.
        t: (M,) distance of each sample point from its march ray's origin.
        u: (M,) its march parameter (samples are evenly spaced in u, `step` apart).
        delta: (M,) length of the interval each sample stands for (same units as t).
        lookup: the field's Lookup of each sample point (tensors (M, ...)), reused for density and color.
        candidates: a function giving the number () of fine sample positions the rays crossed (before any
            skipping), on the device: computed when called (a training statistic, read on logging steps only).
        colored: (K,) int64 positions of the samples whose compositing weight exceeds the march's
            `color_weight_min`, increasing.
    """

    ray_idx: torch.Tensor
    t: torch.Tensor
    u: torch.Tensor
    delta: torch.Tensor
    lookup: Lookup
    candidates: Callable[[], torch.Tensor]
    colored: torch.Tensor


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
    color_weight_min: float = 0.0,
) -> Samples:
    """Sample points along rays, skipping empty space and stopping where rays become opaque.

    Args:
        occupancy: the OccupancyGrid (voxnerf.render.occupancy): its cells, bricks, occupied box and space.
        rays: (R) rays in the space's march coordinates.
        sigma_fn: density of grid points, used without gradients.
        step: fine step length in u; coarse steps span half a brick, a whole number of fine steps.
        offsets: (R,) in [0, 1): where in its fine step each ray's samples sit (0.5 for deterministic renders).
        alpha_min: samples less opaque than this are dropped.
        transmittance_min: a ray stops once its transmittance falls below this.
        chunk: coarse steps marched per round before transmittance is updated.
        color_weight_min: samples whose compositing weight exceeds this are marked `colored`.
    Returns:
        Samples, sorted by ray and distance.
    """
    space, origins, dirs, extra = occupancy.space, rays.origins, rays.dirs, rays.extra
    device, n_rays = origins.device, len(origins)
    substeps = max(1, int(round(0.5 * BRICK * occupancy.cell_size / (space.inner_scale * step))))
    coarse = substeps * step
    u_near, u_far = space.march_span(rays, occupancy.bbox)
    span = (u_far - u_near).clamp_min(0)
    n_coarse = math.ceil(span.amax().item() / coarse) if n_rays else 0  # host sync: how many rounds

    def candidates() -> torch.Tensor:
        return (span / step).ceil().sum()

    # in log transmittance, minus the optical depth tau: a ray stops below log_t_min, and a sample's alpha
    # 1 - exp(-tau) is below alpha_min where its -tau is above faint
    log_t_min = math.log(transmittance_min) if transmittance_min > 0 else -math.inf
    faint = math.log1p(-alpha_min)
    log_t = marching = None  # (R,) the rays' log transmittance after the rounds so far, and which are not yet opaque
    fine = torch.arange(substeps, device=device)
    # what a coarse step's fine steps need of its ray, gathered in one piece: origin, direction, u_far, offset, extra
    per_ray = torch.cat([origins, dirs, u_far[:, None], offsets[:, None], extra], 1)  # (R, 8 + K)
    rounds: list[tuple] = []
    for start in range(0, n_coarse, chunk):
        j = torch.arange(start, min(start + chunk, n_coarse), device=device)
        u_c = u_near[:, None] + j * coarse  # (R, J) coarse steps of every ray, tested densely
        x_c = space.march_points(origins[:, None], dirs[:, None], space.march_distance(u_c, extra[:, None]))
        in_brick = occupancy.in_occupied_brick(x_c.view(-1, 3)).view(u_c.shape)
        live = (u_c < u_far[:, None]) & in_brick  # a ray with u_far <= u_near has no coarse step before its end
        if marching is not None:
            live &= marching[:, None]
        ray_c, j_c = torch.nonzero(live, as_tuple=True)  # host sync 1 of the round
        # the fine steps of the C live coarse steps as (C, substeps) broadcasts of their coarse step's values
        of_ray = per_ray[ray_c].unsqueeze(1)  # (C, 1, 8 + K)
        u = u_c[ray_c, j_c].unsqueeze(1) + (fine + of_ray[..., 7]) * step  # (C, substeps)
        t = space.march_distance(u, of_ray[..., 8:])
        t_is_u = t is u  # a space whose distances are the march parameters (the box): one column for both
        x = space.march_points(of_ray[..., :3], of_ray[..., 3:6], t).view(-1, 3)
        cells = occupancy.bricks.cell_points(x)
        in_cells = (u < of_ray[..., 6]).view(-1) & occupancy.occupied_rows(cells.rows)
        inside = torch.nonzero(in_cells).squeeze(-1)  # host sync 2 of the round
        ray, x, cells = ray_c[inside // substeps], x[inside], CellPoints(*(c[inside] for c in cells))
        u = u.view(-1)[inside]
        t = u if t_is_u else t.view(-1)[inside]
        delta = space.intervals(u, step, ray, u_far, extra)
        sigma, lookup = sigma_fn(x, cells)
        neg_tau = torch.mul(sigma, delta).neg_()
        starts = segment_start_positions(ray, n_rays)
        before = exclusive_segment_cumsum(neg_tau, starts, torch.float64)  # the log transmittance before each sample
        if log_t is not None:
            before = before + log_t[ray]
        keep = (before > log_t_min) & (neg_tau <= faint)
        colored = keep & (torch.exp(before) * torch.expm1(neg_tau) < -color_weight_min)  # weight T * alpha
        rounds.append((keep, colored, ray, t, delta, *(() if t_is_u else (u,)), *lookup))
        if start + chunk < n_coarse:  # another round follows
            log_t = (neg_tau.new_zeros(n_rays) if log_t is None else log_t).index_add_(0, ray, neg_tau)
            marching = log_t > log_t_min
    if not rounds:
        none = torch.zeros(0, 3, device=device)
        sigma, lookup = sigma_fn(none, CellPoints(none[:, 0].long(), none))
        empty = torch.zeros(0, device=device)
        return Samples(empty.long(), empty, empty, empty, lookup, candidates, empty.long())
    if len(rounds) == 1:
        keep, colored, *columns = rounds[0]
    else:  # a round's samples come by ray, then distance; rounds in distance order: a stable sort
        keep, colored, *columns = [torch.cat(c) for c in zip(*rounds)]
        order = torch.argsort(columns[0], stable=True)
        keep, colored, *columns = (c[order] for c in (keep, colored, *columns))
    counts = torch.add(colored.sum(), keep.sum(), alpha=COUNT_BASE)
    n_kept, n_colored = divmod(counts.item(), COUNT_BASE)  # the last host sync
    kept = torch.nonzero_static(keep, size=n_kept).squeeze(-1)
    ray_idx, t, delta, *lookup = (c[kept] for c in columns)
    u = t if t_is_u else lookup.pop(0)
    colored = torch.nonzero_static(colored[kept], size=n_colored).squeeze(-1)
    return Samples(ray_idx, t, u, delta, tuple(lookup), candidates, colored)
