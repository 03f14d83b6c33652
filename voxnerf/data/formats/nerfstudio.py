"""nerfstudio / instant-ngp: one `transforms.json` with shared intrinsics, per-frame overrides and OpenGL c2w.

Camera keys (at the top level, each overridable per frame): `fl_x fl_y cx cy w h` (instant-ngp may give
`camera_angle_x` / `camera_angle_y` instead of focal lengths), distortion `k1 k2 p1 p2` and `camera_model`
(OPENCV, PINHOLE or SIMPLE_PINHOLE; fisheye and equirectangular models, and nonzero k3/k4, are refused).
Frames hold `file_path`, `transform_matrix` (4x4 camera-to-world, OpenGL axes) and optionally `mask_path`.

Splits: `train_filenames` / `val_filenames` / `test_filenames` when present, else every 8th image is held out.
Downscale d reads `images_{d}/<name>` (and `masks_{d}/<name>`), as nerfstudio's own parser does.

Bounds: from the training cameras (`bounds_from_cameras`). When instant-ngp's `aabb_scale` is present, the box
keeps that center but takes instant-ngp's size: its unit cube is 1 / `scale` world units wide (`scale` defaults
to 0.33 as in instant-ngp) and `aabb_scale` multiplies it. instant-ngp's `offset` is not used to place the box.
A `ply_file_path` point cloud is not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from voxnerf.data.bounds import bounds_from_cameras, near_far_from_box
from voxnerf.data.camera_checks import cameras_for_images, check_cameras, check_one_size, check_pose
from voxnerf.data.cameras import Cameras, focal_from_fov, opengl_to_opencv
from voxnerf.data.files import (
    find_image,
    image_folder,
    read_json,
    require,
    require_angle,
    require_file_name,
    require_number,
)
from voxnerf.data.formats.writing import mask_image, opengl_matrix, save_json, write_images
from voxnerf.data.images import background_of, load_images, load_masks
from voxnerf.data.scene import SPLITS, Scene, split_every_nth
from voxnerf.errors import SceneError

NAME = "nerfstudio"
FILE = "transforms.json"
CAMERA_KEYS = ("camera_model", "fl_x", "fl_y", "camera_angle_x", "camera_angle_y", "cx", "cy", "w", "h",
               "k1", "k2", "k3", "k4", "p1", "p2", "is_fisheye")
SUPPORTED_MODELS = ("OPENCV", "PINHOLE", "SIMPLE_PINHOLE")
DISTORTION_KEYS = ("k1", "k2", "p1", "p2")
NGP_DEFAULT_SCALE = 0.33


def detect(root: Path) -> bool:
    return (root / FILE).is_file()


def load(root: Path, with_images: bool = True, downscale: int = 1, **_) -> Scene:
    meta_path = root / FILE
    meta = read_json(meta_path)
    frames = _frames(meta, meta_path)
    names = [require_file_name(f, "file_path", meta_path, f" in frames[{i}]") for i, f in enumerate(frames)]
    paths = [_image_path(root, name, downscale) for name in names]
    images, sizes = load_images(paths, with_images)
    cameras = cameras_for_images(_cameras(meta, frames, meta_path, paths, sizes, downscale), paths, sizes, downscale)
    cameras = check_cameras(cameras, meta_path, paths)
    splits = _splits(meta, meta_path, names)
    bbox, near, far = _bounds(meta, meta_path, cameras, splits["train"])
    mask_paths = _mask_paths(root, frames, meta_path, downscale)
    return Scene(
        root=root,
        format=NAME,
        image_paths=paths,
        cameras=cameras,
        splits=splits,
        bbox=bbox,
        near=near,
        far=far,
        background=background_of(paths[0]),
        images=images,
        masks=None if mask_paths is None else load_masks(mask_paths, sizes, with_images),
        extras={"mask_paths": mask_paths},
    )


def _cameras(
    meta: dict, frames: list[dict], path: Path, paths: list[Path], sizes: np.ndarray, downscale: int
) -> Cameras:
    """The frames' cameras at full resolution (OpenCV convention), given the (N, 2) sizes of the images found."""
    params = [_camera_params(meta, frame) for frame in frames]
    full_sizes = _full_sizes(params, paths, sizes, downscale, path)
    where = [f" for frames[{i}]" for i in range(len(frames))]
    matrices = [require(f, "transform_matrix", path, f" in frames[{i}]") for i, f in enumerate(frames)]
    poses = [check_pose(m, path, f"frames[{i}]") for i, m in enumerate(matrices)]
    intrinsics = [_intrinsics(p, s, path, w) for p, s, w in zip(params, full_sizes, where)]
    distortion = [_distortion(p, path, w) for p, w in zip(params, where)]
    return Cameras(opengl_to_opencv(np.stack(poses)), np.array(intrinsics), full_sizes, np.array(distortion))


