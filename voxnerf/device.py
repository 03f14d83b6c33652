"""Where a field runs: the torch device a command asks for, and the autocast dtype its precision setting gives."""

from __future__ import annotations

import torch

from voxnerf.errors import VoxnerfError


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when available; asking for CUDA without it is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise VoxnerfError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    return torch.device(name)


def amp_dtype_for(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the color MLP: fp16 on CUDA, bf16 on CPU (fp16 has no fast CPU path), or none."""
    if precision == "auto":
        return torch.float16 if device.type == "cuda" else torch.bfloat16
    choices = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in choices:
        raise VoxnerfError(f"precision '{precision}': expected auto, bf16, fp16 or fp32")
    return choices[precision]
