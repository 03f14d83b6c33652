"""A slow, obvious volume renderer: the ground truth that faster renderers are tested against.

Each ray is cut into `n_samples` equal intervals between near and far; the field is queried at each interval's
midpoint t_i and taken as constant over the interval of length delta_i. Then

    alpha_i = 1 - exp(-sigma_i * delta_i)
    T_i     = exp(-sum_{j<i} sigma_j * delta_j)      (light left when reaching interval i)
    w_i     = alpha_i * T_i
    rgb     = sum_i w_i * rgb_i + (1 - sum_i w_i) * background
    opacity = sum_i w_i
    depth   = sum_i w_i * t_i
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

# A radiance field: points (M, 3) and unit view directions (M, 3) -> sigma (M,) per unit length, rgb (M, 3).
Field = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class Rendered(NamedTuple):
    """What `render_rays` returns for R rays of N samples each.

    Attributes:
        rgb: (R, 3) composited color (on `background`, or on black when none was given).
        opacity: (R,) accumulated opacity sum_i w_i.
        depth: (R,) sum_i w_i * t_i, distance along the unit direction; divide by `opacity` for the expected
            distance at which a ray that stops does stop.
        weights: (R, N) w_i.
        t: (R, N) sample distances t_i (interval midpoints).
    """

    rgb: torch.Tensor
    opacity: torch.Tensor
    depth: torch.Tensor
    weights: torch.Tensor
    t: torch.Tensor


def sample_intervals(near: torch.Tensor, far: torch.Tensor, n_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Midpoints and lengths of `n_samples` equal intervals covering [near, far] on each ray.

    Args:
        near, far: (R,) distances along each ray.
    Returns:
        t (R, N) midpoints and delta (R, N) interval lengths.
    """
    u = (torch.arange(n_samples, dtype=near.dtype, device=near.device) + 0.5) / n_samples
    delta = ((far - near) / n_samples)[:, None].expand(-1, n_samples)
    return near[:, None] + (far - near)[:, None] * u, delta


def composite_weights(sigma: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Volume rendering weights w_i = alpha_i * T_i.

    Args:
        sigma: (R, N) densities at the samples.
        delta: (R, N) interval lengths.
    Returns:
        (R, N) weights.
    """
    optical_depth = sigma * delta
    alpha = 1 - torch.exp(-optical_depth)
    depth_before = torch.cumsum(optical_depth, dim=-1) - optical_depth
    return alpha * torch.exp(-depth_before)


def render_rays(
    field: Field,
    origins: torch.Tensor,
    dirs: torch.Tensor,
    near: float | torch.Tensor,
    far: float | torch.Tensor,
    n_samples: int = 1024,
    background: torch.Tensor | None = None,
) -> Rendered:
    """Render rays through `field` by dense uniform sampling.

    Args:
        field: a radiance field (see `Field`), e.g. `ToyScene.field` or a learned model.
        origins: (R, 3) ray origins.
        dirs: (R, 3) unit ray directions.
        near, far: distances along the rays where sampling starts and ends, scalars or (R,).
        n_samples: N, samples per ray.
        background: (3,) color behind the scene, or None to composite on black.
    Returns:
        Rendered (rgb, opacity, depth, weights, t); see its docstring for shapes.
    """
    n_rays = len(origins)
    near = torch.as_tensor(near, dtype=origins.dtype, device=origins.device).expand(n_rays)
    far = torch.as_tensor(far, dtype=origins.dtype, device=origins.device).expand(n_rays)
    t, delta = sample_intervals(near, far, n_samples)
    points = origins[:, None, :] + t[..., None] * dirs[:, None, :]
    sigma, rgb = field(points.reshape(-1, 3), dirs[:, None, :].expand_as(points).reshape(-1, 3))
    weights = composite_weights(sigma.reshape(n_rays, n_samples), delta)
    color = (weights[..., None] * rgb.reshape(n_rays, n_samples, 3)).sum(dim=1)
    opacity = weights.sum(dim=-1)
    if background is not None:
        color = color + (1 - opacity[:, None]) * background
    return Rendered(rgb=color, opacity=opacity, depth=(weights * t).sum(dim=-1), weights=weights, t=t)
