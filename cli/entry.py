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
    """Import the CLI, then run it (voxnerf.cli.main.main) in a tuned process (voxnerf.system.tuning: freed memory
    kept for reuse, subnormal floats flushed to zero)."""
    from voxnerf.cli.main import main as run
    from voxnerf.system.tuning import tune_process

    tune_process()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run()
