"""How many CPU threads training uses: a fixed count when configured, else the cores that other processes leave
free, looked at again every few seconds.

Why: a training step runs thousands of small OpenMP parallel regions, and each waits for its slowest thread. When
another process holds one of two cores (a job from another terminal: Linux shares the CPU between sessions first,
so its `nice` value does not protect us), every region waits for a thread that is off the CPU for a scheduler
slice, and training ran at 5% of its idle speed (issue 16); with one thread per free core it does not wait.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

PROC_STAT = Path("/proc/stat")
RECHECK_S = 2.0  # seconds between looks at the other processes' CPU use
SPARE = 0.3  # other processes' use of up to this much of a core leaves it free for a thread


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


def free_cores(others_busy: float, cores: int) -> int:
    """Threads for `cores` cores of which other processes keep `others_busy` (in cores) busy: at least one."""
    return max(1, min(cores, int(cores - others_busy + SPARE)))


class ThreadBudget:
    """Sets torch's CPU threads for training; `adjust` is called between steps, from the training thread (an
    OpenMP thread count belongs to the thread that sets it).

    Args:
        fixed: a thread count to keep (config `threads`); 0 = follow the free cores.
    """

    def __init__(self, fixed: int):
        self.fixed = fixed
        self.cpus = os.sched_getaffinity(0)
        self.last: tuple[float, float, tuple[int, int] | None] | None = None
        if fixed:
            torch.set_num_threads(fixed)

    def adjust(self) -> None:
        """Every RECHECK_S seconds: the other processes' CPU use since the last look (all busy ticks on our cores
        less this process's CPU time) sets the thread count (`free_cores`)."""
        if self.fixed:
            return
        now = (time.monotonic(), time.process_time(), cpu_ticks(self.cpus))
        if self.last is not None and now[0] - self.last[0] < RECHECK_S:
            return
        if self.last is not None and now[2] is not None and self.last[2] is not None:
            busy, total = (a - b for a, b in zip(now[2], self.last[2]))
            wall = now[0] - self.last[0]
            others = max(0.0, busy / total * len(self.cpus) - (now[1] - self.last[1]) / wall)
            threads = free_cores(others, len(self.cpus))
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        self.last = now
