"""`voxnerf render RUN`: the split's views (color and depth PNGs) and an orbit video around the scene."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.renders import Rendered, render_run


def render(
    run: Path = typer.Argument(..., help="Run folder (or its checkpoint.pt)."),
    split: str = typer.Option("test", help="Split whose views to render."),
    out: Path = typer.Option(None, help="Folder for the PNGs. Default: RUN/renders/SPLIT."),
    video: bool = typer.Option(True, help="Also render an orbit video (RUN/renders/orbit.mp4)."),
    frames: int = typer.Option(60, min=2, help="Frames of the orbit video."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    downscale: int = typer.Option(None, min=1, help="Render views this many times smaller than the images (default: "
                                                    "the training's)."),
) -> None:
    """Write the split's views as PNGs (color and depth) and an orbit MP4 around the scene."""
    print_rendered(render_run(run, split, out, video, frames, device, scene, quiet, downscale))


def print_rendered(result: Rendered) -> None:
    """Where the views and the orbit went (and why the orbit is a GIF, when it is)."""
    typer.echo(f"views       {result.folder} ({len(result.images) // 2} color + depth PNGs)")
    if result.video is not None:
        typer.echo(f"orbit       {result.video}")
        if result.video.suffix == ".gif":
            typer.echo("note: wrote a GIF, not an MP4: install the video extra (pip install 'voxnerf[video]')")
