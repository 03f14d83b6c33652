"""Depth pictures, and frames to an MP4 (ffmpeg through imageio-ffmpeg)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np


def depth_image(depth: np.ndarray, opacity: np.ndarray, min_opacity: float = 0.5) -> np.ndarray:
    """(H, W) depth and opacity -> (H, W) uint8 grey: near bright, far dark, black where opacity < `min_opacity`."""
    seen = opacity >= min_opacity
    if not seen.any():
        return np.zeros(depth.shape, np.uint8)
    near, far = np.percentile(depth[seen], [1, 99])
    shade = 1.0 - (depth - near) / max(far - near, 1e-8)
    return np.where(seen, np.round(55 + 200 * shade.clip(0, 1)), 0).astype(np.uint8)


def write_video(frames: list[np.ndarray], path: Path, fps: float = 24) -> Path:
    """Write (H, W, 3) uint8 frames to `path` as an H.264 MP4 (its folder is made when missing); returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, np.stack(frames), fps=fps, codec="libx264", macro_block_size=2)
    return path
