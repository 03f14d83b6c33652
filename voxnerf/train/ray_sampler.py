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
from voxnerf.train.error_map import ErrorMap


ERROR_TILES = 16  # tiles per side of a photo in the error map: about 30 px at 500 px, a few hundred rays a tile a run
ERROR_RATE = 0.25  # a tile's estimate follows its last few hits: the loss falls as training goes


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
        error_share: the share of each batch drawn where the training loss is highest (`ErrorMap`); 0: all uniform.
    """

    def __init__(self, scene: Scene, indices: np.ndarray, device: torch.device, space: Space,
                 progress: bool = False, error_share: float = 0.0):
        self.device, self.progress = device, progress
        self.error_share = error_share
        self.errors = ErrorMap(len(indices), ERROR_TILES, ERROR_RATE, device) if error_share > 0 else None
        self.scene, self.indices = scene, indices
        self.cameras = scene.cameras.subset(indices)
        self.center = torch.as_tensor(space.center, dtype=torch.float32, device=device)
        self.scale = space.scale
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
        """The pyramid's images (K, h, w, 4) uint8 at `scale` and their cameras as tensors on the device."""
        if scale not in self._pyramid:
            w, h = (int(v) for v in self.cameras.sizes[0])
            size = (max(1, round(h * scale)), max(1, round(w * scale)))
            cams = self.cameras.scaled(size[1] / w)
            tensors = {
                "c2w": torch.from_numpy(cams.c2w).float(),
                "intrinsics": torch.from_numpy(cams.intrinsics).float(),
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
            sampler's images, tile (n,) its tile of the error map (None without one), near (n,) the unit-box
            depth of its image's nearest content (None where the cameras have no near bounds), target (n, 3)
            composited on `background` (n, 3) of random colors. Where pixels are transparent the field must learn to let the background
            through; where they are opaque (all of an opaque photo's pixels) the background is not in the target,
            so a ray that is not fully opaque is penalized: the field cannot fake dark colors with transparency.
        """
        images, cams = self.at_scale(scale)
        k, h, w, _ = images.shape
        dev = generator.device
        n_map = round(self.error_share * n)
        img = torch.randint(0, k, (n - n_map,), generator=generator, device=dev)
        v = torch.randint(0, h, (n - n_map,), generator=generator, device=dev)
        u = torch.randint(0, w, (n - n_map,), generator=generator, device=dev)
        tile = self.errors.tile_of(img, v, u, (h, w)) if self.errors is not None else None
        if n_map:
            drawn = self.errors.draw(n_map, (h, w), generator)
            img, v, u, tile = (torch.cat(pair) for pair in zip((img, v, u, tile), drawn))
        img, v, u = img.to(self.device), v.to(self.device), u.to(self.device)
        rgba = images[img, v, u].float() / 255.0
        uv = torch.stack([u, v], -1).float() + 0.5
        dist = cams["distortion"][img] if cams["distortion"] is not None else None
        origins, dirs = pixel_rays(cams["c2w"][img], cams["intrinsics"][img], dist, uv)
        background = torch.rand(n, 3, generator=generator, device=dev).to(self.device)
        target = rgba[:, :3] + (1 - rgba[:, 3:]) * background
        near = cams["near"][img] if cams["near"] is not None else None
        return {"origins": (origins - self.center) * self.scale, "dirs": dirs, "image": img, "target": target,
                "background": background, "near": near, "tile": tile}

    def record(self, batch: dict[str, torch.Tensor], rgb: torch.Tensor) -> None:
        """Tell the error map (if any) how far the rendered colors `rgb` (n, 3) of `batch` missed its targets."""
        if self.errors is not None:
            self.errors.record(batch["tile"], (rgb.detach() - batch["target"]).square().mean(-1))

