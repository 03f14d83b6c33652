"""Render a toy scene into a Blender / NeRF-Synthetic folder, with ground truth beside the images.

Layout written by `make_scene(name, out_dir)`:

    transforms_{train,val,test}.json   camera_angle_x; frames with file_path "./train/r_0" and a 4x4
                                       camera-to-world transform_matrix (OpenGL: x right, y up, looks along -z)
    {train,val,test}/r_K.png           RGBA 8-bit: straight (not premultiplied) color, alpha = opacity, so that
                                       rgb * a + bg * (1 - a) is the rendering on background bg
    {train,val,test}/r_K_depth.npy     float32 (H, W): distance along each pixel's unit ray direction (not the
                                       camera z) at which the ray is expected to stop, sum w_i t_i / sum w_i;
                                       +inf where the ray sees the background (opacity < 0.5)
    groundtruth.json                   the scene's parameters (`ToyScene.parameters`), cameras and render settings

Cameras sit at CAMERA_DISTANCE from the origin in directions drawn uniformly over the whole sphere (seeded),
look at the origin with +z up in the image, and share the field of view CAMERA_ANGLE_X. Views of every split
are distinct draws. Pixels are rendered with `voxnerf.scenes.reference.render_rays` over the distances (camera
distance -/+ SCENE_RADIUS) where a ray may meet the scene.
"""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch
from tqdm import tqdm

from voxnerf.data.cameras import Cameras, focal_from_fov
from voxnerf.data.cameras import look_at as camera_looking_at
from voxnerf.data.formats import blender
from voxnerf.data.rays import image_rays
from voxnerf.errors import SceneError, VoxnerfError
from voxnerf.scenes.catalog import get
from voxnerf.scenes.reference import render_rays
from voxnerf.scenes.toy import SCENE_RADIUS, ToyScene

CAMERA_DISTANCE = 3.5
CAMERA_ANGLE_X = 0.6911112070083618  # as in NeRF-Synthetic; a scene of radius 0.75 fills ~60% of the width
SAMPLES_PER_RAY = 512  # over 2 * SCENE_RADIUS: 0.0033 units apart, 1.5 per density_eps
CHUNK_RAYS = 4096
BACKGROUND_OPACITY = 0.5
WORLD_UP = np.array([0.0, 0.0, 1.0])
ORIGIN = np.zeros(3)


def look_at(position: np.ndarray, target: np.ndarray = ORIGIN) -> np.ndarray:
    """(3, 4) OpenCV camera-to-world of a camera at `position` (3,) looking at `target` (3,), +z up in the image."""
    forward = (target - position) / np.linalg.norm(target - position)
    up = WORLD_UP if np.linalg.norm(np.cross(forward, WORLD_UP)) > 1e-6 else np.array([0.0, 1.0, 0.0])
    return camera_looking_at(position, target, up)


def orbit_cameras(n: int, size: int, seed: int) -> Cameras:
    """n square pinhole cameras of `size` pixels, at CAMERA_DISTANCE in random directions, looking at the origin."""
    directions = np.random.default_rng(seed).normal(size=(n, 3))
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    c2w = np.stack([look_at(CAMERA_DISTANCE * d) for d in directions])
    focal = focal_from_fov(CAMERA_ANGLE_X, size)
    intrinsics = np.tile([focal, focal, size / 2, size / 2], (n, 1))
    return Cameras(c2w, intrinsics, np.full((n, 2), size), np.zeros((n, 4)))


def render_object(scene: ToyScene, cameras: Cameras, index: int, n_samples: int) -> tuple[torch.Tensor, ...]:
    """Render one camera's rays through `scene` alone (nothing behind it), by dense sampling over the distances
    (camera distance to the origin -/+ SCENE_RADIUS) where a ray may meet it. Rays that pass farther than
    SCENE_RADIUS from the origin meet nothing and are not sampled.

    Returns:
        premultiplied rgb (H*W, 3), opacity (H*W,) and sum_i w_i t_i (H*W,), float32, pixels in row-major order.
    """
    distance = float(np.linalg.norm(cameras.centers[index]))
    near, far = distance - SCENE_RADIUS, distance + SCENE_RADIUS
    origins, dirs = image_rays(cameras, index)
    along = (origins * dirs).sum(-1)
    meets = (origins * origins).sum(-1) - along**2 <= SCENE_RADIUS**2
    rgb, opacity, depth = torch.zeros(len(origins), 3), torch.zeros(len(origins)), torch.zeros(len(origins))
    for rays in meets.nonzero()[:, 0].split(CHUNK_RAYS):
        out = render_rays(scene.field, origins[rays], dirs[rays], near, far, n_samples)
        rgb[rays], opacity[rays], depth[rays] = out.rgb, out.opacity, out.depth
    return rgb, opacity, depth