def _frames(meta: dict, path: Path) -> list[dict]:
    frames = require(meta, "frames", path)
    if not isinstance(frames, list) or not frames:
        raise SceneError(path, "'frames' is empty")
    for i, frame in enumerate(frames):
        if not isinstance(frame, dict):
            raise SceneError(path, f"frames[{i}] is not an object")
    return frames


def _camera_params(meta: dict, frame: dict) -> dict:
    """The camera keys of one frame: the top-level values, overridden by the frame's own."""
    shared = {k: meta[k] for k in CAMERA_KEYS if k in meta}
    return shared | {k: frame[k] for k in CAMERA_KEYS if k in frame}


def _image_path(root: Path, file_path: str, downscale: int) -> Path:
    """The image of a frame; downscaled copies live in `images_{d}/` under the same file name."""
    if downscale == 1:
        return find_image(root / file_path)
    return find_image(image_folder(root, "images", downscale) / Path(file_path).name)


def _full_sizes(params: list[dict], paths: list[Path], sizes: np.ndarray, downscale: int, path: Path) -> np.ndarray:
    """(N, 2) full-resolution width, height: `w h` where given, else the (shared) size of the images found."""
    given = np.array(["w" in p or "h" in p for p in params])
    full = sizes * downscale
    for i in np.flatnonzero(given):
        where = f" for frames[{i}]"
        full[i] = require_number(params[i], "w", path, where), require_number(params[i], "h", path, where)
    check_one_size([paths[i] for i in np.flatnonzero(~given)], sizes[~given])
    return full


def _intrinsics(params: dict, size: np.ndarray, path: Path, where: str) -> tuple[float, float, float, float]:
    """fx, fy, cx, cy of one frame at full resolution `size` (width, height)."""
    w, h = (float(v) for v in size)
    if "fl_x" in params:
        fx = require_number(params, "fl_x", path, where)
    elif "camera_angle_x" in params:
        fx = focal_from_fov(require_angle(params, "camera_angle_x", path, where), w)
    else:
        raise SceneError(path, f"missing key 'fl_x' (or 'camera_angle_x'){where}")
    if "fl_y" in params:
        fy = require_number(params, "fl_y", path, where)
    elif "camera_angle_y" in params:
        fy = focal_from_fov(require_angle(params, "camera_angle_y", path, where), h)
    else:
        fy = fx
    if fx <= 0 or fy <= 0:
        raise SceneError(path, f"focal length{where} is not positive ({fx:g}, {fy:g})")
    cx = require_number(params, "cx", path, where) if "cx" in params else w / 2
    cy = require_number(params, "cy", path, where) if "cy" in params else h / 2
    return fx, fy, cx, cy


def _distortion(params: dict, path: Path, where: str) -> list[float]:
    """k1, k2, p1, p2 of one frame, refusing camera models this project cannot trace."""
    model = params.get("camera_model", "OPENCV")
    if model not in SUPPORTED_MODELS or params.get("is_fisheye", False):
        supported = ", ".join(SUPPORTED_MODELS)
        raise SceneError(path, f"camera model '{model}'{where} is not supported (use one of {supported})")
    for key in ("k3", "k4"):
        if key in params and require_number(params, key, path, where) != 0:
            raise SceneError(path, f"distortion '{key}'{where} is not supported (only k1 k2 p1 p2)")
    return [require_number(params, k, path, where) if k in params else 0.0 for k in DISTORTION_KEYS]


