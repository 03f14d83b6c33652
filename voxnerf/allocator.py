"""Keep freed memory in the process on glibc systems, so that a training step does not fault fresh pages in.

A training step allocates and frees tensors as large as the grid's tables (gradients, Adam's scratch, lookups of the
occupancy update). glibc serves every allocation above its mmap threshold (at most 32 MB) with a fresh `mmap` and
returns it with `munmap` when freed, so the next step page-faults the same memory in again: on ethiopianHead_8
(1.25M grid rows) a third of the training process's time went to the kernel. `keep_freed_memory` makes glibc serve
large blocks from its heap and not trim it, as the MALLOC_MMAP_MAX_=0 and MALLOC_TRIM_THRESHOLD_ environment
variables would (a user's own settings of those variables win). Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # the largest threshold mallopt takes (an int): free heap top beyond 2 GB is trimmed


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse (no mmap for large blocks, no trimming); True when it did."""
    if any(name in os.environ for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (macOS, musl without mallopt)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
