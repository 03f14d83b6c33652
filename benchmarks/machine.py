"""The machine a benchmark ran on, to name beside its figures.

It reads /proc/cpuinfo itself rather than through voxnerf.system.device.cpu_info: a benchmark's arms also run an
earlier revision of voxnerf (`--before`), which may lack that function."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_field(name: str) -> str:
    """The first CPU's line `name` of /proc/cpuinfo ("model name", "cpu family", ...), or "" where there is none."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    return next((value.strip() for key, _, value in (line.partition(":") for line in lines) if key.strip() == name),
                "")


def cpu_name() -> str:
    """The CPU model, its family and model numbers (a virtual machine may name only the vendor's line: "AMD EPYC")
    and the cores this process may use."""
    model = cpu_field("model name") or platform.processor() or "unknown CPU"
    family, number = cpu_field("cpu family"), cpu_field("model")
    kind = f" (family {family}, model {number})" if family and number else ""
    return f"{model}{kind}, {len(os.sched_getaffinity(0))} cores"
