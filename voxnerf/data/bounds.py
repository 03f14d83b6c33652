"""Boxes of interest and near / far ranges from what a capture holds: its cameras alone, its sparse points, or its
view frustums (forward-facing scenes). The masks' visual hull, a box of its own, is `voxnerf.data.hull`."""

from __future__ import annotations

import numpy as np

from voxnerf.data.cameras import Cameras


def bounds_from_cameras(cameras: Cameras) -> tuple[np.ndarray, float, float]:
    """A box of interest for object captures, from the cameras alone.

    The center is the point closest (least squares) to all optical axes; the half-size is the radius of the
    largest sphere around it that every camera sees whole. Near and far bracket that box from every camera.

    Returns:
        bbox (2, 3), near, far.
    """
    centers, dirs = cameras.centers, cameras.forward
    proj = np.eye(3)[None] - dirs[:, :, None] * dirs[:, None, :]
    center = np.linalg.lstsq(proj.sum(0), np.einsum("nij,nj->i", proj, centers), rcond=None)[0]
    dist = np.linalg.norm(centers - center, axis=-1)
    fx, fy, cx, cy = cameras.intrinsics.T
    w, h = cameras.sizes.T
    half_fov = np.arctan(np.minimum.reduce([cx / fx, (w - cx) / fx, cy / fy, (h - cy) / fy]))
    radius = float(np.min(dist * np.sin(half_fov)))
    bbox = np.stack([center - radius, center + radius])
    return (bbox, *near_far_from_box(centers, bbox))


def near_far_from_box(centers: np.ndarray, bbox: np.ndarray) -> tuple[float, float]:
    """Near and far distances that bracket the box `bbox` (2, 3) from every camera center (N, 3)."""
    dist = np.linalg.norm(centers - 0.5 * (bbox[0] + bbox[1]), axis=-1)
    half_diagonal = 0.5 * float(np.linalg.norm(bbox[1] - bbox[0]))
    near = float(max(np.min(dist) - half_diagonal, 1e-3 * np.min(dist)))
    return near, float(np.max(dist) + half_diagonal)


def bounds_from_points(points: np.ndarray, percentile: float = 1.0) -> np.ndarray:
    """(2, 3) box holding the sparse `points` (P, 3) between the `percentile` and 100 - `percentile` per axis."""
    return np.percentile(points, [percentile, 100 - percentile], axis=0)


def bounds_from_frustums(cameras: Cameras, near: float, far: float) -> np.ndarray:
    """(2, 3) box holding every camera's view frustum between z-depths `near` and `far` (forward-facing scenes)."""
    depths = np.array([near, far])[None, :, None, None]
    world = cameras.centers[:, None, None] + depths * cameras.corner_rays()[:, None]
    return np.stack([world.reshape(-1, 3).min(0), world.reshape(-1, 3).max(0)])
