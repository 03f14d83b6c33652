"""Camera paths made from a scene's cameras (orbit, sweep, spiral, a smooth path through them), depth pictures,
and frames to an MP4 (ffmpeg through imageio-ffmpeg)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
from scipy.interpolate import CubicSpline
from scipy.spatial.transform import Rotation, RotationSpline

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


def orbit_shape(cameras: Cameras, center: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """The up axis (3,), the mean distance from `center` and the (N,) elevations (radians) of `cameras`."""
    up = world_up(cameras)
    offsets = cameras.centers - center
    distance = np.linalg.norm(offsets, axis=-1)
    return up, float(distance.mean()), np.arcsin(np.clip(offsets @ up / distance, -0.99, 0.99))


def ring_cameras(cameras: Cameras, center: np.ndarray, azimuth: np.ndarray, elevation: np.ndarray,
                 like: int = 0) -> Cameras:
    """Cameras at `azimuth` (n,) and `elevation` (n,) radians around `center` (3,) about the cameras' mean up
    axis, at their mean distance, each looking at `center`, with camera `like`'s intrinsics and size."""
    center = np.asarray(center, np.float64)
    up, distance, _ = orbit_shape(cameras, center)
    e1 = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    ring = np.cos(azimuth)[:, None] * e1 + np.sin(azimuth)[:, None] * e2
    eyes = center + distance * (np.cos(elevation)[:, None] * ring + np.sin(elevation)[:, None] * up)
    c2w = np.stack([look_at(eye, center, up) for eye in eyes])
    return _like(c2w, cameras, like)


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
    _, _, elevation = orbit_shape(cameras, np.asarray(center, np.float64))
    azimuth = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    return ring_cameras(cameras, center, azimuth, np.full(n, elevation.mean()), like)


def spiral_cameras(cameras: Cameras, center: np.ndarray, n: int, faces_forward: bool, like: int = 0) -> Cameras:
    """n cameras on a spiral: for a scene seen from around, one turn of the orbit whose elevation goes twice
    between the lowest and highest training camera's; for a forward-facing scene, the sweep moving back and forth
    along the view axis by half its radius, twice per turn."""
    if faces_forward:
        sweep = sweep_cameras(cameras, n, like)
        angle = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
        radius = float(np.linalg.norm(sweep.centers - sweep.centers.mean(0), axis=-1).mean())
        c2w = sweep.c2w.copy()
        c2w[:, :, 3] += 0.5 * radius * np.sin(2 * angle)[:, None] * c2w[:, :, 2]
        return _like(c2w, cameras, like)
    _, _, elevation = orbit_shape(cameras, np.asarray(center, np.float64))
    azimuth = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    middle, half = 0.5 * (elevation.max() + elevation.min()), 0.5 * (elevation.max() - elevation.min())
    return ring_cameras(cameras, center, azimuth, middle + half * np.sin(2 * azimuth), like)


def interpolate_cameras(cameras: Cameras, n: int, like: int = 0) -> Cameras:
    """n cameras along a smooth path through `cameras` in their order (a capture's order): a cubic spline through
    the centers over their chord length, and a rotation spline through the orientations.

    Args:
        cameras: at least 2 cameras (the training views).
        n: cameras on the path, evenly spaced in chord length, first and last on the first and last camera.
    """
    if len(cameras) < 2:
        raise ValueError("a path through the cameras needs at least 2 of them")
    steps = np.linalg.norm(np.diff(cameras.centers, axis=0), axis=-1)
    knots = np.concatenate([[0.0], np.cumsum(np.maximum(steps, 1e-9))])
    t = np.linspace(0.0, knots[-1], n)
    centers = CubicSpline(knots, cameras.centers)(t)
    rotations = RotationSpline(knots, Rotation.from_matrix(cameras.c2w[:, :, :3]))(t).as_matrix()
    return _like(np.concatenate([rotations, centers[:, :, None]], -1), cameras, like)


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
    return _like(np.concatenate([np.broadcast_to(rotation, (n, 3, 3)), eyes[:, :, None]], -1), cameras, like)


def _like(c2w: np.ndarray, cameras: Cameras, like: int) -> Cameras:
    """Cameras at the (n, 3, 4) poses `c2w` with camera `like`'s intrinsics and image size, no distortion."""
    n = len(c2w)
    return Cameras(c2w, np.tile(cameras.intrinsics[like], (n, 1)), np.tile(cameras.sizes[like], (n, 1)),
                   np.zeros((n, 4)))


def resized(cameras: Cameras, width: int, height: int) -> Cameras:
    """`cameras` rendering width x height images with the same vertical field of view and square pixels."""
    sx, sy = width / cameras.sizes[:, :1], height / cameras.sizes[:, 1:]
    _, fy, cx, cy = np.split(cameras.intrinsics, 4, axis=1)
    intrinsics = np.concatenate([fy * sy, fy * sy, cx * sx, cy * sy], 1)
    return Cameras(cameras.c2w, intrinsics, np.tile([width, height], (len(cameras), 1)), cameras.distortion)


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


def write_video(frames: list[np.ndarray], path: Path, fps: float = 24) -> Path:
    """Write (H, W, 3) uint8 frames to `path` as an H.264 MP4 (its folder is made when missing); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, np.stack(frames), fps=fps, codec="libx264", macro_block_size=2)
    return path
