"""Stopping a training run cleanly on Ctrl-C (SIGINT) or SIGTERM: the signal is noted, not raised, and the training
loop stops between two steps and saves. A raised KeyboardInterrupt could land in the middle of a topology change
(parameters swapped, optimizer state not yet) and a second Ctrl-C inside the checkpoint write would drop it.
"""

from __future__ import annotations

import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int) -> int:
    """The shell's status of a process ended by `signum` (130 after Ctrl-C, 143 after SIGTERM)."""
    return 128 + signum


class StopRequest:
    """While entered, SIGINT and SIGTERM set `signum` instead of interrupting. The previous handlers come back on
    exit unless a signal came: the process is then on its way out, and a Ctrl-C more must not break its last steps
    (releasing the run folder, the interpreter's exit) with a traceback. Outside the main thread (where Python
    cannot catch signals) it does nothing.

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._note) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        if self.signum is None:
            for s, handler in self.previous.items():
                signal.signal(s, handler)

    def _note(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            print(f"voxnerf: {name}: stopping after this step and saving a checkpoint", file=sys.stderr, flush=True)
        else:
            print(f"voxnerf: {name} again: still saving and exiting (the previous checkpoint stays intact until the "
                  f"new one is complete)", file=sys.stderr, flush=True)
