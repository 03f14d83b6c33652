"""The `voxnerf` console script: loading the libraries takes seconds (torch), and Ctrl-C meanwhile exits quietly."""

from __future__ import annotations

import signal
import sys

from voxnerf.interrupt import exit_status


def main() -> None:
    """Import the CLI, then run it (voxnerf_cli.main.main)."""
    try:
        from voxnerf_cli.main import main as run
    except KeyboardInterrupt:
        print("voxnerf: interrupted", file=sys.stderr)
        sys.exit(exit_status(signal.SIGINT))
    run()
