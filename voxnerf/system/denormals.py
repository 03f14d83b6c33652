"""Flush subnormal floats to zero in CPU arithmetic, so that a table's decayed values do not slow every step.

Adam's first moment of a grid row that no batch reads decays by beta1 (0.9) a step. After several hundred such steps
it is below float32's smallest normal value (1.2e-38), and it never reaches zero: 0.9 times the smallest subnormal
rounds back to it. x86 CPUs compute with subnormal values in a slow path (on an Intel Xeon with 2 threads, a multiply
of 20 M of them took 4x the time of normal ones). A grid has millions of rows and most are read rarely: after a 90 s
run of statueOfLiberty_2 without masks (1.72 M rows), 45% of the features' first moments were subnormal, and Adam's
step took 112 ms of a 186 ms training step instead of 14 ms
(benchmarks/log/2026-11-29-sizes-rates-subnormals.md). Values this small change no
parameter by anything float32 can hold, so they are set to zero instead: the FTZ and DAZ flags, which TensorFlow sets
on its CPU threads by default. CUDA kernels are untouched.
"""

from __future__ import annotations

import torch


def flush_denormals() -> bool:
    """Make this process's CPU arithmetic treat subnormal floats as zero; True where the CPU supports it (x86 with
    SSE3), False elsewhere (then nothing changes)."""
    return torch.set_flush_denormal(True)