def render_view(scene: ToyScene, cameras: Cameras, index: int, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Render one camera's image.

    Returns:
        rgba (H, W, 4) float32 in [0, 1] with straight color and alpha = opacity, and depth (H, W) float32 as
        described in the module docstring.
    """
    width, height = (int(s) for s in cameras.sizes[index])
    premultiplied, opacity, depth_sum = render_object(scene, cameras, index, n_samples)
    straight = torch.where(opacity[:, None] > 0, premultiplied / opacity.clamp(min=1e-12)[:, None], 0.0).clamp(0, 1)
    depth = torch.where(opacity >= BACKGROUND_OPACITY, depth_sum / opacity.clamp(min=1e-12), torch.inf)
    rgba = torch.cat([straight, opacity[:, None].clamp(0, 1)], -1)
    return rgba.reshape(height, width, 4).numpy(), depth.reshape(height, width).numpy()


def write_view(root: Path, file_path: str, rgba: np.ndarray, depth: np.ndarray) -> None:
    """Write `file_path`.png (8-bit RGBA from rgba (H, W, 4) in [0, 1]) and `file_path`_depth.npy under root."""
    stem = root / file_path
    iio.imwrite(stem.with_name(stem.name + ".png"), np.round(rgba * 255).astype(np.uint8))
    np.save(stem.with_name(stem.name + "_depth.npy"), depth.astype(np.float32))


def write_split(scene: ToyScene, root: Path, split: str, cameras: Cameras, n_samples: int, bar: tqdm) -> None:
    """Render and write every view of one split and its transforms_{split}.json (`blender.write_transforms`)."""
    (root / split).mkdir(exist_ok=True)
    for k in range(len(cameras)):
        write_view(root, blender.frame_path(split, k), *render_view(scene, cameras, k, n_samples))
        bar.update()
    blender.write_transforms(root, split, CAMERA_ANGLE_X, cameras)


def make_scene(
    name: str,
    out_dir: str | Path,
    n_train: int = 60,
    n_val: int = 10,
    n_test: int = 10,
    size: int = 64,
    seed: int = 0,
    n_samples: int = SAMPLES_PER_RAY,
    progress: bool = False,
) -> Path:
    """Render the toy scene `name` into `out_dir` (created if needed; files of the same names are replaced).

    Args:
        name: a key of `voxnerf.scenes.SCENES`.
        out_dir: the scene folder to write.
        n_train, n_val, n_test: views per split (a split with 0 views gets no transforms file).
        size: width and height of the images in pixels.
        seed: draws the camera directions.
        n_samples: samples per ray of the reference renderer.
        progress: show a tqdm bar over the views.
    Returns:
        The scene folder.
    """
    scene = get(name)
    if n_train < 1 or n_val < 0 or n_test < 0 or size < 1 or n_samples < 1:
        raise VoxnerfError(
            f"toy scene needs >= 1 train view, >= 0 val and test views, size >= 1 and samples >= 1 "
            f"(got {n_train}/{n_val}/{n_test} views, size {size}, {n_samples} samples)"
        )
    root = Path(out_dir)
    if root.exists() and not root.is_dir():
        raise SceneError(root, "exists and is not a folder")
    root.mkdir(parents=True, exist_ok=True)
    counts = {"train": n_train, "val": n_val, "test": n_test}
    cameras = orbit_cameras(sum(counts.values()), size, seed)
    start = 0
    with tqdm(total=sum(counts.values()), desc=f"{name} -> {root}", unit="view", disable=not progress) as bar:
        for split, count in counts.items():
            if count:
                write_split(scene, root, split, cameras.subset(np.arange(start, start + count)), n_samples, bar)
            start += count
    truth = {
        **scene.parameters(),
        "cameras": {"distance": CAMERA_DISTANCE, "camera_angle_x": CAMERA_ANGLE_X, "size": size, "seed": seed, "views": counts},
        "render": {"samples_per_ray": n_samples, "near_far": f"camera distance -/+ {SCENE_RADIUS}", "depth_file": "<file_path>_depth.npy"},
    }
    (root / "groundtruth.json").write_text(json.dumps(truth, indent=2))
    return root
