"""The process-wide settings a training step's speed on a CPU depends on, set once by whoever trains: the CLI's
entry point and every Trainer (a library user's too)."""

from __future__ import annotations

from voxnerf.system.allocator import keep_freed_memory
from voxnerf.system.denormals import flush_denormals


def tune_process() -> None:
    """Keep freed memory for reuse (a step frees and reallocates table-sized tensors: voxnerf.system.allocator) and
    flush subnormal floats to zero (rows no batch reads decay into them, slow on a CPU: voxnerf.system.denormals).
    Your own glibc malloc variables win over the first."""
    keep_freed_memory()
    flush_denormals()
