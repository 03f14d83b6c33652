"""`voxnerf scene list` and `voxnerf scene make NAME DIR`: toy scenes with exact ground truth."""

from __future__ import annotations

from pathlib import Path

import typer

import voxnerf_scenes

app = typer.Typer(help="Toy scenes with known ground truth, rendered into Blender-format folders.", no_args_is_help=True)


@app.command("list")
def list_scenes() -> None:
    """Print each toy scene's name and a one-line description."""
    width = max(len(name) for name in voxnerf_scenes.SCENES)
    for name, scene in voxnerf_scenes.SCENES.items():
        typer.echo(f"{name:<{width}}  {scene.description}")


@app.command("make")
def make(
    name: str = typer.Argument(..., help="Toy scene name (see `voxnerf scene list`)."),
    out_dir: Path = typer.Argument(..., help="Folder to write (created if needed)."),
    size: int = typer.Option(64, help="Image width and height in pixels."),
    views: int = typer.Option(60, help="Training views."),
    held_out: int = typer.Option(10, help="Validation views, and as many test views."),
    seed: int = typer.Option(0, help="Seed of the camera directions."),
    samples: int = typer.Option(voxnerf_scenes.SAMPLES_PER_RAY, help="Samples per ray of the reference renderer."),
) -> None:
    """Render a toy scene into a Blender / NeRF-Synthetic folder with depth and ground truth, then print its path."""
    root = voxnerf_scenes.make_scene(
        name, out_dir, n_train=views, n_val=held_out, n_test=held_out, size=size, seed=seed, n_samples=samples, progress=True
    )
    typer.echo(str(root))
