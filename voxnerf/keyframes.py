"""Camera keyframes placed in the viewer, the smooth path through them, and that path as a nerfstudio camera-path
JSON file (`voxnerf render --camera-path` reads the same format).

Keyframes and path frames are world cameras in the run's frame (the frame of its training cameras), OpenCV
convention like every camera in voxnerf (see voxnerf.cameras); the file stores OpenGL camera-to-world matrices, as
nerfstudio does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.interpolate import make_interp_spline
from scipy.spatial.transform import Rotation, Slerp

from voxnerf.camera_path import camera_path_dict, save_camera_path
from voxnerf.cameras import Cameras


@dataclass(frozen=True)
class Keyframe:
    """One camera of a path.

    Attributes:
        c2w: (3, 4) float64 camera-to-world matrix, OpenCV convention, world frame of the run.
        fov: vertical field of view, degrees.
        aspect: image width / height the keyframe was placed with.
    """

    c2w: np.ndarray
    fov: float
    aspect: float


def interpolate(keyframes: list[Keyframe], n: int) -> list[Keyframe]:
    """`n` cameras along the keyframes, evenly spaced in keyframe index: positions on a cubic spline (a lower
    degree for fewer than four keyframes), orientations by spherical linear interpolation, fov linearly.

    Args:
        keyframes: K >= 1 keyframes in path order.
        n: frames wanted (>= 1); the first and last are the first and last keyframes.
    """
    if len(keyframes) == 1:
        return [keyframes[0]] * n
    knots = np.linspace(0.0, 1.0, len(keyframes))
    t = np.linspace(0.0, 1.0, n)
    centers = np.stack([k.c2w[:, 3] for k in keyframes])
    positions = make_interp_spline(knots, centers, k=min(3, len(keyframes) - 1))(t)
    rotations = Slerp(knots, Rotation.from_matrix(np.stack([k.c2w[:, :3] for k in keyframes])))(t).as_matrix()
    fovs = np.interp(t, knots, [k.fov for k in keyframes])
    aspects = np.interp(t, knots, [k.aspect for k in keyframes])
    return [Keyframe(np.concatenate([r, p[:, None]], 1), float(f), float(a))
            for r, p, f, a in zip(rotations, positions, fovs, aspects)]


def path_cameras(frames: list[Keyframe], width: int, height: int) -> Cameras:
    """The frames as pinhole Cameras of `width` x `height` pixels (square pixels, centered principal point)."""
    fy = np.array([0.5 * height / np.tan(np.radians(f.fov) / 2) for f in frames])
    intrinsics = np.stack([fy, fy, np.full_like(fy, width / 2), np.full_like(fy, height / 2)], -1)
    return Cameras(np.stack([f.c2w for f in frames]), intrinsics, np.tile([width, height], (len(frames), 1)),
                   np.zeros((len(frames), 4)))


def write_camera_path(path: Path, keyframes: list[Keyframe], width: int, height: int, fps: float,
                      seconds: float) -> Path:
    """Write the path through `keyframes` as a camera-path file (voxnerf.camera_path): `round(fps * seconds)`
    frames of `width` x `height` pixels, and the keyframes themselves.

    Returns:
        The file written (its folder is created).
    """
    frames = path_cameras(interpolate(keyframes, max(1, round(fps * seconds))), width, height)
    keys = camera_path_dict(path_cameras(keyframes, width, height), fps)["camera_path"]
    return save_camera_path(path, frames, fps, keys)
