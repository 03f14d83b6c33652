"""The `voxnerf` console script (and `python -m voxnerf`). Loading the libraries takes seconds (torch), and a
Ctrl-C meanwhile exits quietly: importing this module installs a SIGINT handler that ends the process with one
line, and `main` hands SIGINT back to Python (KeyboardInterrupt) once the command line interface has loaded."""

from __future__ import annotations

import signal
import sys

from voxnerf.train.interrupt import exit_status


def interrupted(signum: int, frame) -> None:
    print("voxnerf: interrupted", file=sys.stderr)
    sys.exit(exit_status(signum))


signal.signal(signal.SIGINT, interrupted)


def main() -> None:
    """Import the CLI, then run it (voxnerf.cli.main.main), with freed memory kept for reuse
    (voxnerf.system.allocator) and subnormal floats flushed to zero (voxnerf.system.denormals)."""
    from voxnerf.cli.main import main as run
    from voxnerf.system.allocator import keep_freed_memory
    from voxnerf.system.denormals import flush_denormals

    keep_freed_memory()
    flush_denormals()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run()
