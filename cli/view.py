"""`voxnerf view RUN`: the learned occupancy and the training cameras in an open3d window, or a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from voxnerf.errors import VoxnerfError
from voxnerf.run.load import load_run
from voxnerf.system.device import resolve_device
from voxnerf.view.occupancy import COLORINGS, VOXELS, camera_frusta, screenshot, show, viewpoint, voxel_mesh


def view(
    run: Path = typer.Argument(..., help="Run folder (or checkpoint file)."),
    color: str = typer.Option("density", help=f"Voxel color: {' | '.join(COLORINGS)} (opacity, or learned color)."),
    voxels: str = typer.Option("cells", "--voxels", "--level", help=f"Start with: {' | '.join(VOXELS)} (keys '[' and ']' switch)."),
    screenshot_path: Optional[Path] = typer.Option(None, "--screenshot", help="Render to this PNG, no window."),
    width: int = typer.Option(800, help="Screenshot width in pixels."),
    height: int = typer.Option(600, help="Screenshot height in pixels."),
    zoom: float = typer.Option(0.3, help="open3d zoom: 1 fits everything, cameras included; smaller is closer."),
    cameras: bool = typer.Option(True, "--cameras/--no-cameras", help="Draw the training cameras' frusta."),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
) -> None:
    """Show occupied voxels colored by opacity or color, with the training camera frusta."""
    if screenshot_path is not None and screenshot_path.suffix.lower() != ".png":
        raise VoxnerfError(f"--screenshot {screenshot_path}: expected a .png file")
    if screenshot_path is not None and not screenshot_path.parent.is_dir():
        raise VoxnerfError(f"--screenshot {screenshot_path}: folder {screenshot_path.parent} does not exist")
    loaded = load_run(run, resolve_device(device))
    cams = None
    if cameras:
        try:
            cams = loaded.training_cameras()
        except VoxnerfError as e:
            typer.echo(f"voxnerf: note: no camera frusta ({e})", err=True)
    if screenshot_path is None:
        show(loaded, cams, color, voxels, zoom)
        return
    where = viewpoint(loaded, cams)
    geometries = [voxel_mesh(loaded, color, voxels)]
    if cams is not None:
        geometries.append(camera_frusta(cams, where["lookat"]))
    screenshot(geometries, screenshot_path, where, width, height, zoom)
    typer.echo(f"wrote {screenshot_path} ({width}x{height}, {len(geometries[0].triangles) // 2} cube faces)")
