"""Rendering whole views from a trained field (in ray chunks), and the images they are compared with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from voxnerf.data.cameras import Cameras
from voxnerf.data.images import premultiplied
from voxnerf.data.rays import image_rays
from voxnerf.render.model import Model
from voxnerf.render.renderer import RenderConfig, render_rays
from voxnerf.system.threads import recheck_threads

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
    CPU, GPU_RAY_CHUNK on a GPU), with deterministic (mid-step) samples, under the color map of training image
    `image` (default: that of a view not trained on there, `ColorMaps.novel_view`; voxnerf.fields.color_maps), its rays
    starting where the camera's nearest content lies (`Cameras.near`) when it has a near bound. The process's
    thread policy is rechecked before each chunk (`recheck_threads`)."""
    width, height = (int(s) for s in cameras.sizes[index])
    origins, dirs = image_rays(cameras, index)
    scale = model.space.scale
    origins = (origins - torch.as_tensor(model.space.center, dtype=torch.float32)) * scale
    near = None if cameras.near is None else float(cameras.near[index]) * scale
    bg = torch.as_tensor(background, dtype=torch.float32, device=device)
    chunk = chunk or (GPU_RAY_CHUNK if device.type == "cuda" else RAY_CHUNK)
    view_map = (model.color_maps.novel_view(cameras.centers[index])
                if image is None and model.color_maps is not None else None)
    parts = []
    for i in range(0, len(origins), chunk):
        recheck_threads()
        rays = origins[i:i + chunk].to(device)
        images = None if image is None else torch.full((len(rays),), image, dtype=torch.long, device=device)
        r = render_rays(model, rays, dirs[i:i + chunk].to(device), bg, cfg, amp_dtype=amp_dtype, images=images,
                        view_map=view_map, near=None if near is None else torch.full((len(rays),), near, device=device))
        parts.append(torch.cat([r.rgb, r.depth[:, None] / scale, r.opacity[:, None]], -1).cpu())
    out = torch.cat(parts).reshape(height, width, 5).numpy()
    depth = np.where(out[..., 4] > 1e-6, out[..., 3] / np.maximum(out[..., 4], 1e-6), 0.0)
    return View(out[..., :3].clip(0, 1), depth.astype(np.float32), out[..., 4])


def target_image(image: np.ndarray, background: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3|4) image -> float32 (H, W, 3) composited on `background` (3,)."""
    t = premultiplied(image).numpy()
    return t[..., :3] + (1 - t[..., 3:]) * np.asarray(background, np.float32)
