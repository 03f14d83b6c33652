"""The machine a benchmark ran on, to name beside its figures."""

from __future__ import annotations

import os
import platform

from voxnerf.system.device import cpu_info


def cpu_name() -> str:
    """The CPU model, its family and model numbers (a virtual machine may name only the vendor's line: "AMD EPYC")
    and the cores this process may use."""
    model = cpu_info("model name") or platform.processor() or "unknown CPU"
    family, number = cpu_info("cpu family"), cpu_info("model")
    kind = f" (family {family}, model {number})" if family and number else ""
    return f"{model}{kind}, {len(os.sched_getaffinity(0))} cores"
