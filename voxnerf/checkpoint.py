"""Checkpoints written atomically: a crash or Ctrl-C mid-write leaves the previous one intact and readable."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from voxnerf.errors import VoxnerfError

CHECKPOINT = "checkpoint.pt"


def save_atomic(obj, path: Path) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path` (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict:
    """Read a checkpoint (a file, or a run folder holding checkpoint.pt) or raise VoxnerfError naming it."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT
    if not path.is_file():
        raise VoxnerfError(f"{path}: no checkpoint here")
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except Exception as e:  # pickle/zip errors come in many types
        raise VoxnerfError(f"{path}: unreadable checkpoint ({type(e).__name__})") from None
