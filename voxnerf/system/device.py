"""Where a field runs: the torch device a command asks for, and the autocast dtype its precision setting gives."""

from __future__ import annotations

import functools
import re

import torch

from voxnerf.errors import VoxnerfError


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when available; asking for CUDA without it is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise VoxnerfError(f"--device {name}: expected auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise VoxnerfError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    return torch.device(name)


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names of the instructions that multiply bf16


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX): by the flags the OS lists for it
    (`cpu_flags`), or where it lists none, by oneDNN's report. Elsewhere oneDNN emulates bf16: autocast made
    lego_100 training ~20x slower than fp32 on an AVX2-only CPU (most laptops, AMD before Zen 4), and 0.65x the
    steps on an AVX512 Xeon without AVX512-BF16, where oneDNN still reports bf16 as supported
    (benchmarks/log/2026-12-02-precision-and-tables.md)."""
    flags = cpu_flags()
    if flags:
        return any(flag in flags for flag in NATIVE_BF16_FLAGS)
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without the query: keep the measured default
        return True


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set flags of the first CPU in `cpuinfo` (Linux), or none where there is no such file."""
    return frozenset(cpu_info("flags", cpuinfo).split())


def cpu_info(field: str, cpuinfo: str = "/proc/cpuinfo") -> str:
    """The value of the first CPU's line `field` in `cpuinfo` ("flags", "model name", "cpu family", ...; Linux), or
    "" where there is no such file or line."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return ""


def amp_dtype_for(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the color MLP: fp16 on CUDA; on a CPU bf16 where it is native (fp16 has no fast CPU
    path), else none (fp32); or what `precision` names."""
    if precision == "auto":
        if device.type == "cuda":
            return torch.float16
        return torch.bfloat16 if cpu_has_fast_bf16() else None
    choices = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in choices:
        raise VoxnerfError(f"precision '{precision}': expected auto, bf16, fp16 or fp32")
    return choices[precision]
