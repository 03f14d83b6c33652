"""Entry point of the `voxnerf` command: builds the typer app and turns VoxnerfError into one line."""

from __future__ import annotations

import sys

import typer

from voxnerf.errors import VoxnerfError
from voxnerf_cli import demo, evaluate, export, info, process, render, scene, train, view, viewer

app = typer.Typer(
    help="Sparse-voxel NeRF: train on posed photos, render, export meshes and point clouds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("info")(info.info)
app.command("process")(process.process)
app.command("train")(train.train)
app.command("eval")(evaluate.eval_command)
app.command("render")(render.render)
app.command("demo")(demo.demo)
app.add_typer(scene.app, name="scene")
app.command("export")(export.export)
app.command("view")(view.view)
app.command("viewer")(viewer.viewer)


@app.callback()
def _root() -> None:
    """Sparse-voxel NeRF: train on posed photos, render, export meshes and point clouds."""


def main() -> None:
    """Run the CLI; user errors print `voxnerf: error: FILE: PROBLEM` and exit with status 2, Ctrl-C exits 130."""
    try:
        app()
    except VoxnerfError as e:
        print(f"voxnerf: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("voxnerf: interrupted", file=sys.stderr)
        sys.exit(train.INTERRUPTED)
