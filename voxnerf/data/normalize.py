"""Camera normalization: the Space (center, scale and kind) that puts a scene's region of interest on the grid.

- box: the loader's box of interest (`Scene.bbox`) becomes the unit box.
- contract: the unit box is centered on the point the cameras look at (least squares over their optical axes)
  and just holds NEAR_MARGIN times the scene's near bound (LLFF's bounds, the depth of the nearest sparse points)
  in front of each camera; what lies beyond is contracted into the outer shell. With no near bound that is
  Mip-NeRF 360's box around every camera; with one, the subject gets the finer cells of a smaller box. Each view's
  rays start at NEAR_MARGIN times its own near bound where it has one (`Cameras.near`, else the scene's), so no ray
  passes where the field could hide that view's floaters in front of its camera. Where views have their own bound
  the box shrinks towards one that holds only those later starts, but not so far that the finest level's inner
  cells get finer than the depth step neighbouring views resolve (`resolved_depth`, a step that shifts DISPARITY
  pixels between them): finer cells than that fit each photo on its own (benchmarks/log/2026-12-06-contracted-box.md).
  Where the box holding those starts leaves its cells coarser than that step, the box fills more of the grid (the
  share `contract_inner` is then the least one), up to Mip-NeRF 360's half, so its cells come down to the step.
- ndc: the reference camera is the mean pose (mean center, averaged and re-orthogonalized axes); the unit is
  chosen so the near plane, a little in front of the closest content (`Scene.near`), lies at depth 1; the NDC
  window is widened so that every training pixel's ray falls inside the grid's x-y range.
"""

from __future__ import annotations

import numpy as np
import torch

from voxnerf.data.cameras import Cameras
from voxnerf.data.bounds import bounds_from_cameras
from voxnerf.data.footprint import resolved_depth
from voxnerf.data.scene import Scene
from voxnerf.data.space import NEAR_MARGIN, Box, Contract, Ndc, Space

CAMERA_MARGIN = 1.05  # contract: the unit box reaches this much beyond the farthest ray start
FAR_RATIO = 100.0  # contract: rays march this many times the camera radius (the grid's shell reaches infinity)
DISPARITY = 2.0  # contract: pixels a depth step must shift between neighbouring views to show in their photos; one
#                  pixel is within the poses' and the photos' own error (benchmarks/log/2026-12-06-contracted-box.md)


def space_for(scene: Scene, kind: str, contract_inner: float = 0.5, resolution: int | None = None) -> Space:
    """The Space of `kind` (a name in voxnerf.data.space.SPACES, from the config) that frames `scene`'s training
    cameras; a contracted space's unit box fills `contract_inner` of the grid's half-width, whose finest level has
    `resolution` cells a side (None: the box holds every ray start at the scene's near bound)."""
    cameras = scene.cameras.subset(scene.split_indices("train"))
    builders = {"box": lambda: Box(scene.center.tolist(), scene.scale),
                "contract": lambda: contract_space(cameras, scene.near, contract_inner, resolution),
                "ndc": lambda: ndc_space(cameras, scene.near)}
    return builders[kind]()


def contract_space(cameras: Cameras, near: float = 0.0, inner: float = 0.5, resolution: int | None = None) -> Space:
    """The unit box centered on the cameras' focus point, reaching just past NEAR_MARGIN times `near` (world units)
    along every camera's optical axis, filling `inner` of the grid's half-width. Rays start there, or later where
    their view has its own near bound (`Contract.march_rays`). Where the views have their own bounds and the finest
    `resolution` is given, the box shrinks to hold only those later starts, but no further than the half-width at
    which an inner cell of that level spans the depth step the views resolve (`resolved_depth` at DISPARITY
    pixels); where the box of those starts leaves its cells coarser than that step, it fills more of the grid's
    half-width instead, down to cells of that step, up to half."""
    bbox = bounds_from_cameras(cameras)[0]
    center = 0.5 * (bbox[0] + bbox[1])
    half = _holding_starts(cameras, center, near)
    if cameras.near is not None and resolution:
        step = resolved_depth(cameras, center, DISPARITY)
        half_at_step = step * inner * resolution / 2  # where a cell, 2 * half / (inner * resolution), is step
        half = min(half, max(_holding_starts(cameras, center, cameras.near), half_at_step))
        inner = float(np.clip(2 * half / (resolution * step), inner, 0.5))  # cells down to step, share up to half
    half = max(half, 1e-6)
    return Contract(center.tolist(), 1.0 / half, far=FAR_RATIO, near=NEAR_MARGIN * near / half, inner=inner)


def _holding_starts(cameras: Cameras, center: np.ndarray, near: float | np.ndarray) -> float:
    """Half-width (world units) of the box around `center` that just holds every camera's ray start, NEAR_MARGIN
    times `near` (a scalar, or (N,) one per camera) along its optical axis."""
    starts = cameras.centers + NEAR_MARGIN * np.reshape(near, (-1, 1)) * cameras.forward
    return CAMERA_MARGIN * float(np.abs(starts - center).max())


def mean_pose(cameras: Cameras) -> tuple[np.ndarray, np.ndarray]:
    """(3,) mean camera center and (3, 3) rotation with the mean forward and down axes (OpenCV convention)."""
    forward = cameras.c2w[:, :, 2].mean(0)
    forward /= np.linalg.norm(forward)
    down = cameras.c2w[:, :, 1].mean(0)
    down -= forward * (down @ forward)
    down /= np.linalg.norm(down)
    return cameras.centers.mean(0), np.stack([np.cross(down, forward), down, forward], 1)


def ndc_space(cameras: Cameras, near: float) -> Ndc:
    """NDC of the mean pose, near plane at NEAR_MARGIN * near, window covering every camera's corner rays."""
    center, rotation = mean_pose(cameras)
    unit_near = NEAR_MARGIN * near
    space = Ndc(center.tolist(), 1.0 / unit_near, rotation=rotation.tolist())
    lo, hi = _ndc_window(cameras, space)
    ax, ay = 2 / (hi - lo)
    bx, by = -(hi + lo) / (hi - lo)
    space.projection = [float(ax), float(ay), float(bx), float(by)]
    return space


def _ndc_window(cameras: Cameras, space: Ndc) -> tuple[np.ndarray, np.ndarray]:
    """(2,) min and max of X/Z, Y/Z (reference frame) over every camera's corner rays, from the near plane to
    infinity: the window the NDC grid must span."""
    dirs = cameras.corner_rays()
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    origins = np.repeat(space.world_to_unit(cameras.centers)[:, None], 4, 1)
    rays = space.march_rays(torch.as_tensor(origins.reshape(-1, 3)), torch.as_tensor(dirs.reshape(-1, 3)))
    end = rays.origins + rays.dirs * (2 / rays.dirs[:, 2:3])  # z runs from -1 to 1
    start = rays.origins
    xy = torch.cat([start[:, :2], end[:, :2]]).numpy()
    return xy.min(0), xy.max(0)
