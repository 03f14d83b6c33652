"""Progress of long work: a tqdm bar on a terminal; elsewhere (a log file, a pipe) a plain line now and then, with
an ETA, instead of the thousands of carriage-return updates a bar writes. The training bar and every other long
loop (decoding photos, building the image pyramid, scoring, rendering, exporting) go through here."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

PLAIN_EVERY = 30.0  # seconds between plain progress lines
T = TypeVar("T")


class PlainProgress:
    """tqdm's interface as voxnerf uses it (`n`, `update`, `set_postfix_str`, `refresh`, `close`), writing one line
    `voxnerf: decoding photos 12/58  21%  10.3 s  ETA 38 s ...` at most every `every` seconds, and one at the end.

    Args:
        file: where the lines go.
        total: what `n` counts up to (100 for a percentage).
        desc: what is in progress ("" for the training bar, whose postfix says it).
        unit: what `n` counts; with "%" the count itself is not repeated in the line.
        quiet_if_short: no line at the end either when the work took less than `every` (a log gets no line for
            each of the many short loops).
    """

    def __init__(self, file: TextIO, total: float = 100.0, desc: str = "", unit: str = "%",
                 every: float = PLAIN_EVERY, clock=None, quiet_if_short: bool = False):
        self.file, self.total, self.desc, self.unit = file, float(total), desc, unit
        self.every, self.clock, self.quiet_if_short = every, clock or time.monotonic, quiet_if_short
        self.n, self.postfix, self.lines = 0.0, "", 0
        self.start = self.last = self.clock()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def update(self, n: float = 1) -> None:
        self.n += n
        self.refresh()

    def refresh(self) -> None:
        if self.clock() - self.last >= self.every:
            self._line(done=False)

    def close(self) -> None:
        if self.lines or not self.quiet_if_short:
            self._line(done=True)

    def _line(self, done: bool) -> None:
        self.last, self.lines = self.clock(), self.lines + 1
        elapsed, share = self.last - self.start, min(self.n / self.total, 1.0) if self.total > 0 else 1.0
        head = "voxnerf:" + (f" {self.desc}" if self.desc else "")
        if self.unit != "%":
            head += f" {self.n:.0f}/{self.total:.0f} {self.unit}"
        parts = [f"{head} {100 * share:3.0f}% {elapsed:7.1f} s"]
        if not done and share > 0:
            parts.append(f"ETA {elapsed * (1 - share) / share:.0f} s")
        print("  ".join(parts + [self.postfix]).rstrip(), file=self.file, flush=True)


def progress_bar(disable: bool, file: TextIO | None = None, total: float = 100.0, desc: str = "",
                 unit: str = "%", quiet_if_short: bool = False, **tqdm_options) -> tqdm | PlainProgress:
    """A tqdm bar over `total` when `file` (default stderr) is a terminal, else a PlainProgress on it (which takes
    none of `tqdm_options`); a disabled tqdm when `disable`."""
    file = file or sys.stderr
    if disable or file.isatty():
        return tqdm(total=total, desc=desc or None, unit=unit, disable=disable, file=file, **tqdm_options)
    return PlainProgress(file, total, desc, unit, quiet_if_short=quiet_if_short)


def track(items: Iterable[T], desc: str, unit: str = "it", total: int | None = None, enabled: bool = True,
          file: TextIO | None = None) -> Iterator[T]:
    """`items`, one by one, with a progress bar (`progress_bar`, which see) named `desc`; `total` defaults to
    len(items). A terminal's bar disappears when done; a log gets a line every 30 s and one at the end, none for
    work that took less."""
    total = len(items) if total is None else total
    bar = progress_bar(not enabled, file, total, desc, unit, quiet_if_short=True, leave=False)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()
