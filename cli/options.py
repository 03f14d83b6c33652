"""Options several commands share."""

from __future__ import annotations

import typer

from voxnerf.errors import VoxnerfError
from voxnerf.system.threads import RECHECK_S, thread_policy


def threads_option(more: str = "") -> int | None:
    """The `--threads N` option of the commands that run torch (`more`: what the command adds to its help)."""
    return typer.Option(None, help=f"torch CPU threads (default: one per core that other processes leave free, "
                                   f"rechecked every {RECHECK_S:g} s during the work){more}.")


def use_threads(threads: int | None) -> None:
    """The command's thread policy (`voxnerf.system.threads`): `threads` fixed, or without it the free cores;
    VoxnerfError when it is below 1."""
    if threads is not None and threads < 1:
        raise VoxnerfError(f"--threads {threads}: expected at least 1")
    thread_policy(threads or 0)


def parse_downscales(text: str) -> tuple[int, ...]:
    """--downscales "2,4" -> (2, 4); "" -> (); VoxnerfError naming the option otherwise."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise VoxnerfError(f"--downscales {text}: expected integers separated by commas, e.g. 2,4") from None
