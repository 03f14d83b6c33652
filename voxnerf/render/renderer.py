"""Rendering rays through a radiance field: the estimator marches (no grad), then differentiable density,
weights and color from the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
from torch.utils.checkpoint import checkpoint

from voxnerf.data.space import MarchRays
from voxnerf.fields.base import Field, Lookup
from voxnerf.fields.bricks import CellPoints
from voxnerf.render.march import Samples
from voxnerf.render.volrend import composite, distortion, segment_start_positions

if TYPE_CHECKING:
    from voxnerf.render.model import Model


@dataclass
class RenderConfig:
    step_ratio: float = 0.5  # fine step as a fraction of the cell edge
    alpha_min: float = 1e-4  # samples less opaque than this are skipped
    transmittance_min: float = 1e-4  # rays stop once their transmittance falls below this
    color_weight_min: float = 1e-4  # color is evaluated only where the compositing weight exceeds this
    march_chunk: int = 128  # coarse steps per marching round (between early-termination checks): fewer, larger
    #                         rounds; 64 against 16, steps of 0.92-0.96x the time on three CPU rows
    #                         (benchmarks/log/2026-12-05-faster-step.md); 128 marches a 256^3 grid in one round
    #                         (two host syncs fewer; benchmarks/log/2026-12-07-ops-per-step.md)
    checkpoint_chunk: int = 0  # >0: evaluate the field under gradient checkpointing in chunks of this many samples


@dataclass
class RenderResult:
    """Per-ray outputs of `render_rays` (R rays) and sample statistics."""

    rgb: torch.Tensor  # (R, 3) composited on the background
    opacity: torch.Tensor  # (R,) accumulated weight
    depth: torch.Tensor | None  # (R,) sum of weight * distance along the ray (unit-box units): divide by opacity
    #                              (if asked)
    sample_alpha_sum: torch.Tensor  # () sum of the samples' opacities (for sparsity regularization)
    distortion: torch.Tensor | None  # () distortion loss summed over rays, in grid units of the march (if asked)
    num_samples: int  # samples whose density was evaluated with gradients
    num_color_samples: int  # samples whose color was evaluated
    num_candidates: Callable[[], torch.Tensor]  # -> () fine positions the rays crossed in the occupied box


def _chunked(fn, chunk: int, *args: torch.Tensor) -> torch.Tensor:
    """fn(*args) evaluated in row chunks under gradient checkpointing (activations recomputed in backward)."""
    n = len(args[0])
    if n == 0 or not chunk:
        return fn(*args)
    parts = [checkpoint(fn, *(a[i:i + chunk] for a in args), use_reentrant=False) for i in range(0, n, chunk)]
    return torch.cat(parts)


def sigma_fn(field: Field):
    """The estimator's density callback: grid points (N, 3) and their (occupied) cells -> (sigma (N,) without
    gradient, their Lookup)."""

    def query(g: torch.Tensor, cells: CellPoints) -> tuple[torch.Tensor, Lookup]:
        lookup = field.lookup(g, cells)
        return field.density(lookup), lookup

    return query


def march_samples(model: Model, origins: torch.Tensor, dirs: torch.Tensor, cfg: RenderConfig,
                  jitter: torch.Generator | None, near: torch.Tensor | None = None) -> tuple[MarchRays, Samples, float]:
    """The space's march rays, their samples (random offsets from `jitter`, else mid-step) and the fine step in
    the march parameter, for unit-box rays (R, 3) whose views' nearest content lies at depths `near` (R,)."""
    estimator = model.estimator
    step = cfg.step_ratio * estimator.cell_size / estimator.space.inner_scale
    if jitter is None:
        offsets = torch.full((len(origins),), 0.5, device=origins.device)
    else:
        offsets = torch.rand(len(origins), generator=jitter, device=origins.device)
    rays = estimator.space.march_rays(origins, dirs, near)
    samples = estimator.march(rays, sigma_fn(model.field), step, offsets, cfg.alpha_min, cfg.transmittance_min,
                              cfg.march_chunk, cfg.color_weight_min)
    return rays, samples, step


def render_rays(
    model: Model,
    origins: torch.Tensor,
    dirs: torch.Tensor,
    background: torch.Tensor,
    cfg: RenderConfig,
    jitter: torch.Generator | None = None,
    amp_dtype: torch.dtype | None = None,
    with_distortion: bool = False,
    with_depth: bool = True,
    images: torch.Tensor | None = None,
    near: torch.Tensor | None = None,
    view_map: torch.Tensor | None = None,
) -> RenderResult:
    """Render rays given in unit-box coordinates (the model's space maps them to the grid).

    Args:
        model: the field and the occupancy estimator that marches rays through it (and holds the space).
        origins, dirs: (R, 3) rays in unit-box coordinates, dirs unit length.
        background: (R, 3) or (3,) color behind each ray.
        cfg: sampling and skipping thresholds.
        jitter: random generator for stratified sample offsets (training), or None for mid-step samples.
        amp_dtype: autocast dtype for the color MLP (torch.bfloat16 on CPU, torch.float16 on CUDA), or None.
        with_distortion: compute the distortion loss (voxnerf.render.volrend.distortion) over the march parameter.
        with_depth: compute the rays' depth.
        images: (R,) int64 training image of each ray, for the model's color maps (None: a view not trained on,
            mapped by `view_map`).
        view_map: (3, 4) color map of a view not trained on (`ColorMaps.novel_view`) when `images` is None; None:
            the identity.
        near: (R,) unit-box depth of the nearest content in each ray's view (`Cameras.near`), where a contracted
            space starts the ray; None: the space's own start for every ray.
    Returns:
        RenderResult with FP32 outputs (compositing is always FP32).
    """
    n = len(origins)
    field, space = model.field, model.estimator.space
    rays, samples, step = march_samples(model, origins, dirs, cfg, jitter, near)
    ray_idx = samples.ray_idx
    sigmas = _chunked(lambda *lookup: field.density(lookup), cfg.checkpoint_chunk, *samples.lookup)
    colored = samples.colored
    color_rays = ray_idx[colored]
    rgb_s = _chunked(lambda rays, *lookup: field.color(lookup, dirs, amp_dtype, rays), cfg.checkpoint_chunk,
                     color_rays, *(a[colored] for a in samples.lookup))
    distance = space.ray_distance(samples.t, rays, ray_idx) if with_depth else None
    starts = segment_start_positions(ray_idx, n)
    maps = model.color_maps  # they act on the rays' own color, before the background
    out = composite(sigmas, samples.delta, ray_idx, starts, rgb_s, colored, distance, n,
                    background if maps is None else None, color_rays)
    rgb = out.rgb
    if maps is not None:
        rgb = maps(rgb, out.opacity, images, view_map) + (1 - out.opacity).unsqueeze(-1) * background
    dist = (distortion(out.weights, samples.u * space.inner_scale, step * space.inner_scale, starts)
            if with_distortion else None)
    return RenderResult(rgb, out.opacity, out.depth, out.alpha_sum, dist, len(ray_idx), len(colored),
                        samples.candidates)
