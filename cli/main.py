"""The `voxnerf` command: builds the typer app and turns VoxnerfError and bad options into one line."""

from __future__ import annotations

import logging
import os
import signal
import sys

import typer

import voxnerf
from voxnerf.cli import demo, evaluate, export, info, process, render, scene, train, view, viewer
from voxnerf.errors import VoxnerfError
from voxnerf.train.interrupt import exit_status

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


def print_version(asked: bool) -> None:
    """`voxnerf --version`: the installed version, then exit."""
    if asked:
        print(f"voxnerf {voxnerf.__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Sparse-voxel NeRF: train on posed photos, render, export meshes and point clouds."""


def main() -> None:
    """Run the CLI. User errors and bad options print `voxnerf: error: ...` as one line and exit with status 2;
    Ctrl-C exits with status 130 after one line; a closed pipe on stdout exits with 141, silently; library warnings
    print as `voxnerf: warning: ...` lines."""
    show_warnings()
    try:
        code = run(sys.argv[1:])
    except typer.TyperException as e:  # click's usage errors, as typer ships them
        message = e.format_message()
        if "\n" in message:  # the help of a command given no arguments
            print(message, file=sys.stderr)
        else:
            where = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) is not None else ""
            print(f"voxnerf: error: {where}{message}", file=sys.stderr)
        code = 2
    except VoxnerfError as e:
        print(f"voxnerf: error: {e}", file=sys.stderr)
        code = 2
    except (KeyboardInterrupt, typer.Abort):
        print("voxnerf: interrupted", file=sys.stderr)
        code = exit_status(signal.SIGINT)
    except BrokenPipeError:  # the reader left (`voxnerf info scene | head`): stop as a shell tool would, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        code = exit_status(signal.SIGPIPE)
    sys.exit(code)


def run(args: list[str]) -> int:
    """Parse `args` and run the command, letting every exception through (typer's own entry turns Ctrl-C into a
    silent exit and usage errors into a box of several lines); returns the exit status."""
    command = typer.main.get_command(app)
    try:
        with command.make_context("voxnerf", list(args)) as ctx:
            command.invoke(ctx)
    except typer.Exit as e:
        return e.exit_code
    return 0


class WarningLines(logging.Handler):
    """A `voxnerf` logger warning as one `voxnerf: warning: ...` line on the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"voxnerf: warning: {record.getMessage()}", file=sys.stderr)


def show_warnings() -> None:
    """Send the `voxnerf` logger's warnings (e.g. a camera repaired on loading) to stderr (once per process)."""
    logger = logging.getLogger("voxnerf")
    if not any(isinstance(h, WarningLines) for h in logger.handlers):
        logger.addHandler(WarningLines(logging.WARNING))
        logger.propagate = False
