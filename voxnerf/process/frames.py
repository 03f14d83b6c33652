"""The images of a capture gathered into one folder: frames picked from a video (ffmpeg, through imageio-ffmpeg) or
photos copied from a folder, and downscaled copies of them (`images_2/`, `images_4/`, ...)."""

from __future__ import annotations

import shutil
from pathlib import Path

import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np

from voxnerf.data.files import list_images
from voxnerf.data.images import downscaled, read_image
from voxnerf.errors import VoxnerfError

VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm")


def is_video(path: Path) -> bool:
    """Whether `path` is a file with a video suffix."""
    return path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES


def frame_indices(total: int, count: int) -> np.ndarray:
    """(min(total, count),) indices of frames spread evenly over a video of `total` frames, first and last included."""
    return np.unique(np.round(np.linspace(0, total - 1, min(total, count))).astype(np.int64))


def extract_frames(video: Path, folder: Path, count: int) -> list[Path]:
    """Write `count` frames spread evenly over `video` as folder/frame_NNNNN.png (NNNNN: the frame's index).

    Returns:
        The written files, in video order.
    """
    try:
        total, _ = imageio_ffmpeg.count_frames_and_secs(str(video))
        frames = imageio_ffmpeg.read_frames(str(video))
        meta = next(frames)
    except (OSError, RuntimeError, StopIteration) as e:
        raise VoxnerfError(f"{video}: ffmpeg cannot read the video ({str(e).strip().splitlines()[-1]})") from None
    if total < 1:
        raise VoxnerfError(f"{video}: the video has no frames")
    width, height = meta["size"]
    wanted = set(frame_indices(total, count).tolist())
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for index, data in enumerate(frames):
        if index in wanted:
            path = folder / f"frame_{index:05d}.png"
            iio.imwrite(path, np.frombuffer(data, np.uint8).reshape(height, width, 3))
            written.append(path)
    frames.close()
    return written


def copy_images(source: Path, folder: Path) -> list[Path]:
    """Copy the images directly in `source` (sorted by name) into `folder`; returns the copies."""
    paths = list_images(source)
    folder.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(p, folder / p.name)) for p in paths]


def downscaled_copies(folder: Path, names: list[str], factors: tuple[int, ...]) -> list[Path]:
    """folder_{d}/NAME for each factor d: the image area-averaged to round(size / d) (`downscaled`: what the loaders
    accept, and what `--downscale` resizes a capture without copies to).

    Returns:
        The folders written.
    """
    written = []
    for d in factors:
        target = folder.with_name(f"{folder.name}_{d}")
        target.mkdir(exist_ok=True)
        for name in names:
            iio.imwrite(target / name, downscaled(read_image(folder / name), d))
        written.append(target)
    return written

