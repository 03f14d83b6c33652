"""Training rays: an image pyramid (progressive resolution) and random pixel batches with random backgrounds."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from voxnerf.data.images import premultiplied, to_uint8
from voxnerf.data.rays import pixel_rays
from voxnerf.data.scene import Scene
from voxnerf.data.space import Space
from voxnerf.system.progress import track

PIXEL_CENTER = torch.tensor([0.0, 0.0, 0.5, 0.5])  # intrinsics (fx, fy, cx, cy) less this take pixel indices (u, v)


class RaySampler:
    """Random rays from one split's images at a chosen scale, in the grid's unit box.

    Images are held as premultiplied RGBA uint8, (K, h, w, 4) per scale, on the training device (a quarter of the
    memory of float32) and turned into floats per batch, for the sampled pixels only. The split is decoded once, at
    full size; each smaller scale of the pyramid is area-pooled from it.

    Args:
        scene: the scene (images loaded); all images of the split must share one size.
        indices: (K,) image indices to draw from.
        device: where rays are produced.
        space: the field's space (its center and scale take world rays into the unit box).
        progress: show a bar while the photos are decoded and each scale of the pyramid is pooled.
    """

    def __init__(self, scene: Scene, indices: np.ndarray, device: torch.device, space: Space,
                 progress: bool = False):
        self.device, self.progress = device, progress
        self.scene, self.indices = scene, indices
        self.cameras = scene.cameras.subset(indices)
        self.center, self.scale = list(space.center), space.scale  # world -> unit box: (x - center) * scale
        self._full: torch.Tensor | None = None
        self._pyramid: dict[float, tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}

    def _full_images(self) -> torch.Tensor:
        """(K, H, W, 4) uint8 premultiplied images at full size, decoded once (the trainer asks before its clock
        starts), one image at a time so that no float copy of the whole split is ever held."""
        if self._full is None:
            w, h = (int(v) for v in self.cameras.sizes[0])
            self._full = torch.empty(len(self.indices), h, w, 4, dtype=torch.uint8, device=self.device)
            for k, i in enumerate(track(self.indices, f"decoding photos at {w}x{h}", "photo", enabled=self.progress)):
                self._full[k] = to_uint8(premultiplied(self.scene.rgba(i))).to(self.device)
        return self._full

    def _pooled(self, size: tuple[int, int]) -> torch.Tensor:
        """(K, h, w, 4) uint8: the full-size images area-pooled to `size` (h, w), one image at a time."""
        full = self._full_images()
        if tuple(full.shape[1:3]) == size:
            return full
        out = torch.empty(len(full), *size, 4, dtype=torch.uint8, device=self.device)
        pooling = track(full, f"pooling photos to {size[1]}x{size[0]}", "photo", enabled=self.progress)
        for k, image in enumerate(pooling):
            planes = image.permute(2, 0, 1)[None].float() / 255.0
            out[k] = to_uint8(F.interpolate(planes, size=size, mode="area")[0].permute(1, 2, 0))
        return out

    def at_scale(self, scale: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The pyramid's images (K, h, w, 4) uint8 at `scale` and their cameras as tensors on the device, the
        cameras' positions in the unit box and their intrinsics less `PIXEL_CENTER` (for pixel indices)."""
        if scale not in self._pyramid:
            w, h = (int(v) for v in self.cameras.sizes[0])
            size = (max(1, round(h * scale)), max(1, round(w * scale)))
            cams = self.cameras.scaled(size[1] / w)
            c2w = torch.from_numpy(cams.c2w).float()
            c2w[:, :, 3] = (c2w[:, :, 3] - torch.tensor(self.center)) * self.scale
            tensors = {
                "c2w": c2w,
                "intrinsics": torch.from_numpy(cams.intrinsics).float() - PIXEL_CENTER,
                "distortion": torch.from_numpy(cams.distortion).float() if cams.distortion.any() else None,
                "near": None if cams.near is None else torch.from_numpy(cams.near * self.scale).float(),
            }
            self._pyramid[scale] = (self._pooled(size), {k: v.to(self.device) if v is not None else None
                                                          for k, v in tensors.items()})
        return self._pyramid[scale]

    def sample(self, n: int, scale: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A batch of random rays.

        Returns:
            dict with origins (n, 3) and dirs (n, 3) in the unit box, image (n,) the ray's index among the
            sampler's images, alpha (n,) the pixel's alpha, near (n,) the unit-box depth of its image's nearest
            content (None where the cameras have no near bounds), target (n, 3) composited on `background`
            (n, 3) of random colors. Where pixels are transparent the field must learn to let the background
            through; where they are opaque (all of an opaque photo's pixels) the background is not in the target,
            so a ray that is not fully opaque is penalized: the field cannot fake dark colors with transparency.
        """
        images, cams = self.at_scale(scale)
        k, h, w, _ = images.shape
        dev = generator.device
        img = torch.randint(0, k, (n,), generator=generator, device=dev).to(self.device)
        v = torch.randint(0, h, (n,), generator=generator, device=dev).to(self.device)
        u = torch.randint(0, w, (n,), generator=generator, device=dev).to(self.device)
        rgba = torch.div(images[img, v, u], 255.0)
        uv = torch.stack([u, v], -1)  # pixel indices: the intrinsics are shifted to them
        dist = cams["distortion"][img] if cams["distortion"] is not None else None
        origins, dirs = pixel_rays(cams["c2w"][img], cams["intrinsics"][img], dist, uv)
        background = torch.rand(n, 3, generator=generator, device=dev).to(self.device)
        target = torch.addcmul(rgba[:, :3], 1 - rgba[:, 3:], background)
        near = cams["near"][img] if cams["near"] is not None else None
        return {"origins": origins, "dirs": dirs, "image": img, "target": target,
                "alpha": rgba[:, 3], "background": background, "near": near}

