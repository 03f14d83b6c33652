"""Camera paths as nerfstudio writes them (its viewer's "camera path" JSON), read and written in one place.

    {"camera_type": "perspective", "render_width": W, "render_height": H, "fps": F, "seconds": S,
     "camera_path": [{"camera_to_world": [16 floats, row-major 4x4, OpenGL: x right, y up, -z forward],
                      "fov": vertical field of view in degrees, "aspect": W / H}, ...],
     "keyframes": [...]}              (optional: the keyframes the path was made from, kept as given)

Poses are in the world frame of the run's training cameras (`Run.training_cameras()`); voxnerf's cameras are
OpenCV (x right, y down, z forward), converted on the way in and out (`cameras.opengl_to_opencv`). Pixels are
square: fx = fy from the vertical field of view, the principal point at the image center.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from voxnerf.data.cameras import Cameras, focal_from_fov, opengl_to_opencv
from voxnerf.data.files import read_json, require, require_number
from voxnerf.errors import SceneError


def _frame_pose(frame: dict, path: Path, k: int) -> np.ndarray:
    """(3, 4) OpenCV camera-to-world of camera_path[k]."""
    where = f" in camera_path.{k}"
    values = require(frame, "camera_to_world", path, where)
    try:
        matrix = np.asarray(values, dtype=np.float64).reshape(4, 4)
    except (TypeError, ValueError):
        raise SceneError(path, f"'camera_to_world'{where} is not 16 numbers") from None
    if not np.all(np.isfinite(matrix)):
        raise SceneError(path, f"'camera_to_world'{where} contains NaN or inf")
    return opengl_to_opencv(matrix)[:3]


def _size(data: dict, path: Path) -> tuple[int, int]:
    """(width, height) of the path's renders."""
    width, height = (require_number(data, key, path) for key in ("render_width", "render_height"))
    if width < 1 or height < 1 or width != int(width) or height != int(height):
        raise SceneError(path, f"render size {width:g}x{height:g}: expected whole pixels, at least 1")
    return int(width), int(height)


def load_camera_path(path: str | Path) -> tuple[Cameras, float]:
    """The cameras of a camera-path file and its frames per second.

    Returns:
        Cameras (N views, OpenCV, render_width x render_height, no distortion) and fps.
    """
    path = Path(path)
    data = read_json(path)
    camera_type = data.get("camera_type", "perspective") if isinstance(data, dict) else None
    if camera_type != "perspective":
        raise SceneError(path, f"camera_type {camera_type!r} is not supported (only 'perspective')")
    frames = require(data, "camera_path", path)
    if not isinstance(frames, list) or not frames:
        raise SceneError(path, "'camera_path' holds no cameras")
    width, height = _size(data, path)
    fps = require_number(data, "fps", path)
    if fps <= 0:
        raise SceneError(path, f"fps {fps:g}: expected a positive number")
    c2w, focal = [], []
    for k, frame in enumerate(frames):
        c2w.append(_frame_pose(frame, path, k))
        fov = require_number(frame, "fov", path, f" in camera_path.{k}")
        if not 0 < fov < 180:
            raise SceneError(path, f"'fov' in camera_path.{k} is {fov:g}: expected degrees in (0, 180)")
        focal.append(focal_from_fov(math.radians(fov), height))
    focal = np.array(focal)
    n = len(frames)
    intrinsics = np.stack([focal, focal, np.full(n, width / 2), np.full(n, height / 2)], 1)
    return Cameras(np.stack(c2w), intrinsics, np.tile([width, height], (n, 1)), np.zeros((n, 4))), fps


def camera_path_dict(cameras: Cameras, fps: float, keyframes: list | None = None) -> dict:
    """The camera-path JSON object of `cameras` (OpenCV; every camera the size of the first, fov from fy)."""
    width, height = (int(s) for s in cameras.sizes[0])
    c2w = np.concatenate([cameras.c2w, np.tile([[[0.0, 0.0, 0.0, 1.0]]], (len(cameras), 1, 1))], 1)
    fov = np.degrees(cameras.vertical_fov())
    path = [{"camera_to_world": opengl_to_opencv(m).reshape(-1).tolist(), "fov": float(f), "aspect": width / height}
            for m, f in zip(c2w, fov)]
    return {"camera_type": "perspective", "render_width": width, "render_height": height, "fps": fps,
            "seconds": len(cameras) / fps, "camera_path": path, "keyframes": keyframes or []}


def save_camera_path(path: str | Path, cameras: Cameras, fps: float, keyframes: list | None = None) -> Path:
    """Write `cameras` (one per frame, OpenCV) as a camera-path file that `load_camera_path` and nerfstudio read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(camera_path_dict(cameras, fps, keyframes), indent=2))
    return path
