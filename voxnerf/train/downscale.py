"""The size a run trains its images at: by default the largest that the finest grid can use (a subject filling the
frame gets about `pixels_per_cell` pixels per finest cell across), a resumed run's own otherwise."""

from __future__ import annotations

import math
from pathlib import Path

from voxnerf.run.checkpoint import CHECKPOINT, load_checkpoint
from voxnerf.run.config import TrainConfig


def training_downscale(sizes, cfg: TrainConfig) -> int:
    """The smallest whole downscale at which the largest of the images, (N, 2) width, height `sizes`, holds at
    most (cfg.pixels_per_cell x the finest level's resolution)^2 pixels: a subject filling the frame then gets
    about that many pixels per finest cell across; larger photos only add decoding, memory and scoring time."""
    budget = (cfg.pixels_per_cell * finest_resolution(cfg)) ** 2
    width, height = largest_size(sizes)
    return max(1, math.ceil(math.sqrt(width * height / budget) - 1e-9))


def finest_resolution(cfg: TrainConfig) -> int:
    """The finest level's grid resolution (levels never coarsen: `check_levels`)."""
    return cfg.levels[-1].resolution


def largest_size(sizes) -> tuple[int, int]:
    """(width, height) of the largest by pixels of (N, 2) image `sizes`."""
    return max(((int(w), int(h)) for w, h in sizes), key=lambda size: size[0] * size[1])


def recorded_downscale(out: Path) -> int:
    """The image downscale the run in `out` was trained at (its checkpoint's scene record)."""
    return int(load_checkpoint(out / CHECKPOINT)["scene"].get("downscale", 1))


def size_line(full, used, downscale: int, cfg: TrainConfig, resume: bool) -> str:
    """'images      4000x4000 -> 500x500 (1/8: ...; --downscale 1 keeps 4000x4000)' for (N, 2) `full` and
    `used` image sizes."""
    (fw, fh), (uw, uh) = largest_size(full), largest_size(used)
    why = ("the run's own size" if resume else
           f"the finest grid, {finest_resolution(cfg)}^3, uses up to "
           f"{cfg.pixels_per_cell:g} pixels per cell")
    return f"images      {fw}x{fh} -> {uw}x{uh} (1/{downscale}: {why}; --downscale 1 keeps {fw}x{fh})"
