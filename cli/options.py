"""Options several commands share."""

from __future__ import annotations

import torch
import typer

from voxnerf.errors import VoxnerfError


def threads_option() -> int | None:
    """The `--threads N` option of eval, render and export."""
    return typer.Option(None, help="torch CPU threads (default: torch's choice).")


def use_threads(threads: int | None) -> None:
    """Set torch's CPU thread count when `threads` is given; VoxnerfError when it is below 1."""
    if threads is None:
        return
    if threads < 1:
        raise VoxnerfError(f"--threads {threads}: expected at least 1")
    torch.set_num_threads(threads)
