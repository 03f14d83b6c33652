"""Pixels: image and mask files decoded (at the size in use, on access), premultiplied RGBA, float <-> uint8, and
resizing by area, eagerly or on access (`--downscale` for captures without smaller copies on disk, and the copies
`voxnerf process` and the scene writers make)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from voxnerf.errors import SceneError

DRAFT_MARGIN = 2  # a JPEG read smaller is decoded at least this many times the wanted size, then area-resized


def read_image(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """An image as uint8 (H, W, 3) or (H, W, 4); grey images become RGB, 16-bit images are rescaled. With `size`
    (width, height) it comes at that size, area-resized (`decode`: a large JPEG is decoded smaller first)."""
    img = decode(path, size, "image")
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise SceneError(path, f"expected an RGB or RGBA image, got shape {img.shape}")
    if img.dtype == np.uint16:
        img = (img.astype(np.float32) / 257.0 + 0.5).astype(np.uint8)
    return at_size(img.astype(np.uint8, copy=False), size)


def read_mask(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """A foreground mask as bool (H, W): any channel above half intensity; with `size` (width, height), at that
    size (covered more than half, `resize_area`)."""
    m = decode(path, size, "mask")
    if m.ndim == 3:
        m = m[..., :3].max(-1)
    return at_size(m > (np.iinfo(m.dtype).max // 2 if m.dtype.kind == "u" else 0.5), size)


def decode(path: Path, size: tuple[int, int] | None, what: str) -> np.ndarray:
    """The pixels of an image file, as stored; a JPEG wanted at `size` (width, height) comes through libjpeg's DCT
    scaling at the smallest 1/2, 1/4 or 1/8 reduction still twice that size, which the area resize after it
    averages down (a 4000 px photo wanted at 500 px decodes 1/16 of the pixels; within a level of 255 of the full
    decode resized). SceneError naming the file when it cannot be read."""
    try:
        if size is not None:
            with Image.open(path) as im:
                if im.format == "JPEG" and im.mode in ("RGB", "L"):
                    im.draft(im.mode, tuple(DRAFT_MARGIN * int(v) for v in size))
                    return np.array(im)
        return iio.imread(path)
    except Exception as e:  # imageio and Pillow raise many types for corrupt files
        raise SceneError(path, f"unreadable {what} ({type(e).__name__})") from None


def at_size(image: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """`image` (H, W, C) or (H, W) area-resized to `size` (width, height), or as it is when `size` is None or its
    own."""
    if size is None or image.shape[1::-1] == tuple(size):
        return image
    return resize_area(image, tuple(int(v) for v in size))


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image file, reading as little as the format allows."""
    try:
        props = iio.improps(path)
    except Exception as e:
        raise SceneError(path, f"unreadable image ({type(e).__name__})") from None
    return int(props.shape[1]), int(props.shape[0])


def background_of(path: Path) -> np.ndarray | None:
    """White (3,) if the image at `path` has an alpha channel (transparent pixels to fill), else None."""
    try:
        shape = iio.improps(path).shape
    except Exception as e:
        raise SceneError(path, f"unreadable image ({type(e).__name__})") from None
    return np.ones(3) if len(shape) == 3 and shape[2] == 4 else None


class ImageFiles(Sequence):
    """Images decoded from their files when indexed (`read_image`), none held in memory: training copies its split
    once into uint8 tensors on its device (voxnerf.train.ray_sampler) and scoring reads each test view when it
    scores it, so a scene never holds every split decoded beside them (lego at 800x800: 1 GB).

    Args:
        paths: N files.
        sizes: (N, 2) width, height each is decoded at (see `read_image`), or None for the files' own sizes.
    """

    read = staticmethod(read_image)

    def __init__(self, paths: list[Path], sizes: np.ndarray | None = None):
        self.paths, self.sizes = list(paths), sizes

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.read(self.paths[index], None if self.sizes is None else tuple(int(v) for v in self.sizes[index]))

    def at_sizes(self, sizes: np.ndarray) -> ImageFiles:
        """The same files, decoded at (N, 2) `sizes` (`resized`)."""
        return type(self)(self.paths, sizes)


class MaskFiles(ImageFiles):
    """Foreground masks decoded from their files when indexed (`read_mask`): a scene holds none of them, so 500
    masks of 12 megapixels cost no memory until each is read, at the size in use."""

    read = staticmethod(read_mask)


def load_images(paths: list[Path], with_images: bool) -> tuple[ImageFiles | None, np.ndarray]:
    """Measure images (each must be readable) and give them as files decoded on access.

    Returns:
        the images (or None when `with_images` is False) and their (N, 2) width, height.
    """
    sizes = np.array([image_size(p) for p in paths], np.int64).reshape(-1, 2)
    return (ImageFiles(paths) if with_images else None), sizes


def load_masks(paths: list[Path], image_sizes: np.ndarray, with_images: bool,
               downscale: int = 1) -> MaskFiles | None:
    """Measure foreground masks and give them as files decoded on access at their images' sizes; each must have
    its image's (width, height), or be `downscale` times larger (full-size masks beside downscaled image copies).

    Returns:
        N bool (H, W) masks decoded on access, or None when `with_images` is False.
    """
    sizes = np.array([image_size(p) for p in paths], np.int64).reshape(-1, 2)
    for p, got, want in zip(paths, sizes, image_sizes):
        if tuple(got) != tuple(want) and not np.all(np.abs(got - want * downscale) < downscale):
            raise SceneError(p, f"mask is {got[0]}x{got[1]} but its image is {want[0]}x{want[1]}")
    return MaskFiles(paths, np.asarray(image_sizes)) if with_images else None


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
    """(H, W, C) or (H, W) uint8 image, or (H, W) bool mask -> the same at `size` (width, height), each pixel the
    mean of the pixels it covers (a bool mask stays bool: covered more than half)."""
    t = torch.from_numpy(np.ascontiguousarray(image)).float()
    planes = t.permute(2, 0, 1)[None] if t.dim() == 3 else t[None, None]
    out = F.interpolate(planes, size=(size[1], size[0]), mode="area")[0]
    if image.dtype == bool:
        return (out[0] > 0.5).numpy()
    out = out.permute(1, 2, 0) if image.ndim == 3 else out[0]
    return out.round().clamp(0, 255).to(torch.uint8).numpy()


def downscaled(image: np.ndarray, factor: int) -> np.ndarray:
    """`image` (H, W, C) or (H, W) uint8 `factor` times smaller, round(W / factor) x round(H / factor) pixels (at
    least one), by area (`resize_area`): where H and W are multiples of `factor`, each pixel is the rounded mean of
    a factor x factor block."""
    height, width = image.shape[:2]
    return resize_area(image, (max(1, round(width / factor)), max(1, round(height / factor))))


def resized(images: Sequence[np.ndarray], sizes: np.ndarray) -> Sequence[np.ndarray]:
    """Images or bool masks at per-image (N, 2) width, height `sizes`, resized on access: files decode at those
    sizes (`ImageFiles.at_sizes`), anything else is area-resized (`ResizedImages`)."""
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
