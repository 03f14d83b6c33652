"""The training progress bar: tqdm on a terminal; elsewhere (a log file, a pipe) a plain line now and then,
instead of the thousands of carriage-return updates a bar writes."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm

PLAIN_EVERY = 30.0  # seconds between plain progress lines


class PlainProgress:
    """tqdm's interface as the trainer uses it (`n`, `set_postfix_str`, `refresh`, `close`), writing one line
    `voxnerf: 42% 12.3 s step ... ` at most every `every` seconds, and one at the end."""

    def __init__(self, file: TextIO, every: float = PLAIN_EVERY, clock=time.monotonic):
        self.file, self.every, self.clock = file, every, clock
        self.n, self.postfix = 0.0, ""
        self.start = self.last = clock()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def refresh(self) -> None:
        if self.clock() - self.last >= self.every:
            self._line()

    def close(self) -> None:
        self._line()

    def _line(self) -> None:
        self.last = self.clock()
        print(f"voxnerf: {self.n:3.0f}% {self.last - self.start:7.1f} s  {self.postfix}".rstrip(), file=self.file,
              flush=True)


def progress_bar(disable: bool, file: TextIO | None = None, **tqdm_options) -> tqdm | PlainProgress | None:
    """A tqdm bar over 100% when `file` (default stderr) is a terminal, else a PlainProgress on it; a disabled
    tqdm when `disable`."""
    file = file or sys.stderr
    if disable or file.isatty():
        return tqdm(total=100, unit="%", disable=disable, file=file, **tqdm_options)
    return PlainProgress(file)
