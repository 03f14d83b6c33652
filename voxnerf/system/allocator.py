"""Keep freed memory in the process on glibc systems, so that a training step does not fault fresh pages in.

A training step allocates and frees tensors as large as the grid's tables (gradients, Adam's scratch, lookups of the
occupancy update). glibc serves every allocation above its mmap threshold (at most 32 MB) with a fresh `mmap` and
returns it with `munmap` when freed, so the next step page-faults the same memory in again: on ethiopianHead_8
(1.25M grid rows) a third of the training process's time went to the kernel. `keep_freed_memory` makes glibc serve
blocks up to 32 MB (glibc's largest mmap threshold) from its heap and not trim it, as the MALLOC_MMAP_THRESHOLD_
and MALLOC_TRIM_THRESHOLD_ environment variables would (a user's own settings of those variables win). Larger blocks
still come and go with mmap: serving them from the heap too was no faster and left ~0.2 GB more resident.
`release_freed_memory` hands the kept memory back (before scoring, whose allocations differ from a step's).
Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
LARGEST_HEAP_BLOCK = 32 << 20  # glibc's upper limit for the mmap threshold on 64-bit systems
NEVER_TRIM = 2**31 - 1  # the largest threshold mallopt takes (an int): free heap top beyond 2 GB is trimmed


def _glibc_function(name: str):
    """The C library's function `name`, or None where the library lacks it (not glibc: macOS, musl)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks of up to 32 MB for reuse (heap, no trimming); True when it did."""
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_")):
        return False
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, LARGEST_HEAP_BLOCK)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))


def release_freed_memory() -> None:
    """Hand the freed memory glibc keeps back to the kernel (malloc_trim); nothing elsewhere."""
    trim = _glibc_function("malloc_trim")
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
