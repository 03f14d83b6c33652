"""`voxnerf viewer RUN`: a web viewer of a trained run (the field rendered live from the browser's camera)."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.cli.options import threads_option, use_threads
from voxnerf.errors import VoxnerfError
from voxnerf.run.load import load_run
from voxnerf.system.device import resolve_device
from voxnerf.view.viewer import Viewer, thumbnails


def viewer(
    run: Path = typer.Argument(..., help="Run folder (or checkpoint file)."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, help="Port to serve on (the next free one when taken; 0: any free port)."),
    max_resolution: int = typer.Option(256, help="Longest side, in pixels, of a still view's final render (a "
                                                  "CPU takes seconds for 256 px)."),
    camera_images: bool = typer.Option(True, help="Offer each training camera's image in its frustum (the 'camera "
                                                  "images' box, off at first; reads the scene's images once)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: int = threads_option(),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
) -> None:
    """Serve a web viewer of RUN until Ctrl-C: the field rendered from your camera (coarse while it moves, sharper
    when it stops), the training cameras, the occupancy, and keyframes saved as a camera path."""
    if not 16 <= max_resolution <= 4096:
        raise VoxnerfError(f"--max-resolution {max_resolution}: expected 16 to 4096 pixels")
    if not 0 <= port <= 65535:
        raise VoxnerfError(f"--port {port}: expected 0 to 65535")
    use_threads(threads)
    loaded = load_run(run, resolve_device(device), scene)
    cameras = images = None
    try:
        loaded_scene = loaded.scene(with_images=camera_images)
        indices = loaded_scene.split_indices("train")
        cameras = loaded_scene.cameras.subset(indices)
        images = thumbnails(loaded_scene, indices) if camera_images else None
    except VoxnerfError as e:
        typer.echo(f"voxnerf: note: no training cameras shown ({e})", err=True)
    shown = Viewer(loaded, cameras, images, host, port, max_resolution, say=typer.echo)
    typer.echo(f"viewer      {shown.url} (Ctrl-C to stop)")
    try:
        shown.serve()
    finally:
        shown.close()
