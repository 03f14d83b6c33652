"""Blender / NeRF-Synthetic: transforms_{train,val,test}.json with camera_angle_x and RGBA PNGs, read and written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxnerf.data.bounds import bounds_from_cameras
from voxnerf.data.camera_checks import check_cameras, check_one_size, check_pose
from voxnerf.data.cameras import Cameras, focal_from_fov, opengl_to_opencv
from voxnerf.data.files import find_image, read_json, require, require_angle, require_file_name
from voxnerf.data.formats.writing import (
    opengl_matrix,
    require_centered_pinhole,
    require_holds,
    save_image,
    save_json,
)
from voxnerf.data.images import load_images
from voxnerf.data.scene import SPLITS, Scene
from voxnerf.errors import SceneError

NAME = "blender"


def detect(root: Path) -> bool:
    return (root / "transforms_train.json").is_file()


def load(root: Path, with_images: bool = True, **_) -> Scene:
    paths, poses, fovs, sources, splits = [], [], [], [], {}
    for split in SPLITS:
        meta_path = root / f"transforms_{split}.json"
        if not meta_path.is_file():
            continue
        meta = read_json(meta_path)
        fov = require_angle(meta, "camera_angle_x", meta_path)
        frames = require(meta, "frames", meta_path)
        if not isinstance(frames, list) or not frames:
            raise SceneError(meta_path, "'frames' is empty")
        start = len(paths)
        for i, frame in enumerate(frames):
            where = f" in frames[{i}]"
            paths.append(find_image(root / require_file_name(frame, "file_path", meta_path, where)))
            poses.append(check_pose(require(frame, "transform_matrix", meta_path, where), meta_path, f"frames[{i}]"))
            fovs.append(fov)
            sources.append(meta_path)
        splits[split] = np.arange(start, len(paths))
    images, sizes = load_images(paths, with_images)
    check_one_size(paths, sizes)
    w, h = sizes[0]
    focal = np.array([focal_from_fov(f, w) for f in fovs])
    intr = np.stack([focal, focal, np.full_like(focal, w / 2), np.full_like(focal, h / 2)], -1)
    cameras = Cameras(opengl_to_opencv(np.stack(poses)), intr, sizes, np.zeros((len(paths), 4)))
    cameras = check_cameras(cameras, sources, paths)
    bbox, near, far = bounds_from_cameras(cameras.subset(splits["train"]))
    has_alpha = images is None or images[0].shape[2] == 4
    return Scene(
        root=root,
        format=NAME,
        image_paths=paths,
        cameras=cameras,
        splits=splits,
        bbox=bbox,
        near=near,
        far=far,
        background=np.ones(3) if has_alpha else None,
        images=images,
    )


def write(scene: Scene, out: Path) -> None:
    """transforms_{split}.json with one camera_angle_x, images in {split}/r_{k}.png."""
    require_centered_pinhole(scene.cameras, NAME)
    require_holds(len({tuple(s) for s in scene.cameras.sizes}) == 1, NAME, "images of different sizes")
    require_holds(len(set(scene.cameras.intrinsics[:, 0])) == 1, NAME, "more than one focal length")
    fov = 2 * np.arctan(0.5 * scene.cameras.sizes[0, 0] / scene.cameras.intrinsics[0, 0])
    for split in SPLITS:
        if split not in scene.splits:
            continue
        for k, i in enumerate(scene.splits[split]):
            save_image(out / f"{frame_path(split, k)}.png", scene.images[i])
        write_transforms(out, split, float(fov), scene.cameras.subset(scene.splits[split]))


def frame_path(split: str, k: int) -> str:
    """The `file_path` of a split's k-th view, without a suffix, as NeRF-Synthetic names them: ./{split}/r_{k}."""
    return f"./{split}/r_{k}"


def write_transforms(out: Path, split: str, camera_angle_x: float, cameras: Cameras) -> None:
    """out/transforms_{split}.json: `camera_angle_x` (radians) and one frame per camera, the k-th one's image at
    `frame_path(split, k)`."""
    frames = [{"file_path": frame_path(split, k), "transform_matrix": opengl_matrix(cameras, k)}
              for k in range(len(cameras))]
    save_json(out / f"transforms_{split}.json", {"camera_angle_x": camera_angle_x, "frames": frames})
