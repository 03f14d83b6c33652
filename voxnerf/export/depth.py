"""The rendered views of the run's training cameras: the input of depth point clouds and TSDF fusion.

The depth of a surface pixel is its median depth: the distance at which the ray's accumulated opacity reaches
SURFACE_OPACITY, found by sampling the field's density along the ray. The renderer's expected depth (the
weight-averaged distance) lies behind the surface wherever the density is soft, by up to the surface's thickness,
and pulls a fused surface inward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.data.rays import image_rays
from voxnerf.data.space import box_span
from voxnerf.export.query import densities_along
from voxnerf.render.views import View
from voxnerf.run.load import Run
from voxnerf.system.progress import track

SURFACE_OPACITY = 0.5  # pixels more opaque than this see a surface
RAY_CHUNK = 256  # rays sampled at once
UNIT_BOX = np.array([[-1.0] * 3, [1.0] * 3])


def spread_views(count: int, views: int) -> np.ndarray:
    """Indices of up to `views` cameras evenly spread over `count`, in order."""
    return np.unique(np.linspace(0, count - 1, min(views, count)).round().astype(np.int64))


@dataclass
class SurfaceView:
    """One rendered training view, flattened to its H*W pixels (row-major).

    Attributes:
        index: the camera's index in the training cameras.
        view: the render (rgb, expected depth along the ray in world units, opacity), each (H, W, ...).
        origins: (H*W, 3) world ray origins.
        dirs: (H*W, 3) world unit ray directions.
        surface: (H*W,) bool, pixels that see a surface (rendered opacity > SURFACE_OPACITY and a median depth).
        depth: (H*W,) median depth along the ray of the `surface` pixels in world units (the rendered expected
            depth for contracted / NDC runs), 0 elsewhere.
    """

    index: int
    view: View
    origins: np.ndarray
    dirs: np.ndarray
    surface: np.ndarray
    depth: np.ndarray

    def points(self) -> np.ndarray:
        """(P, 3) world surface points of the `surface` pixels: origin + depth * direction."""
        return self.origins[self.surface] + self.depth[self.surface, None] * self.dirs[self.surface]

    def foreground_rgb(self, background: np.ndarray) -> np.ndarray:
        """(P, 3) colors of the `surface` pixels with the background's share removed (rgb = c * a + bg * (1 - a))."""
        a = self.view.opacity.reshape(-1)[self.surface, None]
        rgb = self.view.rgb.reshape(-1, 3)[self.surface]
        return np.clip((rgb - (1 - a) * background) / a, 0, 1)


def z_depth(distance: np.ndarray, dirs: np.ndarray, c2w: np.ndarray) -> np.ndarray:
    """(N,) camera-frame z (depth along the viewing axis) of the points `distance` (N,) along unit world rays
    `dirs` (N, 3) of a camera with camera-to-world `c2w` (3, 4): the distance times the ray's cosine with the axis."""
    return distance * (dirs @ c2w[:, 2])


def opacity_crossing(t: np.ndarray, sigma: np.ndarray, step: float,
                     opacity: float = SURFACE_OPACITY) -> np.ndarray:
    """The first distance at which rays' accumulated opacity reaches `opacity`.

    Args:
        t: (R, N) mid-step sample distances, `step` apart.
        sigma: (R, N) densities; sample k covers [t_k - step / 2, t_k + step / 2] with constant density.
        step: sample spacing.
        opacity: the opacity to reach, in (0, 1).
    Returns:
        (R,) distances (exact for piecewise-constant density), nan where the ray never reaches `opacity`.
    """
    depth = np.cumsum(sigma * step, axis=1)  # optical depth at the end of each sample
    goal = -np.log1p(-opacity)
    reached = depth >= goal
    k = np.argmax(reached, axis=1)
    rows = np.arange(len(t))
    before = np.where(k > 0, depth[rows, k - 1], 0.0)
    inside = (goal - before) / np.maximum(sigma[rows, k] * step, 1e-300)
    return np.where(reached.any(axis=1), t[rows, k] + (inside - 0.5) * step, np.nan)


def median_depth(run: Run, origins: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """World distances (R,) along world rays (origins, unit dirs (R, 3)) at which the field's accumulated
    opacity reaches SURFACE_OPACITY, nan where it never does (densities sampled as the renderer marches, every
    `render.step_ratio` cells)."""
    o, step = run.to_unit(origins), run.config.render.step_ratio * run.model.estimator.cell_size
    near, far = box_span(o, dirs, UNIT_BOX)
    out = np.full(len(o), np.nan)
    for i in range(0, len(o), RAY_CHUNK):
        rays = slice(i, i + RAY_CHUNK)
        t, sigma = densities_along(run.model, o[rays], dirs[rays], near[rays], far[rays], step)
        out[rays] = opacity_crossing(t, sigma, step) / run.scale
    return out


def chosen_views(count: int, views: int | None) -> np.ndarray:
    """Indices of the cameras to render among `count`: all of them, or `views` spread evenly (`spread_views`)."""
    return np.arange(count) if views is None else spread_views(count, views)


def rendered_views(run: Run, cameras: Cameras, views: np.ndarray, progress: bool = False) -> Iterator[SurfaceView]:
    """Render the cameras of indices `views` (K,) as the run renders (`Run.render_view`), one SurfaceView at a
    time."""
    for i in track(views.tolist(), "rendering views", "view", enabled=progress):
        view = run.render_view(cameras, i)
        origins, dirs = (t.numpy().astype(np.float64) for t in image_rays(cameras, i))
        surface = view.opacity.reshape(-1) > SURFACE_OPACITY
        if run.model.space.bounded:
            depth = np.zeros(len(origins))
            depth[surface] = median_depth(run, origins[surface], dirs[surface])
        else:  # the median-depth march covers the unit box only: contracted / NDC runs keep the rendered depth
            depth = np.where(surface, view.depth.reshape(-1).astype(np.float64), 0.0)
        surface &= depth > 0
        yield SurfaceView(i, view, origins, dirs, surface, np.nan_to_num(depth))
