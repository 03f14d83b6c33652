"""Image arithmetic every stage shares: premultiplied RGBA, float <-> uint8, and resizing by area, eagerly or on
access (`--downscale` for captures without smaller copies on disk)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F


def premultiplied(image: np.ndarray) -> torch.Tensor:
    """uint8 (H, W, 3|4) image -> (H, W, 4) float32 premultiplied RGB + alpha (alpha 1 where absent)."""
    t = torch.from_numpy(image).float() / 255.0
    if t.shape[-1] == 3:
        t = torch.cat([t, torch.ones_like(t[..., :1])], -1)
    t[..., :3] *= t[..., 3:]
    return t


def to_uint8(values: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """Float values in [0, 1] (any shape) -> uint8, rounded and clipped; a numpy array or a tensor (on its device)
    comes back as the same kind."""
    scaled = (values * 255.0).round().clip(0, 255)
    return scaled.astype(np.uint8) if isinstance(values, np.ndarray) else scaled.to(torch.uint8)


def resize_area(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W, C) uint8 or (H, W) bool image -> the same at `size` (width, height), each pixel the mean of the
    pixels it covers (a bool mask stays bool: covered more than half)."""
    t = torch.from_numpy(np.ascontiguousarray(image)).float()
    planes = t.permute(2, 0, 1)[None] if t.dim() == 3 else t[None, None]
    out = F.interpolate(planes, size=(size[1], size[0]), mode="area")[0]
    if image.dtype == bool:
        return (out[0] > 0.5).numpy()
    return out.permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()


def resized(images: Sequence[np.ndarray], sizes: np.ndarray) -> Sequence[np.ndarray]:
    """Images or bool masks at per-image (N, 2) width, height `sizes`, resized on access: files decode at those
    sizes (`at_sizes`, voxnerf.data.common.ImageFiles), anything else is area-resized (`ResizedImages`)."""
    return images.at_sizes(sizes) if hasattr(images, "at_sizes") else ResizedImages(images, sizes)


class ResizedImages(Sequence):
    """Another image (or bool mask) sequence resized on access (`resize_area`) to per-image (N, 2) width, height
    `sizes`."""

    def __init__(self, images: Sequence[np.ndarray], sizes: np.ndarray):
        self.images, self.sizes = images, sizes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> np.ndarray:
        return resize_area(self.images[index], tuple(int(v) for v in self.sizes[index]))
