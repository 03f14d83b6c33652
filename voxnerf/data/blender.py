"""Blender / NeRF-Synthetic: transforms_{train,val,test}.json with camera_angle_x and RGBA PNGs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxnerf.data.cameras import Cameras, focal_from_fov, opengl_to_opencv
from voxnerf.data.common import (
    bounds_from_cameras,
    check_cameras,
    check_one_size,
    check_pose,
    find_image,
    load_images,
    read_json,
    require,
    require_angle,
    require_file_name,
)
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
