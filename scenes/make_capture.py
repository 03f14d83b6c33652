"""Render a toy real capture (`voxnerf.scenes.captures`) and write it in a real-capture format.

`capture_scene(name, ...)` renders it into an in-memory `voxnerf.data.scene.Scene` (opaque RGB images, cameras,
sparse points with colors) plus ground-truth depth; `make_capture(name, out_dir, fmt)` writes that with
`voxnerf.data.formats.write_scene` (nerfstudio, LLFF, COLMAP, or blender / neus) and adds beside it:

    depth/view_KKK.npy   float32 (H, W) per view, in camera order (= the format's image order, file-name order):
                         the expected distance along each pixel's unit ray direction at which the ray stops,
                         sum_i w_i t_i over the objects plus (1 - their opacity) times the background's distance
    groundtruth.json     the capture's parameters, every camera (OpenCV camera-to-world, view order), the splits
                         and the render settings

Pixels: the objects are rendered as in `make.render_object`; the light they let through lands on the opaque
background (`backgrounds.Shell` or `backgrounds.Wall`, hit analytically) and takes its color.

Sparse points stand in for structure from motion: pixels picked at random in every view, half of them on the
objects and half on the background (fewer where a view has too few such pixels), each lifted to its ground-truth
depth along its ray, with the pixel's color. Pixels on an object's soft edge (object opacity not within
EDGE_OPACITY of 0 or 1) are skipped: their depth is a blend of two surfaces.

Splits hold out every 8th view for testing (and validation), as the LLFF and COLMAP loaders do; nerfstudio
folders get the same split as `*_filenames` lists. The LLFF writer gets each view's own near / far: the
smallest and largest ground-truth z-depth in that view.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from voxnerf.data.cameras import Cameras
from voxnerf.data.formats import WRITERS, write_scene
from voxnerf.data.images import to_uint8
from voxnerf.data.rays import image_rays
from voxnerf.data.scene import Scene, split_every_nth
from voxnerf.errors import SceneError, VoxnerfError
from voxnerf.scenes.captures import ASPECT, Capture, get_capture
from voxnerf.scenes.make import SAMPLES_PER_RAY, render_object
from voxnerf.scenes.toy import SCENE_RADIUS

EDGE_OPACITY = 1e-5  # pixels whose object opacity is within this of 0 or 1 may become sparse points
DEPTH_FOLDER = "depth"
# Formats whose writer takes downscaled image copies; nerfstudio also gets explicit split lists.
DOWNSCALING_FORMATS = ("nerfstudio", "llff", "colmap")


def render_capture_view(capture: Capture, cameras: Cameras, index: int, n_samples: int) -> tuple[np.ndarray, ...]:
    """Render one camera's opaque image: the objects, then the background with the light they let through.

    Returns:
        rgb (H, W, 3) float32 in [0, 1], depth (H, W) float32 (see the module docstring) and the objects'
        opacity (H, W) float32.
    """
    width, height = (int(s) for s in cameras.sizes[index])
    premultiplied, opacity, depth_sum = render_object(capture.objects, cameras, index, n_samples)
    origins, dirs = image_rays(cameras, index)
    t = capture.background.hit(origins, dirs)
    if not torch.isfinite(t).all():
        raise VoxnerfError(f"toy capture '{capture.name}': camera {index} sees past the background")
    through = 1 - opacity
    rgb = premultiplied + through[:, None] * capture.background.color(origins + t[:, None] * dirs)
    depth = depth_sum + through * t
    image = rgb.clamp(0, 1).reshape(height, width, 3).numpy()
    return image, depth.reshape(height, width).numpy(), opacity.reshape(height, width).numpy()


def lift_pixels(cameras: Cameras, index: int, rgb: np.ndarray, depth: np.ndarray, opacity: np.ndarray, n: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Up to n random pixels of one view, half on the objects and half on the background (off the objects' soft
    edges), lifted to their depth.

    Args:
        rgb (H, W, 3), depth (H, W), opacity (H, W): the view as `render_capture_view` returns it.
    Returns:
        points (M, 3) float64 in world units and their colors (M, 3) uint8, M <= n.
    """
    origins, dirs = image_rays(cameras, index, dtype=torch.float64)
    opacity = opacity.reshape(-1)
    on_object, on_background = np.flatnonzero(opacity >= 1 - EDGE_OPACITY), np.flatnonzero(opacity <= EDGE_OPACITY)
    pick = np.concatenate([
        rng.choice(on_object, size=min(n - n // 2, len(on_object)), replace=False),
        rng.choice(on_background, size=min(n // 2, len(on_background)), replace=False),
    ])
    points = origins[pick].numpy() + depth.reshape(-1)[pick, None] * dirs[pick].numpy()
    return points, to_uint8(rgb.reshape(-1, 3)[pick])


def z_range(cameras: Cameras, index: int, depth: np.ndarray) -> tuple[float, float]:
    """Smallest and largest z-depth (along the camera's forward axis) over one view's depth (H, W)."""
    _, dirs = image_rays(cameras, index, dtype=torch.float64)
    z = depth.reshape(-1) * (dirs.numpy() @ cameras.forward[index])
    return float(z.min()), float(z.max())


def capture_scene(name: str, n_views: int = 60, width: int = 128, seed: int = 0, n_samples: int = SAMPLES_PER_RAY,
                  n_points: int = 4000, progress: bool = False) -> tuple[Scene, list[np.ndarray]]:
    """Render the toy capture `name` into an in-memory Scene, ready for `write_scene`.

    Args:
        name: a key of `voxnerf.scenes.CAPTURES`.
        n_views: cameras (every 8th is held out).
        width: image width in pixels (height = round(0.75 width)).
        seed: places the cameras and picks the sparse points.
        n_samples: samples per ray of the reference renderer over the objects.
        n_points: the most sparse points in all (spread evenly over the views).
        progress: show a tqdm bar over the views.
    Returns:
        The scene (format "toy", image_paths naming the views, near / far the range of ground-truth depths,
        bbox the box around the ball that holds the objects, points and `extras["point_colors"]`,
        `extras["view_bounds"]` (N, 2) per-view z-depth range) and the N ground-truth depths (H, W) float32.
    """
    capture = get_capture(name)
    if n_views < 1 or width < 1 or n_samples < 1 or n_points < 0:
        raise VoxnerfError(
            f"toy capture needs >= 1 view, width >= 1, samples >= 1 and points >= 0 "
            f"(got {n_views} views, width {width}, {n_samples} samples, {n_points} points)"
        )
    cameras = capture.cameras(n_views, width, seed)
    rng = np.random.default_rng(seed)
    images, depths, points, colors = [], [], [], []
    for i in tqdm(range(n_views), desc=f"{name}", unit="view", disable=not progress):
        rgb, depth, opacity = render_capture_view(capture, cameras, i, n_samples)
        lifted, lifted_colors = lift_pixels(cameras, i, rgb, depth, opacity, math.ceil(n_points / n_views), rng)
        images.append(to_uint8(rgb))
        depths.append(depth)
        points.append(lifted)
        colors.append(lifted_colors)
    all_depths = np.concatenate([d.reshape(-1) for d in depths])
    return Scene(
        root=Path(name),
        format="toy",
        image_paths=[Path(f"view_{i:03d}") for i in range(n_views)],
        cameras=cameras,
        splits=split_every_nth(n_views),
        bbox=np.array([[-SCENE_RADIUS] * 3, [SCENE_RADIUS] * 3]),
        near=float(all_depths.min()),
        far=float(all_depths.max()),
        images=images,
        points=np.concatenate(points)[:n_points],
        extras={
            "point_colors": np.concatenate(colors)[:n_points],
            "view_bounds": np.array([z_range(cameras, i, d) for i, d in enumerate(depths)]),
        },
    ), depths


def make_capture(name: str, out_dir: str | Path, fmt: str = "colmap", n_views: int = 60, width: int = 128,
                 seed: int = 0, n_samples: int = SAMPLES_PER_RAY, n_points: int = 4000,
                 downscales: tuple[int, ...] = (), progress: bool = False) -> Path:
    """Render the toy capture `name` and write it as format `fmt` into `out_dir`, with depth and ground truth.
    The folder is created if needed and files of the same names are replaced: give each format its own folder.

    Args:
        fmt: a format of `voxnerf.data.formats.WRITERS` ("nerfstudio", "llff", "colmap", "blender", "neus").
        downscales: factors d of extra `images_{d}/` copies (nerfstudio, llff and colmap only); each must divide
            the image width and height.
        the rest: as `capture_scene`.
    Returns:
        The scene folder.
    """
    check_format(fmt, downscales, width)
    root = Path(out_dir)
    if root.exists() and not root.is_dir():
        raise SceneError(root, "exists and is not a folder")
    scene, depths = capture_scene(name, n_views, width, seed, n_samples, n_points, progress)
    options = {"downscales": tuple(downscales)} if fmt in DOWNSCALING_FORMATS else {}
    if fmt == "nerfstudio":
        options["split_lists"] = True
    write_scene(scene, fmt, root, **options)
    (root / DEPTH_FOLDER).mkdir(exist_ok=True)
    for i, depth in enumerate(depths):
        np.save(root / DEPTH_FOLDER / f"view_{i:03d}.npy", depth.astype(np.float32))
    truth = groundtruth(get_capture(name), scene, fmt, seed, n_samples)
    (root / "groundtruth.json").write_text(json.dumps(truth, indent=2))
    return root


def check_format(fmt: str, downscales: tuple[int, ...], width: int) -> None:
    """VoxnerfError unless `fmt` is a known format that can take the `downscales` of images `width` wide."""
    if fmt not in WRITERS:
        raise VoxnerfError(f"unknown scene format '{fmt}' (known: {', '.join(WRITERS)})")
    if downscales and fmt not in DOWNSCALING_FORMATS:
        raise VoxnerfError(f"the {fmt} format has no downscaled image copies (only {', '.join(DOWNSCALING_FORMATS)})")
    height = round(ASPECT * width)
    bad = [d for d in downscales if d < 2 or width % d or height % d]
    if bad:
        raise VoxnerfError(f"downscale {bad[0]} does not divide {width}x{height} images into whole pixels")


def groundtruth(capture: Capture, scene: Scene, fmt: str, seed: int, n_samples: int) -> dict:
    """The contents of groundtruth.json (see the module docstring)."""
    width, height = (int(s) for s in scene.cameras.sizes[0])
    return {
        **capture.parameters(),
        "format": fmt,
        "cameras": {"width": width, "height": height, "seed": seed, "views": len(scene.cameras),
                    "intrinsics": scene.cameras.intrinsics[0].tolist(), "c2w_opencv": scene.cameras.c2w.tolist()},
        "splits": {split: index.tolist() for split, index in scene.splits.items()},
        "render": {"samples_per_ray": n_samples, "near_far": f"camera distance -/+ {SCENE_RADIUS} for the objects",
                   "depth_files": f"{DEPTH_FOLDER}/view_KKK.npy, view order"},
        "depth_range": [scene.near, scene.far],
        "points": int(len(scene.points)),
    }
