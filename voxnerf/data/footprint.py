"""How finely the training photos constrain the grid: how many pixels a cell covers (the bound below which a finer
cell has nothing left to learn: SVRaster never subdivides a voxel below the footprint of the pixels that see it),
and the depth step neighbouring views tell apart."""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial import cKDTree

from voxnerf.data.cameras import Cameras
from voxnerf.data.rays import project
from voxnerf.data.space import Space


def pixel_footprint(cameras: Cameras, space: Space, g: torch.Tensor, cell: float) -> torch.Tensor:
    """The most pixels a cell of edge `cell` (grid units) centred at each grid point spans in any camera that sees it.

    The cell's span in a view is the largest image distance between its center and the centers of its three faces
    on the +x, +y, +z side, doubled; a view sees the cell when its center lies in front of the camera and inside the
    image. Through the space's `from_grid`, so contracted and NDC cells measure what they stand for in the world.
    Args:
        cameras: the training cameras (pixel units of the photos trained on).
        space: maps grid points to unit-box points.
        g: (K, 3) grid points in [-1, 1].
        cell: cell edge in grid units (2 / resolution).
    Returns:
        (K,) float32 pixels, 0 where no camera sees the cell.
    """
    offsets = torch.cat([torch.zeros(1, 3), torch.eye(3) * (cell / 2)]).to(g)  # center, then the three faces
    grid_points = (g.unsqueeze(0) + offsets.unsqueeze(1)).reshape(-1, 3).clamp(-1, 1)
    world = space.unit_to_world(space.from_grid(grid_points.double()).cpu().numpy())
    best = np.zeros(len(g))
    for i in range(len(cameras)):
        uv, _, in_front = project(cameras, i, world)
        uv, in_front = uv.reshape(4, len(g), 2), in_front.reshape(4, len(g))
        width, height = cameras.sizes[i]
        center = uv[0]
        seen = in_front.all(0) & (center >= 0).all(-1) & (center[:, 0] < width) & (center[:, 1] < height)
        span = 2 * np.linalg.norm(uv[1:] - center, axis=-1).max(0)
        best = np.maximum(best, np.where(seen, span, 0.0))
    return torch.from_numpy(best).float().to(g.device)


def resolved_depth(cameras: Cameras, focus: np.ndarray, pixels: float = 1.0) -> float:
    """The depth step (world units) at `focus` that neighbouring training views tell apart: two views an angle theta
    apart see a shift of depth dz as about dz * theta / p pixels of disparity, p being a pixel's footprint there, so
    a disparity of `pixels` resolves dz = pixels * p / theta. Medians over the views of p (the focus's depth along
    the view's axis over its focal length) and of theta (the angle at the focus to the view's nearest other view).
    Args:
        cameras: the training cameras.
        focus: (3,) the point they look at (world).
        pixels: the disparity (pixels) a step must make between the two views to show.
    Returns:
        dz in world units; inf for fewer than two views or views all in one direction from the focus.
    """
    if len(cameras) < 2:
        return float("inf")
    offsets = cameras.centers - focus
    directions = offsets / np.linalg.norm(offsets, axis=1, keepdims=True).clip(1e-12)
    chord = cKDTree(directions).query(directions, k=2)[0][:, 1]  # each view's nearest other direction
    theta = float(np.median(2 * np.arcsin(np.clip(chord / 2, 0, 1))))
    return pixels * focus_pixel(cameras, focus) / theta if theta > 0 else float("inf")


def focus_pixel(cameras: Cameras, focus: np.ndarray) -> float:
    """The world span of a pixel at `focus` (3,) in the median view: its depth along the view's axis over the view's
    focal length."""
    return float(np.median(((focus - cameras.centers) * cameras.forward).sum(1) / cameras.intrinsics[:, :2].mean(1)))
