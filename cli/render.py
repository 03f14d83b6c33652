"""`voxnerf render RUN`: the split's views (color and depth PNGs) and an orbit video around the scene."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch
import typer
from tqdm import tqdm

from voxnerf.cameras import Cameras
from voxnerf.errors import VoxnerfError
from voxnerf.evaluate import View, render_view
from voxnerf.run import Run, load_run
from voxnerf.trainer import amp_dtype_for, resolve_device
from voxnerf.video import depth_image, orbit_cameras, sweep_cameras, to_uint8, write_video
from voxnerf_cli.evaluate import run_scene


@dataclass
class Rendered:
    """What `render_run` wrote: the views' folder, its PNG files, and the orbit video (None when not asked)."""

    folder: Path
    images: list[Path] = field(default_factory=list)
    video: Path | None = None


def render_cameras(run: Run, cameras: Cameras, dev: torch.device, quiet: bool, what: str):
    """Yield (index, View) for every camera, rendered from the run's field on its scene background."""
    background = np.asarray(run.scene["background"] if run.scene["background"] is not None else np.zeros(3))
    amp = amp_dtype_for(run.config.precision, dev)
    for i in tqdm(range(len(cameras)), desc=what, disable=quiet, leave=False):
        yield i, render_view(run.model, cameras, i, background, run.config.render, dev, amp)


def write_view(folder: Path, name: str, view: View) -> list[Path]:
    """NAME.png (color) and NAME_depth.png (grey, near is bright) in `folder`."""
    rgb, depth = folder / f"{name}.png", folder / f"{name}_depth.png"
    iio.imwrite(rgb, to_uint8(view.rgb))
    iio.imwrite(depth, depth_image(view.depth, view.opacity))
    return [rgb, depth]


def render_run(run_dir: Path, split: str = "test", out: Path | None = None, video: bool = True, frames: int = 60,
               device: str = "auto", scene: Path | None = None, quiet: bool = False) -> Rendered:
    """Render the split's views into OUT (default RUN/renders/SPLIT) and an orbit video into RUN/renders."""
    dev = resolve_device(device)
    run = load_run(run_dir, dev)
    data = run_scene(run.scene, scene, with_images=False)
    indices = data.split_indices(split)
    if not len(indices):
        raise VoxnerfError(f"{data.root}: no '{split}' views to render")
    result = Rendered(Path(out) if out else run.path / "renders" / split)
    result.folder.mkdir(parents=True, exist_ok=True)
    views = data.cameras.subset(indices)
    for k, view in render_cameras(run, views, dev, quiet, f"{split} views"):
        result.images += write_view(result.folder, data.image_paths[indices[k]].stem, view)
    if video:
        train = data.cameras.subset(data.split_indices("train"))
        orbit = sweep_cameras(train, frames) if run.model.space.faces_forward else orbit_cameras(train, run.center, frames)
        pictures = [to_uint8(view.rgb) for _, view in render_cameras(run, orbit, dev, quiet, "orbit")]
        result.video = write_video(pictures, result.folder.parent / "orbit.mp4")
    return result


def render(
    run: Path = typer.Argument(..., help="Run folder (or its checkpoint.pt)."),
    split: str = typer.Option("test", help="Split whose views to render."),
    out: Path = typer.Option(None, help="Folder for the PNGs. Default: RUN/renders/SPLIT."),
    video: bool = typer.Option(True, help="Also render an orbit video (RUN/renders/orbit.mp4)."),
    frames: int = typer.Option(60, min=2, help="Frames of the orbit video."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Write the split's views as PNGs (color and depth) and an orbit MP4 around the scene."""
    print_rendered(render_run(run, split, out, video, frames, device, scene, quiet))


def print_rendered(result: Rendered) -> None:
    """Where the views and the orbit went (and why the orbit is a GIF, when it is)."""
    typer.echo(f"views       {result.folder} ({len(result.images) // 2} color + depth PNGs)")
    if result.video is not None:
        typer.echo(f"orbit       {result.video}")
        if result.video.suffix == ".gif":
            typer.echo("note: wrote a GIF, not an MP4: install the video extra (pip install 'voxnerf[video]')")
