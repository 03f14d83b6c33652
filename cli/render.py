"""`voxnerf render RUN`: the split's views (color and depth PNGs) and a video along a camera path."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.cli.options import threads_option, use_threads
from voxnerf.errors import VoxnerfError
from voxnerf.view.renders import PATHS, Rendered, VideoRequest, render_run


def parse_resolution(text: str | None) -> tuple[int, int] | None:
    """--resolution '640x480' -> (640, 480)."""
    if text is None:
        return None
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise VoxnerfError(f"--resolution {text}: expected WIDTHxHEIGHT, e.g. 640x480") from None
    if width < 1 or height < 1:
        raise VoxnerfError(f"--resolution {text}: expected at least 1x1 pixels")
    return width, height


def render(
    run: Path = typer.Argument(..., help="Run folder (or its checkpoint.pt)."),
    split: str = typer.Option("test", help="Split whose views to render."),
    out: Path = typer.Option(None, help="Folder for everything written: the views in OUT/SPLIT, the video in OUT "
                                        "(default: RUN/renders)."),
    video: bool = typer.Option(True, help="Also render a video along --path (OUT/PATH.mp4)."),
    path: str = typer.Option("orbit", help=f"{' | '.join(PATHS)}: a circle around the scene (a sweep for "
                                           "forward-facing runs), a spiral, or a smooth path through the training "
                                           "cameras in capture order."),
    camera_path: Path = typer.Option(None, help="A camera-path JSON (nerfstudio's format, or the viewer's): render "
                                                "only the video along it, OUT/NAME.mp4."),
    frames: int = typer.Option(60, min=2, help="Frames of a --path video (when --seconds is not given)."),
    fps: float = typer.Option(None, help="Frames per second (default: the camera path's, else 24)."),
    seconds: float = typer.Option(None, help="Video length: fps x seconds frames along --path; a camera path is "
                                             "retimed to last this long."),
    resolution: str = typer.Option(None, help="WIDTHxHEIGHT of the video frames (default: the camera path's, else "
                                              "the training cameras')."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
    threads: int = threads_option(),
    quiet: bool = typer.Option(False, help="No progress bar."),
    downscale: int = typer.Option(None, min=1, help="Render views this many times smaller than the images (default: "
                                                    "the training's)."),
) -> None:
    """Write the split's views as PNGs (color and depth) and an MP4 along a camera path."""
    use_threads(threads)
    request = VideoRequest(path, camera_path, frames, fps, seconds, parse_resolution(resolution))
    print_rendered(render_run(run, split, out, video, frames, device, scene, quiet, request, downscale))


def print_rendered(result: Rendered) -> None:
    """Where the views and the video went."""
    if result.images:
        typer.echo(f"views       {result.folder} ({len(result.images) // 2} color + depth PNGs)")
    if result.video is not None:
        typer.echo(f"video       {result.video}")
