"""`voxnerf scene list` and `voxnerf scene make NAME DIR`: toy scenes with exact ground truth.

Object scenes (`toy_scenes.SCENES`) are written as Blender folders with RGBA images; toy real captures
(`toy_scenes.CAPTURES`: unbounded, forward) as nerfstudio, LLFF or COLMAP folders with opaque images.
"""

from __future__ import annotations

from pathlib import Path

import typer

import voxnerf.scenes as toy_scenes
from voxnerf.cli.options import parse_downscales
from voxnerf.data.formats import WRITERS
from voxnerf.errors import VoxnerfError

app = typer.Typer(help="Toy scenes with known ground truth: objects and real-capture look-alikes.", no_args_is_help=True)

OBJECT_HELD_OUT = 10
CAPTURE_POINTS = 4000


@app.command("list")
def list_scenes() -> None:
    """Print each toy scene's name, the formats it is written in and a one-line description."""
    rows = [(name, "blender", scene.description) for name, scene in toy_scenes.SCENES.items()]
    formats = ", ".join(["colmap (default)", *(f for f in WRITERS if f != "colmap")])
    rows += [(name, formats, c.description) for name, c in toy_scenes.CAPTURES.items()]
    name_width, formats_width = (max(len(row[k]) for row in rows) for k in (0, 1))
    for name, formats, description in rows:
        typer.echo(f"{name:<{name_width}}  {formats:<{formats_width}}  {description}")


@app.command("make")
def make(
    name: str = typer.Argument(..., help="Toy scene name (see `voxnerf scene list`)."),
    out_dir: Path = typer.Argument(..., help="Folder to write (created if needed)."),
    fmt: str = typer.Option(None, "--format", help="Scene format: blender for objects; colmap (default), llff, "
                                                    "nerfstudio, blender or neus for the captures."),
    size: int = typer.Option(None, min=8, help="Image width in pixels (objects: 64, square; captures: 128, "
                                                "height 3/4)."),
    views: int = typer.Option(60, min=2, help="Objects: training views. Captures: all views (every 8th is held "
                                              "out)."),
    held_out: int = typer.Option(None, min=0, help=f"Objects only: validation views, and as many test views "
                                                   f"({OBJECT_HELD_OUT})."),
    seed: int = typer.Option(0, min=0, help="Seed of the cameras (and of the captures' sparse points)."),
    samples: int = typer.Option(toy_scenes.SAMPLES_PER_RAY, min=2, help="Samples per ray of the reference "
                                                                        "renderer."),
    points: int = typer.Option(None, min=0, help="Captures only: sparse points, written by the colmap format "
                                                 "(4000)."),
    downscales: str = typer.Option("", help="Captures only: extra downscaled image copies, e.g. 2,4."),
) -> None:
    """Render a toy scene into a folder with depth and ground truth, then print its path."""
    if name in toy_scenes.CAPTURES:
        if held_out is not None:
            raise VoxnerfError("--held-out: toy captures hold out every 8th of --views")
        root = toy_scenes.make_capture(
            name, out_dir, fmt or "colmap", n_views=views, width=size or 128, seed=seed, n_samples=samples,
            n_points=CAPTURE_POINTS if points is None else points, downscales=parse_downscales(downscales),
            progress=True,
        )
    elif name in toy_scenes.SCENES:
        refuse_capture_options(fmt, points, downscales)
        n_held = OBJECT_HELD_OUT if held_out is None else held_out
        root = toy_scenes.make_scene(
            name, out_dir, n_train=views, n_val=n_held, n_test=n_held, size=size or 64, seed=seed, n_samples=samples,
            progress=True,
        )
    else:
        known = ", ".join([*toy_scenes.SCENES, *toy_scenes.CAPTURES])
        raise VoxnerfError(f"unknown toy scene '{name}' (known: {known})")
    typer.echo(str(root))


def refuse_capture_options(fmt: str | None, points: int | None, downscales: str) -> None:
    """VoxnerfError naming the first option that only toy captures take."""
    if fmt not in (None, "blender"):
        raise VoxnerfError(f"--format {fmt}: toy object scenes are written in the blender format only")
    if points is not None:
        raise VoxnerfError("--points: toy object scenes have no sparse points")
    if downscales:
        raise VoxnerfError("--downscales: toy object scenes have no downscaled copies")
