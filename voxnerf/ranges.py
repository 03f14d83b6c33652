"""The values a numeric option may take (`Range`), and the ranges options share. The training configuration
(voxnerf.run.config) declares its options' ranges, and each field kind its own (its Config's `RANGES`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """The values a numeric option may take: `low` and `high` bounds (None: unbounded), each included unless open."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if self.low is not None and (value < self.low or self.low_open and value == self.low):
            return False
        return self.high is None or value < self.high or not self.high_open and value == self.high

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


POSITIVE = Range(0, None, low_open=True)
AT_LEAST_ONE = Range(1)
NON_NEGATIVE = Range(0)
FRACTION = Range(0, 1)
BELOW_ONE = Range(0, 1, high_open=True)
UP_TO_ONE = Range(0, 1, low_open=True)
OPEN_FRACTION = Range(0, 1, low_open=True, high_open=True)
