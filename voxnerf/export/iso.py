"""The opacity iso value of a density mesh chosen from the run's own rendering (`--iso auto`).

A trained field's density is soft: a surface spreads over several voxels and its peak per-voxel opacity often
stays below 0.5, so the fixed iso value leaves holes where rendering shows a solid surface. The automatic iso value is the
one whose iso-surface has the silhouettes the field renders from its training cameras. A ray crosses the
iso-surface sigma = s where the largest density along it exceeds s; the field renders a surface on that ray where
its accumulated opacity exceeds SURFACE_OPACITY. Over a sample of training rays, the chosen s maximizes the IoU of
these two sets of rays; where several iso values do equally well, the default 0.5 is kept if it is among them.

A best IoU below WEAK_IOU means no iso-surface has the field's silhouettes (an untrained or empty run, a fog):
`trusted` refuses it rather than write a mesh of a few stray voxels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voxnerf.data.rays import image_rays
from voxnerf.data.space import box_span
from voxnerf.errors import VoxnerfError
from voxnerf.export.box import require_box_space
from voxnerf.export.depth import RAY_CHUNK, SURFACE_OPACITY, spread_views
from voxnerf.export.query import densities_along, opacity_to_density
from voxnerf.render.model import Model
from voxnerf.run.load import Run
from voxnerf.system.progress import track

DEFAULT_ISO = 0.5  # per-voxel opacity iso value (NSVF, SVRaster)
MAX_VIEWS = 16  # training views sampled (evenly spaced)
RAYS_PER_VIEW = 1024  # random pixels per view
WEAK_IOU = 0.5  # below it the chosen iso value's silhouettes miss half the rendered ones: refused (trained runs: 0.9+)


@dataclass
class AutoIso:
    """The chosen iso value and how well its silhouettes agree with the rendered ones.

    Attributes:
        iso: per-voxel opacity iso value, in (0, 1).
        iou: IoU of the rays that cross the iso-surface and the rays rendered as surface.
        rays: rays sampled.
    """

    iso: float
    iou: float
    rays: int


def camera_rays(run: Run, views: int = MAX_VIEWS, per_view: int = RAYS_PER_VIEW,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random pixel rays of evenly spaced training views, in unit-box coordinates.

    Returns:
        origins (R, 3) and unit directions (R, 3), float64, R <= views * per_view.
    """
    cameras = run.training_cameras()
    rng = np.random.default_rng(seed)
    origins, dirs = [], []
    for i in spread_views(len(cameras), views):
        o, d = (t.numpy().astype(np.float64) for t in image_rays(cameras, i))
        pick = rng.choice(len(o), min(per_view, len(o)), replace=False)
        origins.append(run.to_unit(o[pick]))
        dirs.append(run.to_unit(o[pick] + d[pick]) - origins[-1])
    dirs = np.concatenate(dirs)
    return np.concatenate(origins), dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


def ray_profiles(model: Model, origins: np.ndarray, dirs: np.ndarray, box_unit: np.ndarray,
                 step: float, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The largest density and the accumulated opacity of each ray inside a unit-box region.

    Args:
        model: the field and its occupancy (densities of unoccupied cells count as zero, as the renderer skips
            them).
        origins, dirs: (R, 3) unit-box rays, dirs unit length.
        box_unit: (2, 3) region; the ray is sampled at mid-steps between its entry and exit.
        step: sample spacing (unit-box length).
        progress: show a bar over the ray chunks.
    Returns:
        max_sigma (R,) and opacity (R,) = 1 - exp(-sum(sigma * step)), float64.
    """
    near, far = box_span(origins, dirs, box_unit)
    max_sigma, opacity = np.zeros(len(origins)), np.zeros(len(origins))
    for i in track(range(0, len(origins), RAY_CHUNK), "sampling rays for the iso value", "chunk", enabled=progress):
        rays = slice(i, i + RAY_CHUNK)
        _, sigma = densities_along(model, origins[rays], dirs[rays], near[rays], far[rays], step)
        max_sigma[rays] = sigma.max(1)
        opacity[rays] = -np.expm1(-sigma.sum(1) * step)
    return max_sigma, opacity


def silhouette_density(max_sigma: np.ndarray, surface: np.ndarray, default: float) -> tuple[float, float]:
    """The density threshold s whose crossing rays {max_sigma > s} best match the surface rays (IoU).

    Args:
        max_sigma: (R,) largest density along each ray.
        surface: (R,) bool, rays rendered as surface.
        default: the threshold to keep when it does as well as the best.
    Returns:
        s and its IoU. Among the best thresholds, s is `default` when it is one, else the geometric middle of the
        best interval of thresholds nearest to it (half its upper end when that interval reaches zero).
    """
    order = np.argsort(-max_sigma, kind="stable")
    m = np.append(max_sigma[order], 0.0)  # thresholds in [m[k], m[k - 1]) make the k densest rays cross
    hits = np.cumsum(surface[order])
    k = np.arange(1, len(order) + 1)
    iou = hits / (k + surface.sum() - hits)
    lo, hi = m[1:], m[:-1]
    best = np.flatnonzero((iou >= iou.max()) & (lo < hi))
    inside = (lo[best] <= default) & (default < hi[best])
    if inside.any():
        return float(default), float(iou.max())
    middle = np.where(lo[best] > 0, np.sqrt(lo[best] * hi[best]), 0.5 * hi[best])
    pick = np.argmin(np.abs(np.log(middle / default)))
    return float(middle[pick]), float(iou.max())


def auto_iso(run: Run, box_world: np.ndarray, progress: bool = False) -> AutoIso:
    """The per-voxel opacity iso value whose iso-surface silhouettes best match the run's rendered training views.

    Args:
        run: the loaded run (its scene folder must still hold the training cameras).
        box_world: (2, 3) world region that will be meshed; densities outside it are ignored.
        progress: show a progress bar.
    """
    require_box_space(run, "--iso auto", "--method tsdf or --source depth")
    delta = run.model.estimator.cell_size
    origins, dirs = camera_rays(run)
    max_sigma, opacity = ray_profiles(run.model, origins, dirs, run.to_unit(box_world),
                                      run.config.render.step_ratio * delta, progress)
    s, iou = silhouette_density(max_sigma, opacity > SURFACE_OPACITY, opacity_to_density(DEFAULT_ISO, delta))
    return AutoIso(float(-np.expm1(-s * delta)), iou, len(origins))


def trusted(chosen: AutoIso, remedy: str) -> AutoIso:
    """`chosen`, or VoxnerfError when its silhouettes match the rendered ones too poorly to mesh (IoU < WEAK_IOU);
    its message ends with `remedy`, what the caller's user can do instead."""
    if chosen.iou < WEAK_IOU:
        raise VoxnerfError(f"--iso auto: no iso value has the silhouettes the field renders (best IoU "
                           f"{chosen.iou:.3f} < {WEAK_IOU}; untrained, empty or foggy run?); nothing written. {remedy}")
    return chosen
