"""A run's views written out: each view of a split as color and depth PNGs, and an orbit video around the scene."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import imageio.v3 as iio
from tqdm import tqdm

from voxnerf.cameras import Cameras
from voxnerf.device import resolve_device
from voxnerf.errors import VoxnerfError
from voxnerf.evaluate import View
from voxnerf.run import Run, load_run
from voxnerf.video import depth_image, orbit_cameras, sweep_cameras, to_uint8, write_video


@dataclass
class Rendered:
    """What `render_run` wrote: the views' folder, its PNG files, and the orbit video (None when not asked)."""

    folder: Path
    images: list[Path] = field(default_factory=list)
    video: Path | None = None


def render_cameras(run: Run, cameras: Cameras, quiet: bool, what: str) -> Iterator[tuple[int, View]]:
    """Yield (index, View) for every camera, as the run renders (`Run.render_view`)."""
    for i in tqdm(range(len(cameras)), desc=what, disable=quiet, leave=False):
        yield i, run.render_view(cameras, i)


def write_view(folder: Path, name: str, view: View) -> list[Path]:
    """NAME.png (color) and NAME_depth.png (grey, near is bright) in `folder`."""
    rgb, depth = folder / f"{name}.png", folder / f"{name}_depth.png"
    iio.imwrite(rgb, to_uint8(view.rgb))
    iio.imwrite(depth, depth_image(view.depth, view.opacity))
    return [rgb, depth]


def render_run(run_dir: Path, split: str = "test", out: Path | None = None, video: bool = True, frames: int = 60,
               device: str = "auto", scene: Path | None = None, quiet: bool = False,
               downscale: int | None = None) -> Rendered:
    """Render the split's views into OUT (default RUN/renders/SPLIT) and an orbit video into RUN/renders, at
    `downscale` (default: the training's)."""
    run = load_run(run_dir, resolve_device(device), scene, downscale)
    data = run.scene(with_images=False)
    indices = data.split_indices(split)
    if not len(indices):
        raise VoxnerfError(f"{data.root}: no '{split}' views to render")
    result = Rendered(Path(out) if out else run.path / "renders" / split)
    result.folder.mkdir(parents=True, exist_ok=True)
    views = data.cameras.subset(indices)
    for k, view in render_cameras(run, views, quiet, f"{split} views"):
        result.images += write_view(result.folder, data.image_paths[indices[k]].stem, view)
    if video:
        train = data.cameras.subset(data.split_indices("train"))
        orbit = sweep_cameras(train, frames) if run.model.space.faces_forward else orbit_cameras(train, run.center, frames)
        pictures = [to_uint8(view.rgb) for _, view in render_cameras(run, orbit, quiet, "orbit")]
        result.video = write_video(pictures, result.folder.parent / "orbit.mp4")
    return result
