"""Freed memory stays in the process (voxnerf.allocator): a training step's large tensors do not fault pages in again."""

import platform
import subprocess
import sys

import pytest

FAULTS = """
import resource, torch
from voxnerf.allocator import keep_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.ones(25_000_000)  # 100 MB, freed at once, like a step's gradient of a large grid table
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()
plain = faults()
kept = keep_freed_memory()
for _ in range(3):
    faults()  # the heap grows to hold them
print(plain, kept, faults())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_large_tensors_freed_and_allocated_again_no_longer_fault_pages_in():
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True).stdout.split()
    plain, kept, after = int(out[0]), out[1] == "True", int(out[2])
    assert plain > 5 * 20_000  # glibc maps and unmaps each 100 MB block: ~24k pages faulted in per allocation
    assert kept
    assert after < plain / 20
