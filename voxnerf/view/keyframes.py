"""Camera keyframes placed in the viewer, the smooth path through them, and that path as a nerfstudio camera-path
JSON file (`voxnerf render --camera-path` reads the same format).

Keyframes and path frames are world cameras in the run's frame (the frame of its training cameras), OpenCV
convention like every camera in voxnerf (see voxnerf.data.cameras); the file stores OpenGL camera-to-world matrices, as
nerfstudio does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.view.path_file import camera_path_dict, save_camera_path
from voxnerf.view.paths import smooth_path


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
    """`n` cameras along the keyframes (voxnerf.view.paths.smooth_path), fov and aspect interpolated with them.

    Args:
        keyframes: K >= 1 keyframes in path order.
        n: frames wanted (>= 1); the first and last are the first and last keyframes.
    """
    poses, lens = smooth_path(np.stack([k.c2w for k in keyframes]), n,
                              np.array([[k.fov, k.aspect] for k in keyframes]))
    return [Keyframe(c2w, float(fov), float(aspect)) for c2w, (fov, aspect) in zip(poses, lens)]


def path_cameras(frames: list[Keyframe], width: int, height: int) -> Cameras:
    """The frames as pinhole Cameras of `width` x `height` pixels (square pixels, centered principal point)."""
    fy = np.array([0.5 * height / np.tan(np.radians(f.fov) / 2) for f in frames])
    intrinsics = np.stack([fy, fy, np.full_like(fy, width / 2), np.full_like(fy, height / 2)], -1)
    return Cameras(np.stack([f.c2w for f in frames]), intrinsics, np.tile([width, height], (len(frames), 1)),
                   np.zeros((len(frames), 4)))


def write_camera_path(path: Path, keyframes: list[Keyframe], width: int, height: int, fps: float,
                      seconds: float) -> Path:
    """Write the path through `keyframes` as a camera-path file (voxnerf.view.path_file): `round(fps * seconds)`
    frames of `width` x `height` pixels, and the keyframes themselves.

    Returns:
        The file written (its folder is created).
    """
    frames = path_cameras(interpolate(keyframes, max(1, round(fps * seconds))), width, height)
    keys = camera_path_dict(path_cameras(keyframes, width, height), fps)["camera_path"]
    return save_camera_path(path, frames, fps, keys)
