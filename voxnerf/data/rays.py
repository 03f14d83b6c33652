"""Rays through pixels (origins and unit directions in world coordinates, with OpenCV lens distortion undone), and
the way back: where world points fall in an image (`project`)."""

from __future__ import annotations

import numpy as np
import torch

from voxnerf.data.cameras import Cameras

UNDISTORT_ITERATIONS = 10


def distort(xy: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Apply OpenCV radial-tangential distortion to normalized image coordinates.

    Args:
        xy: (R, 2) undistorted normalized coordinates ((u - cx) / fx, (v - cy) / fy).
        coeffs: (R, 4) k1, k2, p1, p2.
    Returns:
        (R, 2) distorted normalized coordinates.
    """
    x, y = xy.unbind(-1)
    k1, k2, p1, p2 = coeffs.unbind(-1)
    r2 = x * x + y * y
    radial = 1 + k1 * r2 + k2 * r2 * r2
    dx = 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    dy = p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return torch.stack([x * radial + dx, y * radial + dy], -1)


def undistort(xy_distorted: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Invert `distort` by fixed-point iteration (as OpenCV's undistortPoints does).

    Args:
        xy_distorted: (R, 2) distorted normalized coordinates.
        coeffs: (R, 4) k1, k2, p1, p2.
    Returns:
        (R, 2) undistorted normalized coordinates.
    """
    xy = xy_distorted
    for _ in range(UNDISTORT_ITERATIONS):
        xy = xy + (xy_distorted - distort(xy, coeffs))
    return xy


def pixel_rays(
    c2w: torch.Tensor, intrinsics: torch.Tensor, distortion: torch.Tensor | None, uv: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays through image points.

    Args:
        c2w: (R, 3, 4) camera-to-world matrices (OpenCV convention) of each ray's camera.
        intrinsics: (R, 4) fx, fy, cx, cy of each ray's camera.
        distortion: (R, 4) k1, k2, p1, p2, or None for ideal pinholes.
        uv: (R, 2) image coordinates in pixels (pixel centers at integer + 0.5).
    Returns:
        origins (R, 3) and unit directions (R, 3) in world coordinates.
    """
    xy = (uv - intrinsics[:, 2:]) / intrinsics[:, :2]
    if distortion is not None:
        xy = undistort(xy, distortion)
    d_cam = torch.nn.functional.pad(xy, (0, 1), value=1.0)
    dirs = (c2w[:, :, :3] * d_cam.unsqueeze(1)).sum(-1)
    return c2w[:, :, 3], dirs / torch.linalg.vector_norm(dirs, dim=-1, keepdim=True)  # never 0: z is 1 in the camera


def image_rays(cameras: Cameras, index: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """All rays of one camera's image, in row-major pixel order.

    Returns:
        origins (H*W, 3) and unit directions (H*W, 3).
    """
    width, height = (int(s) for s in cameras.sizes[index])
    v, u = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64), indexing="ij")
    uv = torch.stack([u.reshape(-1), v.reshape(-1)], -1) + 0.5
    n = uv.shape[0]
    c2w = torch.from_numpy(cameras.c2w[index]).expand(n, 3, 4)
    intr = torch.from_numpy(cameras.intrinsics[index]).expand(n, 4)
    dist = cameras.distortion[index]
    dist_t = torch.from_numpy(dist).expand(n, 4) if dist.any() else None
    origins, dirs = pixel_rays(c2w, intr, dist_t, uv)
    return origins.to(dtype), dirs.to(dtype)


def project(cameras: Cameras, i: int, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where world points (N, 3) fall in camera i's image.

    Returns:
        uv (N, 2) pixel coordinates (pixel centers at +0.5, lens distortion applied), distances (N,) from the
        camera center, and in_front (N,) bool (positive camera z; uv is meaningless elsewhere).
    """
    c2w = cameras.c2w[i]
    local = (points - c2w[:, 3]) @ np.linalg.inv(c2w[:, :3]).T
    z = local[:, 2]
    in_front = z > 1e-9
    xy = local[:, :2] / np.where(in_front, z, 1.0)[:, None]
    if cameras.distortion[i].any():
        coeffs = torch.as_tensor(cameras.distortion[i]).expand(len(xy), 4)
        xy = distort(torch.as_tensor(xy), coeffs).numpy()
    fx, fy, cx, cy = cameras.intrinsics[i]
    return xy * (fx, fy) + (cx, cy), np.linalg.norm(points - c2w[:, 3], axis=1), in_front


def pixels_seen(cameras: Cameras, i: int, points: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The pixel of camera i's (H, W) `shape` image each world point (N, 3) falls in (`project`): (N, 2) int64
    column and row, and (N,) bool whether the point is in front of the camera and inside the image (the pixel is
    meaningless elsewhere)."""
    uv, _, in_front = project(cameras, i, points)
    px = np.floor(uv).astype(np.int64)
    h, w = shape
    return px, in_front & (px[:, 0] >= 0) & (px[:, 1] >= 0) & (px[:, 0] < w) & (px[:, 1] < h)
