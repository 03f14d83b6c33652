"""The Scene: images, cameras, splits and bounds, whatever format they came from; the split of views held out for
testing where a format gives none, and the check that a scene has views to train on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.data.images import resized
from voxnerf.errors import SceneError

SPLITS = ("train", "val", "test")


@dataclass
class Scene:
    """A loaded scene.

    Attributes:
        root: the folder it was loaded from.
        format: the detected format name ("blender", "nerfstudio", "llff", "colmap", "neus").
        image_paths: N image files, in camera order.
        cameras: N cameras (see voxnerf.data.cameras for the convention).
        splits: split name -> (K,) int64 indices into the N images.
        bbox: (2, 3) float64 min and max corner of the axis-aligned box of interest, world units.
        near, far: distance range along rays that holds the scene, world units.
        background: (3,) float RGB in [0, 1] that transparent pixels stand for, or None if images are opaque.
        images: N uint8 arrays (H, W, 3 or 4), a list or files decoded on access (voxnerf.data.images.ImageFiles),
            or None when loaded with `with_images=False`.
        masks: N bool arrays (H, W) of foreground, a list or files decoded on access (voxnerf.data.images.MaskFiles),
            or None when the format has none.
        points: (P, 3) float64 sparse 3D points (e.g. from COLMAP), or None.
    """

    root: Path
    format: str
    image_paths: list[Path]
    cameras: Cameras
    splits: dict[str, np.ndarray]
    bbox: np.ndarray
    near: float
    far: float
    background: np.ndarray | None = None
    images: Sequence[np.ndarray] | None = None
    masks: Sequence[np.ndarray] | None = None
    points: np.ndarray | None = None
    extras: dict = field(default_factory=dict)
    downscale: int = 1

    @property
    def center(self) -> np.ndarray:
        """(3,) center of the box of interest, world units."""
        return 0.5 * (self.bbox[0] + self.bbox[1])

    @property
    def scale(self) -> float:
        """World-to-unit scale of the box space: `(x - center) * scale` puts the box of interest inside [-1, 1]^3."""
        return float(2.0 / np.max(self.bbox[1] - self.bbox[0]))

    @property
    def has_masks(self) -> bool:
        """Whether the scene has foreground masks (loaded, or found on disk when loaded without images)."""
        return self.masks is not None or self.extras.get("mask_paths") is not None

    @property
    def has_alpha(self) -> bool:
        """Whether pixels can be transparent (images with alpha, or foreground masks): training then composites
        on random backgrounds so that empty space is learned as empty."""
        return self.background is not None or self.masks is not None

    @property
    def render_background(self) -> np.ndarray:
        """(3,) color that transparent pixels are scored on: the scene's background, white for masked scenes."""
        if self.background is not None:
            return self.background
        return np.ones(3) if self.masks is not None else np.zeros(3)

    def rgba(self, index: int) -> np.ndarray:
        """Image `index` as uint8 (H, W, 3|4); a foreground mask, when there is one, becomes its alpha channel."""
        image = self.images[index]
        if self.masks is None:
            return image
        alpha = self.masks[index].astype(np.uint8) * 255
        if image.shape[-1] == 4:
            alpha = np.minimum(alpha, image[..., 3])
        return np.concatenate([image[..., :3], alpha[..., None]], -1)

    def downscaled(self, factor: int) -> Scene:
        """This scene with images and masks `factor` times smaller (resized on access), intrinsics scaled to match
        (for formats without smaller copies on disk, or captures without them)."""
        cameras = self.cameras.scaled(1.0 / factor)
        images = None if self.images is None else resized(self.images, cameras.sizes)
        masks = None if self.masks is None else resized(self.masks, cameras.sizes)
        return dataclasses.replace(self, cameras=cameras, images=images, masks=masks,
                                   downscale=self.downscale * factor)

    def split_indices(self, split: str) -> np.ndarray:
        """(K,) image indices of `split`; falls back to "test" for a missing "val" and vice versa."""
        if split in self.splits and len(self.splits[split]):
            return self.splits[split]
        fallback = {"val": "test", "test": "val"}.get(split)
        if fallback and fallback in self.splits:
            return self.splits[fallback]
        return np.zeros(0, np.int64)

    def summary(self) -> dict:
        """What was loaded, as plain values (for `voxnerf info` and logs)."""
        sizes = {tuple(int(v) for v in s) for s in self.cameras.sizes}
        fx, fy, cx, cy = self.cameras.intrinsics[0]
        return {
            "format": self.format,
            "root": str(self.root),
            "images": len(self.image_paths),
            "splits": {k: int(len(v)) for k, v in self.splits.items()},
            "resolutions": sorted(sizes),
            "intrinsics[0]": {"fx": float(fx), "fy": float(fy), "cx": float(cx), "cy": float(cy)},
            "distortion": bool(np.any(self.cameras.distortion)),
            "bbox": self.bbox.tolist(),
            "near": float(self.near),
            "far": float(self.far),
            "background": None if self.background is None else self.background.tolist(),
            "masks": self.has_masks,
            "points": 0 if self.points is None else int(len(self.points)),
        }


def split_every_nth(n: int, hold: int = 8) -> dict[str, np.ndarray]:
    """The LLFF convention: every `hold`-th image is held out for testing (and validation)."""
    idx = np.arange(n)
    test = idx[::hold]
    return {"train": np.setdiff1d(idx, test), "val": test, "test": test}


def check_splits(splits: dict[str, np.ndarray], source: Path) -> None:
    """A scene needs training views (test views are needed by `train`, which checks them itself)."""
    train = splits.get("train", np.zeros(0))
    if not len(train):
        total = len(np.unique(np.concatenate([np.asarray(v, np.int64) for v in splits.values()])))
        raise SceneError(source, f"no training views ({total} image{'s' * (total != 1)} in all, every one held "
                                 f"out for val/test)")
