"""Camera paths made from a scene's cameras (orbit, sweep, spiral, a smooth path through them) or from keyframes:
world cameras, OpenCV convention (voxnerf.data.cameras)."""

from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.spatial.transform import Rotation, RotationSpline

from voxnerf.data.cameras import Cameras, look_at
from voxnerf.data.normalize import mean_pose


def orbit_shape(cameras: Cameras, center: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """The up axis (3,), the mean distance from `center` and the (N,) elevations (radians) of `cameras`."""
    up = cameras.up
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


def path_knots(c2w: np.ndarray) -> np.ndarray:
    """(K,) increasing path parameter of K poses (3, 4): the distance travelled between consecutive centers plus
    the angle turned (radians) times the poses' spread (their mean distance from their centroid; 1 when they all
    sit at one point), so that a camera turning in place takes time too."""
    centers = c2w[:, :, 3]
    spread = float(np.linalg.norm(centers - centers.mean(0), axis=-1).mean()) or 1.0
    moved = np.linalg.norm(np.diff(centers, axis=0), axis=-1)
    turned = (Rotation.from_matrix(c2w[1:, :, :3]) * Rotation.from_matrix(c2w[:-1, :, :3]).inv()).magnitude()
    steps = moved + spread * turned
    return np.concatenate([[0.0], np.cumsum(np.maximum(steps, 1e-9 * max(steps.sum(), 1.0)))])


def smooth_path(c2w: np.ndarray, n: int, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """n poses along a smooth path through K poses in their order: a cubic spline through the centers and a
    rotation spline through the orientations, both over `path_knots`, evenly spaced in that parameter (the first
    and last on the first and last pose). The one interpolation of camera paths (viewer keyframes, `render --path
    interpolate`).

    Args:
        c2w: (K, 3, 4) camera-to-world poses, K >= 1 (one pose gives n copies).
        n: poses wanted (>= 1).
        values: optional (K, ...) per-pose values (field of view, aspect) interpolated linearly along the path.
    Returns:
        (n, 3, 4) poses and (n, ...) values (None without `values`).
    """
    if len(c2w) == 1:
        return np.repeat(c2w, n, axis=0), None if values is None else np.repeat(values, n, axis=0)
    knots = path_knots(c2w)
    t = np.linspace(0.0, knots[-1], n)
    centers = CubicSpline(knots, c2w[:, :, 3])(t)
    rotations = RotationSpline(knots, Rotation.from_matrix(c2w[:, :, :3]))(t).as_matrix()
    poses = np.concatenate([rotations, centers[:, :, None]], -1)
    if values is None:
        return poses, None
    values = np.asarray(values, np.float64)
    flat = values.reshape(len(values), -1)
    out = np.stack([np.interp(t, knots, column) for column in flat.T], -1).reshape(n, *values.shape[1:])
    return poses, out


def interpolate_cameras(cameras: Cameras, n: int, like: int = 0) -> Cameras:
    """n cameras along `smooth_path` through `cameras` in their order (a capture's order), with camera `like`'s
    intrinsics and image size.

    Args:
        cameras: at least 2 cameras (the training views).
        n: cameras on the path, the first and last on the first and last camera.
    """
    if len(cameras) < 2:
        raise ValueError("a path through the cameras needs at least 2 of them")
    return _like(smooth_path(cameras.c2w, n)[0], cameras, like)


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
