"""What the format writers share: images and masks written as PNG (with smaller copies), JSON files, cameras in
the conventions files store, and the refusal of a scene a format cannot hold."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np

from voxnerf.data.cameras import Cameras, opengl_to_opencv
from voxnerf.data.images import downscaled


def require_holds(ok: bool, fmt: str, what: str) -> None:
    """ValueError saying that format `fmt` cannot hold `what`, unless `ok`."""
    if not ok:
        raise ValueError(f"the {fmt} format cannot hold {what}")


def require_centered_pinhole(cams: Cameras, fmt: str) -> None:
    """Blender and LLFF store one focal length per image, no principal point and no distortion."""
    fx, fy, cx, cy = cams.intrinsics.T
    require_holds(np.allclose(fx, fy, rtol=1e-12, atol=0), fmt, "different focal lengths in x and y")
    centered = np.allclose(np.stack([cx, cy], -1), cams.sizes / 2, rtol=0, atol=1e-9)
    require_holds(centered, fmt, "an off-center principal point")
    require_holds(not np.any(cams.distortion), fmt, "lens distortion")


def opengl_matrix(cams: Cameras, i: int) -> list[list[float]]:
    """Camera i's 4x4 camera-to-world matrix in OpenGL axes, as nested lists for JSON."""
    return np.concatenate([opengl_to_opencv(cams.c2w[i]), [[0, 0, 0, 1]]]).tolist()


def world_to_camera(c2w: np.ndarray) -> np.ndarray:
    """(4, 4) world-to-camera matrix of a (3, 4) camera-to-world matrix."""
    rotation = c2w[:, :3].T
    return np.block([[rotation, -rotation @ c2w[:, 3:]], [np.zeros((1, 3)), np.ones((1, 1))]])


def mask_image(mask: np.ndarray) -> np.ndarray:
    """A bool (H, W) mask as a uint8 image: 255 inside, 0 outside."""
    return mask.astype(np.uint8) * 255


def write_images(images: list[np.ndarray], out: Path, folder: str, names: list[str], downscales=()) -> None:
    """Each image as PNG in out/folder/name, and copies `d` times smaller (`downscaled`) in out/folder_{d}/name for
    each d of `downscales`."""
    for image, name in zip(images, names):
        save_image(out / folder / name, image)
        for d in downscales:
            save_image(out / f"{folder}_{d}" / name, downscaled(image, d))


def save_image(path: Path, image: np.ndarray) -> None:
    """Write `image` to `path` (its format from the suffix), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, image)


def save_json(path: Path, data: dict) -> None:
    """Write `data` to `path` as indented JSON."""
    path.write_text(json.dumps(data, indent=2))
