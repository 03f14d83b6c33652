"""How many CPU threads a command's torch work uses: a fixed count when asked (`--threads N`, config `threads`),
else one per core that other processes leave free, looked at again every few seconds.

Why: a training step or a rendered ray chunk runs thousands of small OpenMP parallel regions, and each waits for
its slowest thread. When another process holds one of two cores (a job from another terminal: Linux shares the CPU
between sessions first, so its `nice` value does not protect us), every region waits for a thread that is off the
CPU for a scheduler slice: training ran at 5% of its idle speed, `voxnerf eval` at 34%
(benchmarks/log/2026-11-23-contention.md); with one thread per free core neither waits.

The process has one policy (`thread_policy`, set by each command on entry and by the `Trainer`); the long loops
(training steps, rendered ray chunks and views) call `recheck_threads`, which looks at /proc/stat FIRST_LOOK_S after
the policy was set (by then the command has loaded its run: the look spans that time) and then at most every
RECHECK_S seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

PROC_STAT = Path("/proc/stat")
RECHECK_S = 2.0  # seconds between looks at the other processes' CPU use
FIRST_LOOK_S = 0.2  # ...but the first comes this soon: a 7 s `eval` ran 2 s with two threads beside a busy core
SPARE = 0.3  # other processes' use of up to this much of a core leaves it free for a thread

Look = tuple[float, float, tuple[int, int] | None]  # (wall clock s, this process's CPU s, `cpu_ticks`)


def cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks since boot summed over `cpus`, from /proc/stat; None where there is none."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None


def look(cpus: set[int]) -> Look:
    """The wall clock, this process's CPU time (all its threads) and the busy / total ticks of `cpus`, now."""
    return time.monotonic(), time.process_time(), cpu_ticks(cpus)


def others_busy(before: Look, after: Look, cores: int) -> float | None:
    """Cores that other processes kept busy between two `look`s at `cores` cores: all busy ticks less this
    process's CPU time; None without /proc/stat."""
    if before[2] is None or after[2] is None:
        return None
    busy, total = (a - b for a, b in zip(after[2], before[2]))
    wall = max(after[0] - before[0], 1e-9)
    return max(0.0, busy / max(total, 1) * cores - (after[1] - before[1]) / wall)


def free_cores(others_busy: float, cores: int) -> int:
    """Threads for `cores` cores of which other processes keep `others_busy` (in cores) busy: at least one."""
    return max(1, min(cores, int(cores - others_busy + SPARE)))


class ThreadBudget:
    """Sets torch's CPU threads; `adjust` is called from the thread that runs the torch work (an OpenMP thread count
    belongs to the thread that sets it).

    Args:
        fixed: a thread count to keep; 0 = follow the free cores (`free_cores`).
    """

    def __init__(self, fixed: int):
        self.fixed = fixed
        self.cpus = os.sched_getaffinity(0)
        self.last = look(self.cpus)
        self.interval = FIRST_LOOK_S
        if fixed:
            torch.set_num_threads(fixed)

    def adjust(self) -> None:
        """FIRST_LOOK_S after the start, then every RECHECK_S seconds (a clock read otherwise): the other processes'
        CPU use since the last look sets the thread count."""
        if self.fixed or time.monotonic() - self.last[0] < self.interval:
            return
        now = look(self.cpus)
        others = others_busy(self.last, now, len(self.cpus))
        if others is not None:
            threads = free_cores(others, len(self.cpus))
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        self.last, self.interval = now, RECHECK_S


_policy: ThreadBudget | None = None  # the process's, set by `thread_policy`


def thread_policy(fixed: int) -> ThreadBudget:
    """Make `fixed` threads (0: one per core that other processes leave free) this process's policy; returns it."""
    global _policy
    _policy = ThreadBudget(fixed)
    return _policy


def recheck_threads() -> None:
    """The policy's `ThreadBudget.adjust`, for long loops (between ray chunks, views, training steps); nothing
    before a `thread_policy`."""
    if _policy is not None:
        _policy.adjust()
