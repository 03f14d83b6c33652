"""Scoring a split: rendered views against the held-out images (PSNR, SSIM, LPIPS), and the scores file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError
from voxnerf.render.views import View, target_image
from voxnerf.run.metrics import lpips_model, psnr, ssim
from voxnerf.system.progress import track
from voxnerf.system.threads import recheck_threads


def score_views(views: list[np.ndarray], targets: list[np.ndarray], with_lpips: bool = True) -> list[dict]:
    """PSNR, SSIM (and LPIPS when installed) of each rendered (H, W, 3) view against its target; the thread
    policy is rechecked between views (`recheck_threads`: LPIPS is a VGG network in torch)."""
    lp = lpips_model() if with_lpips else None
    rows = []
    for pred, gt in zip(views, targets):
        recheck_threads()
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
            (`Scene.render_background`): `Run.render_view`.
        scene: the scene, images loaded.
        split: "test", "val" or "train" (see `Scene.split_indices`); it must hold views.
        every: score every k-th view of the split.
        with_lpips: add LPIPS when the package is installed.
        progress: show a bar over the rendered views.
    Returns:
        {"split": split, "views": [{"psnr", "ssim"(, "lpips"), "view": file name}, ...], "mean": {metric: mean},
         "rays": pixels rendered, "render_seconds": wall time of the rendering, "size": [width, height] of the
         largest view scored, "downscale": how many times smaller than the photos (`Scene.downscale`)}.
    """
    indices = scene.split_indices(split)[::every]
    if not len(indices):
        raise VoxnerfError(f"{scene.root}: no '{split}' views to evaluate")
    background = scene.render_background
    start = time.perf_counter()
    preds = [render(scene.cameras, int(i)).rgb
             for i in track(indices, f"scoring {split} views", "view", enabled=progress)]
    seconds = time.perf_counter() - start
    targets = [target_image(scene.rgba(i), background) for i in indices]
    rows = score_views(preds, targets, with_lpips)
    for i, row in zip(indices, rows):
        row["view"] = scene.image_paths[i].name
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "view"}
    rays = sum(p.shape[0] * p.shape[1] for p in preds)
    size = max(p.shape[1::-1] for p in preds)
    return {"split": split, "views": rows, "mean": mean, "rays": rays, "render_seconds": seconds,
            "size": [int(v) for v in size], "downscale": scene.downscale}


def scores_path(run_dir: Path, split: str) -> Path:
    """Where a split's scores go: eval.json for the test split, eval_SPLIT.json for the others."""
    return Path(run_dir) / ("eval.json" if split == "test" else f"eval_{split}.json")


def write_scores(result: dict, run_dir: Path) -> Path:
    """Write a `score_split` result as JSON into the run folder; returns the file."""
    path = scores_path(run_dir, result["split"])
    path.write_text(json.dumps(result, indent=2))
    return path
