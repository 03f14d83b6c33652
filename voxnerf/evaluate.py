"""Rendering whole views from a trained field and scoring them against the held-out images."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from voxnerf.cameras import Cameras
from voxnerf.errors import VoxnerfError
from voxnerf.model import Model
from voxnerf.metrics import lpips_model, psnr, ssim
from voxnerf.ray_sampler import premultiplied
from voxnerf.rays import image_rays
from voxnerf.renderer import RenderConfig, render_rays
from voxnerf.scene import Scene

RAY_CHUNK = 4096  # rays rendered at once on a CPU: memory grows with chunk x samples per ray, and larger chunks are
#                   slower per ray too (ethiopianHead_8, 1 thread: 33k rays/s and 0.6 GB peak at 4096, 27k and 1.4 GB
#                   at 16384)
GPU_RAY_CHUNK = 1 << 16  # on a GPU: fewer, larger launches


@dataclass
class View:
    """A rendered view: rgb (H, W, 3), depth (H, W) in world units, opacity (H, W), all float32 numpy."""

    rgb: np.ndarray
    depth: np.ndarray
    opacity: np.ndarray


@torch.no_grad()
def render_view(model: Model, cameras: Cameras, index: int, background: np.ndarray, cfg: RenderConfig,
                device: torch.device, amp_dtype: torch.dtype | None = None, chunk: int | None = None,
                image: int | None = None) -> View:
    """Render world camera `index` in full (the model's space places it), in chunks of rays (default: RAY_CHUNK on a
    CPU, GPU_RAY_CHUNK on a GPU), with deterministic (mid-step) samples, in the appearance of training image
    `image` (default: the fixed appearance of views not trained on; see voxnerf.appearance)."""
    width, height = (int(s) for s in cameras.sizes[index])
    origins, dirs = image_rays(cameras, index)
    scale = model.space.scale
    origins = (origins - torch.as_tensor(model.space.center, dtype=torch.float32)) * scale
    bg = torch.as_tensor(background, dtype=torch.float32, device=device)
    chunk = chunk or (GPU_RAY_CHUNK if device.type == "cuda" else RAY_CHUNK)
    parts = []
    for i in range(0, len(origins), chunk):
        rays = origins[i:i + chunk].to(device)
        images = None if image is None else torch.full((len(rays),), image, dtype=torch.long, device=device)
        r = render_rays(model, rays, dirs[i:i + chunk].to(device), bg, cfg, amp_dtype=amp_dtype, images=images)
        parts.append(torch.cat([r.rgb, r.depth[:, None] / scale, r.opacity[:, None]], -1).cpu())
    out = torch.cat(parts).reshape(height, width, 5).numpy()
    depth = np.where(out[..., 4] > 1e-6, out[..., 3] / np.maximum(out[..., 4], 1e-6), 0.0)
    return View(out[..., :3].clip(0, 1), depth.astype(np.float32), out[..., 4])


def target_image(image: np.ndarray, background: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3|4) image -> float32 (H, W, 3) composited on `background` (3,)."""
    t = premultiplied(image).numpy()
    return t[..., :3] + (1 - t[..., 3:]) * np.asarray(background, np.float32)


def score_views(views: list[np.ndarray], targets: list[np.ndarray], with_lpips: bool = True) -> list[dict]:
    """PSNR, SSIM (and LPIPS when installed) of each rendered (H, W, 3) view against its target."""
    lp = lpips_model() if with_lpips else None
    rows = []
    for pred, gt in zip(views, targets):
        row = {"psnr": psnr(pred, gt), "ssim": ssim(pred, gt)}
        if lp is not None:
            row["lpips"] = lp(pred, gt)
        rows.append(row)
    return rows


def score_split(render: Callable[[Cameras, int], View], scene: Scene, split: str = "test", every: int = 1,
                with_lpips: bool = True, progress: bool = False) -> dict:
    """Render every `every`-th view of a scene's split and score it against the images.

    Args:
        render: renders camera `index` of `cameras` on the background the scene is scored on
            (`Scene.render_background`): `Trainer.render_view` or `Run.render_view`.
        scene: the scene, images loaded.
        split: "test", "val" or "train" (see `Scene.split_indices`); it must hold views.
        every: score every k-th view of the split.
        with_lpips: add LPIPS when the package is installed.
        progress: show a bar over the rendered views.
    Returns:
        {"split": split, "views": [{"psnr", "ssim"(, "lpips"), "view": file name}, ...], "mean": {metric: mean},
         "rays": pixels rendered, "render_seconds": wall time of the rendering}.
    """
    indices = scene.split_indices(split)[::every]
    if not len(indices):
        raise VoxnerfError(f"{scene.root}: no '{split}' views to evaluate")
    background = scene.render_background
    start = time.perf_counter()
    preds = [render(scene.cameras, int(i)).rgb
             for i in tqdm(indices, desc=f"{split} views", unit="view", disable=not progress, leave=False)]
    seconds = time.perf_counter() - start
    targets = [target_image(scene.rgba(i), background) for i in indices]
    rows = score_views(preds, targets, with_lpips)
    for i, row in zip(indices, rows):
        row["view"] = scene.image_paths[i].name
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "view"}
    rays = sum(p.shape[0] * p.shape[1] for p in preds)
    return {"split": split, "views": rows, "mean": mean, "rays": rays, "render_seconds": seconds}


def scores_path(run_dir: Path, split: str) -> Path:
    """Where a split's scores go: eval.json for the test split, eval_SPLIT.json for the others."""
    return Path(run_dir) / ("eval.json" if split == "test" else f"eval_{split}.json")


def write_scores(result: dict, run_dir: Path) -> Path:
    """Write a `score_split` result as JSON into the run folder; returns the file."""
    path = scores_path(run_dir, result["split"])
    path.write_text(json.dumps(result, indent=2))
    return path
