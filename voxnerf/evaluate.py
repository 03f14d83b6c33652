"""Rendering whole views from a trained field and scoring them against the held-out images."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from voxnerf.cameras import Cameras
from voxnerf.model import Model
from voxnerf.metrics import lpips_model, psnr, ssim
from voxnerf.ray_sampler import premultiplied
from voxnerf.rays import image_rays
from voxnerf.renderer import RenderConfig, render_rays


@dataclass
class View:
    """A rendered view: rgb (H, W, 3), depth (H, W) in world units, opacity (H, W), all float32 numpy."""

    rgb: np.ndarray
    depth: np.ndarray
    opacity: np.ndarray


@torch.no_grad()
def render_view(model: Model, cameras: Cameras, index: int, background: np.ndarray, cfg: RenderConfig,
                device: torch.device, amp_dtype: torch.dtype | None = None, chunk: int = 16384) -> View:
    """Render world camera `index` in full (the model's space places it), in chunks of rays, with
    deterministic (mid-step) samples."""
    width, height = (int(s) for s in cameras.sizes[index])
    origins, dirs = image_rays(cameras, index)
    scale = model.space.scale
    origins = (origins - torch.as_tensor(model.space.center, dtype=torch.float32)) * scale
    bg = torch.as_tensor(background, dtype=torch.float32, device=device)
    parts = []
    for i in range(0, len(origins), chunk):
        r = render_rays(model, origins[i:i + chunk].to(device), dirs[i:i + chunk].to(device), bg, cfg,
                        amp_dtype=amp_dtype)
        parts.append(torch.cat([r.rgb, r.depth[:, None] / scale, r.opacity[:, None]], -1).cpu())
    out = torch.cat(parts).reshape(height, width, 5).numpy()
    depth = np.where(out[..., 4] > 1e-6, out[..., 3] / np.maximum(out[..., 4], 1e-6), 0.0)
    return View(out[..., :3].clip(0, 1), depth.astype(np.float32), out[..., 4])


def target_image(image: np.ndarray, background: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3|4) image -> float32 (H, W, 3) composited on `background` (3,)."""
    t = premultiplied([image])[0].permute(1, 2, 0).numpy()
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