def _splits(meta: dict, path: Path, file_paths: list[str]) -> dict[str, np.ndarray]:
    """Splits from `{split}_filenames` lists when the file has any, else every 8th image held out."""
    keys = [f"{s}_filenames" for s in SPLITS if f"{s}_filenames" in meta]
    if not keys:
        return split_every_nth(len(file_paths))
    index = {os.path.normpath(p): i for i, p in enumerate(file_paths)}
    splits = {}
    for key in keys:
        names = meta[key]
        if not isinstance(names, list):
            raise SceneError(path, f"'{key}' is not a list of file names")
        missing = [n for n in names if os.path.normpath(str(n)) not in index]
        if missing:
            raise SceneError(path, f"'{key}' names {missing[0]!r}, which is no frame's file_path")
        splits[key.removesuffix("_filenames")] = np.array([index[os.path.normpath(n)] for n in names], np.int64)
    splits.setdefault("train", np.zeros(0, np.int64))
    return splits


def _bounds(meta: dict, path: Path, cameras: Cameras, train: np.ndarray) -> tuple[np.ndarray, float, float]:
    """bbox (2, 3), near, far: from the cameras, resized by instant-ngp's `aabb_scale` when given."""
    bbox, near, far = bounds_from_cameras(cameras.subset(train) if len(train) else cameras)
    if "aabb_scale" not in meta:
        return bbox, near, far
    aabb_scale = require_number(meta, "aabb_scale", path)
    scale = require_number(meta, "scale", path) if "scale" in meta else NGP_DEFAULT_SCALE
    if aabb_scale <= 0 or scale <= 0:
        raise SceneError(path, f"'aabb_scale' ({aabb_scale:g}) and 'scale' ({scale:g}) must be positive")
    center, half = 0.5 * (bbox[0] + bbox[1]), 0.5 * aabb_scale / scale
    bbox = np.stack([center - half, center + half])
    return (bbox, *near_far_from_box(cameras.centers, bbox))


def _mask_paths(root: Path, frames: list[dict], meta_path: Path, downscale: int) -> list[Path] | None:
    """Each frame's `mask_path` (in `masks_{d}/` when downscaled), or None when no frame has one."""
    has = [("mask_path" in f) for f in frames]
    if not any(has):
        return None
    if not all(has):
        raise SceneError(meta_path, f"frames[{has.index(False)}] has no 'mask_path' but other frames do")
    if downscale == 1:
        return [find_image(root / f["mask_path"]) for f in frames]
    folder = image_folder(root, "masks", downscale)
    return [find_image(folder / Path(f["mask_path"]).name) for f in frames]


def write(scene: Scene, out: Path, split_lists: bool = False, aabb_scale: float | None = None,
                     downscales: tuple[int, ...] = ()) -> None:
    """transforms.json (OPENCV model; shared intrinsics at the top when all cameras agree), images/frame_*.png."""
    cams = scene.cameras
    names = [f"frame_{i + 1:05d}.png" for i in range(len(cams))]
    write_images(scene.images, out, "images", names, downscales)
    shared = all(nerfstudio_camera(cams, i) == nerfstudio_camera(cams, 0) for i in range(len(cams)))
    meta = {"camera_model": "OPENCV", **(nerfstudio_camera(cams, 0) if shared else {})}
    if aabb_scale is not None:
        meta["aabb_scale"] = aabb_scale
    frames = []
    for i, name in enumerate(names):
        frame = {"file_path": f"images/{name}", "transform_matrix": opengl_matrix(cams, i)}
        frames.append(frame | ({} if shared else nerfstudio_camera(cams, i)))
    if scene.masks is not None:
        write_images([mask_image(m) for m in scene.masks], out, "masks", names, downscales)
        for frame, name in zip(frames, names):
            frame["mask_path"] = f"masks/{name}"
    meta["frames"] = frames
    if split_lists:
        for split, index in scene.splits.items():
            meta[f"{split}_filenames"] = [frames[i]["file_path"] for i in index]
    save_json(out / "transforms.json", meta)


def nerfstudio_camera(cams: Cameras, i: int) -> dict:
    """Camera i's intrinsics and distortion as a transforms.json frame (or its top level) holds them."""
    fx, fy, cx, cy = cams.intrinsics[i].tolist()
    k1, k2, p1, p2 = cams.distortion[i].tolist()
    w, h = cams.sizes[i].tolist()
    return {"fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": w, "h": h, "k1": k1, "k2": k2, "p1": p1, "p2": p2}
