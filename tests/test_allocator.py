"""Freed memory stays in the process (voxnerf.system.allocator): a training step's large tensors do not fault pages in
again."""

import os
import platform
import subprocess
import sys

import pytest

FAULTS = """
import resource, torch
from voxnerf.system.allocator import keep_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step = [torch.ones(6_000_000) for _ in range(3)]  # 3 x 24 MB alive at once, like a step's table-sized
        del step  # tensors, then freed
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

kept = keep_freed_memory()
for _ in range(3):
    faults()  # the heap grows to hold them
print(kept, faults())
"""
PAGES = 5 * 3 * 6_000_000 * 4 // 4096  # what the loop touches: ~88k pages


def faults_after_warm_up(env: dict) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_large_tensors_freed_and_allocated_again_no_longer_fault_pages_in():
    kept, faults = faults_after_warm_up({})
    assert kept and faults < PAGES / 50
    # glibc's own fixed thresholds (128 kB): every block is mapped, unmapped and faulted in again
    kept, faults = faults_after_warm_up({"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"})
    assert not kept and faults > PAGES * 0.9
