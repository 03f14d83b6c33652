"""Per-image pinhole cameras in one convention (OpenCV), with optional lens distortion.

Convention: camera-to-world matrices whose columns are the camera's x (right), y (down) and z (forward, the
viewing direction) axes in world coordinates, then the camera center. Pixel (i, j) covers [i, i+1) x [j, j+1),
so its center is at (i + 0.5, j + 0.5). Loaders of OpenGL-convention formats (Blender, nerfstudio, LLFF after
its axis shuffle) convert with `opengl_to_opencv`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVEL_SPREAD = 0.01  # `Cameras.up`: the cameras' x axes span a plane when their mean squared component along its
#                      second axis is at least this (a turn of about 6 degrees about up)


@dataclass
class Cameras:
    """N cameras, one per image.

    Attributes:
        c2w: (N, 3, 4) float64 camera-to-world matrices, OpenCV convention.
        intrinsics: (N, 4) float64 fx, fy, cx, cy in pixels.
        sizes: (N, 2) int64 width, height in pixels.
        distortion: (N, 4) float64 OpenCV k1, k2, p1, p2 (all zero for an ideal pinhole).
        near: (N,) float64 depth (world units) of the nearest content each camera sees (LLFF's per-view near bound),
            or None where the format gives none.
    """

    c2w: np.ndarray
    intrinsics: np.ndarray
    sizes: np.ndarray
    distortion: np.ndarray
    near: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.c2w)
        self.c2w = np.asarray(self.c2w, np.float64).reshape(n, 3, 4)
        self.intrinsics = np.asarray(self.intrinsics, np.float64).reshape(n, 4)
        self.sizes = np.asarray(self.sizes, np.int64).reshape(n, 2)
        self.distortion = np.asarray(self.distortion, np.float64).reshape(n, 4)
        if self.near is not None:
            self.near = np.asarray(self.near, np.float64).reshape(n)

    def __len__(self) -> int:
        return len(self.c2w)

    @property
    def centers(self) -> np.ndarray:
        """(N, 3) camera centers in world coordinates."""
        return self.c2w[:, :, 3]

    @property
    def forward(self) -> np.ndarray:
        """(N, 3) unit viewing directions (the camera z axis) in world coordinates."""
        return self.c2w[:, :, 2] / np.linalg.norm(self.c2w[:, :, 2], axis=-1, keepdims=True)

    @property
    def up(self) -> np.ndarray:
        """(3,) unit vector: the world's up as the cameras show it. People hold a camera level (its x axis
        horizontal) however far they tilt it down, so where the cameras' x axes span a plane (they turn about up by
        more than LEVEL_SPREAD) up is its normal, on the side of the cameras' mean up direction (OpenCV: -y); where
        they are about parallel (a forward sweep) up is that mean. Over half a circle of steep views the mean alone
        leans toward the subject. +z when the cameras' up directions cancel out."""
        mean = -self.c2w[:, :, 1].mean(axis=0)
        norm = np.linalg.norm(mean)
        if norm < 1e-8:
            return np.array([0.0, 0.0, 1.0])
        right = self.c2w[:, :, 0] / np.linalg.norm(self.c2w[:, :, 0], axis=-1, keepdims=True)
        spread, axes = np.linalg.eigh(right.T @ right / len(self))
        if spread[1] < LEVEL_SPREAD:
            return mean / norm
        return axes[:, 0] * np.sign(axes[:, 0] @ mean)

    def vertical_fov(self) -> np.ndarray:
        """(N,) vertical field of view of each camera, radians (`fov_from_focal`)."""
        return fov_from_focal(self.intrinsics[:, 1], self.sizes[:, 1])

    def corner_rays(self) -> np.ndarray:
        """(N, 4, 3) world directions through the four corners of each image, scaled to a camera z of 1:
        `centers[:, None] + depth * corner_rays()` are the corners at z-depth `depth`."""
        fx, fy, cx, cy = self.intrinsics.T
        w, h = self.sizes.T
        xs = np.stack([-cx / fx, (w - cx) / fx], -1)
        ys = np.stack([-cy / fy, (h - cy) / fy], -1)
        corners = np.stack(np.broadcast_arrays(xs[:, :, None], ys[:, None, :], np.ones((len(self), 1, 1))), -1)
        return np.einsum("nij,nkj->nki", self.c2w[:, :, :3], corners.reshape(len(self), 4, 3))

    def subset(self, index: np.ndarray) -> "Cameras":
        """The cameras at `index` (any numpy index), as a new Cameras."""
        near = None if self.near is None else self.near[index]
        return Cameras(self.c2w[index], self.intrinsics[index], self.sizes[index], self.distortion[index], near)

    def scaled(self, factor: float) -> "Cameras":
        """The same cameras for images resized by `factor` (0.5 halves width and height)."""
        sizes = np.round(self.sizes * factor).astype(np.int64)
        ratio = sizes / self.sizes
        intr = self.intrinsics * np.concatenate([ratio, ratio], axis=1)
        return Cameras(self.c2w, intr, sizes, self.distortion, self.near)


def opengl_to_opencv(c2w: np.ndarray) -> np.ndarray:
    """Flip the y and z camera axes: OpenGL/Blender (x right, y up, -z forward) <-> OpenCV (x right, y down, z forward).

    Args:
        c2w: (..., 3 or 4, 4) camera-to-world matrices.
    Returns:
        The same shape, with columns 1 and 2 negated (the conversion is its own inverse).
    """
    out = np.array(c2w, dtype=np.float64, copy=True)
    out[..., :3, 1:3] *= -1
    return out


def focal_from_fov(fov: float, size: float) -> float:
    """Focal length in pixels of a pinhole camera with field of view `fov` (radians) across `size` pixels."""
    return 0.5 * size / np.tan(0.5 * fov)


def fov_from_focal(focal: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Field of view (radians) across `size` pixels of a pinhole camera of focal length `focal` pixels (the inverse
    of `focal_from_fov`; arrays of any one shape)."""
    return 2 * np.arctan(0.5 * size / focal)


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(3, 4) OpenCV camera-to-world of a camera at `eye` (3,) looking at `target` (3,), `up` (3,) up in the image."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward, eye], axis=1)
