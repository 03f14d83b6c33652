"""Orbit cameras around a scene, depth pictures, and frames to an MP4 (or a GIF when no video encoder is installed)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np

from voxnerf.cameras import Cameras
from voxnerf.normalize import mean_pose


def world_up(cameras: Cameras) -> np.ndarray:
    """(3,) unit vector: the mean of the cameras' up directions (OpenCV: up is -y of each camera)."""
    up = -cameras.c2w[:, :, 1].mean(axis=0)
    norm = np.linalg.norm(up)
    return up / norm if norm > 1e-8 else np.array([0.0, 0.0, 1.0])


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(3, 4) OpenCV camera-to-world of a camera at `eye` (3,) looking at `target` (3,), `up` (3,) up in the image."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward, eye], axis=1)


def orbit_cameras(cameras: Cameras, center: np.ndarray, n: int, like: int = 0) -> Cameras:
    """n cameras on a circle around `center`, at the mean distance and elevation of `cameras`.

    Args:
        cameras: the scene's cameras (training views), whose mean up direction is the orbit's axis.
        center: (3,) world point the orbit circles and looks at.
        n: number of cameras, evenly spaced in azimuth over one turn.
        like: index of the camera whose intrinsics and image size every orbit camera copies.
    Returns:
        Cameras with n views, no distortion.
    """
    center = np.asarray(center, np.float64)
    up = world_up(cameras)
    offsets = cameras.centers - center
    distance = float(np.linalg.norm(offsets, axis=-1).mean())
    elevation = float(np.arcsin(np.clip(offsets @ up / np.linalg.norm(offsets, axis=-1), -0.99, 0.99)).mean())
    e1 = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    azimuth = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    ring = np.cos(azimuth)[:, None] * e1 + np.sin(azimuth)[:, None] * e2
    eyes = center + distance * (np.cos(elevation) * ring + np.sin(elevation) * up)
    c2w = np.stack([look_at(eye, center, up) for eye in eyes])
    return Cameras(c2w, np.tile(cameras.intrinsics[like], (n, 1)), np.tile(cameras.sizes[like], (n, 1)),
                   np.zeros((n, 4)))


def sweep_cameras(cameras: Cameras, n: int, like: int = 0) -> Cameras:
    """n cameras for a forward-facing scene: the mean pose moved around a circle in its image plane, as wide as
    the cameras' spread, all looking the mean way (an orbit would look away from the scene).

    Args:
        cameras: the scene's cameras (training views).
        n: number of cameras, evenly spaced around the circle.
        like: index of the camera whose intrinsics and image size every camera copies.
    """
    center, rotation = mean_pose(cameras)
    offsets = (cameras.centers - center) @ rotation[:, :2]
    radius = float(np.linalg.norm(offsets, axis=-1).mean())
    angle = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    eyes = center + radius * (np.cos(angle)[:, None] * rotation[:, 0] + np.sin(angle)[:, None] * rotation[:, 1])
    c2w = np.concatenate([np.broadcast_to(rotation, (n, 3, 3)), eyes[:, :, None]], -1)
    return Cameras(c2w, np.tile(cameras.intrinsics[like], (n, 1)), np.tile(cameras.sizes[like], (n, 1)),
                   np.zeros((n, 4)))


def depth_image(depth: np.ndarray, opacity: np.ndarray, min_opacity: float = 0.5) -> np.ndarray:
    """(H, W) depth and opacity -> (H, W) uint8 grey: near bright, far dark, black where opacity < `min_opacity`."""
    seen = opacity >= min_opacity
    if not seen.any():
        return np.zeros(depth.shape, np.uint8)
    near, far = np.percentile(depth[seen], [1, 99])
    shade = 1.0 - (depth - near) / max(far - near, 1e-8)
    return np.where(seen, np.round(55 + 200 * shade.clip(0, 1)), 0).astype(np.uint8)


def to_uint8(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) float in [0, 1] -> uint8."""
    return np.round(np.clip(rgb, 0, 1) * 255).astype(np.uint8)


def has_video_encoder() -> bool:
    """Whether imageio can write MP4 (the `video` extra, imageio-ffmpeg, is installed)."""
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def write_video(frames: list[np.ndarray], path: Path, fps: int = 24) -> Path:
    """Write (H, W, 3) uint8 frames to `path` as MP4, or beside it as a GIF when no encoder is installed.

    Returns:
        The file written (path itself, or path with the suffix .gif).
    """
    path = Path(path)
    if has_video_encoder():
        iio.imwrite(path, np.stack(frames), fps=fps, codec="libx264", macro_block_size=2)
        return path
    gif = path.with_suffix(".gif")
    iio.imwrite(gif, np.stack(frames), duration=1000 / fps, loop=0)
    return gif
