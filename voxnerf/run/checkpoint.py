"""Checkpoints written atomically: a crash or Ctrl-C mid-write leaves the previous one intact and readable."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import torch

from voxnerf.errors import VoxnerfError
from voxnerf.render.model import STATE_VERSION, Model

CHECKPOINT = "checkpoint.pt"
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# Keys a training checkpoint holds (`Trainer.checkpoint`); its version is its model state's (`Model.state`).
RUN_KEYS = ("config", "scene", "step")
RESUME_KEYS = ("optimizer", "elapsed", "n_rays", "rng")


def save_atomic(obj, path: Path) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path` (atomic on POSIX).

    A full disk (or quota) is a VoxnerfError naming the folder; the previous file at `path` stays as it was.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise VoxnerfError(f"{path.parent}: cannot write a checkpoint here ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if out_of_space(e):
            kept = f"the previous {path.name} is kept" if path.is_file() else f"no {path.name} was written"
            raise VoxnerfError(f"{path.parent}: no space left on the device while writing {path.name} ({kept}; "
                               f"free some space and continue with --resume)") from None
        raise


def out_of_space(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from or during (torch wraps the OSError of a failed write in
    RuntimeErrors), is a full disk or quota."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in NO_SPACE or "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict:
    """Read a checkpoint (a file, or a run folder holding checkpoint.pt) of the version this release writes
    (STATE_VERSION), or raise VoxnerfError naming it."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT
    if not path.is_file():
        raise VoxnerfError(f"{path}: no checkpoint here")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=False)
    except Exception as e:  # pickle/zip errors come in many types
        raise VoxnerfError(f"{path}: unreadable checkpoint ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in RUN_KEYS):
        raise VoxnerfError(f"{path}: not a voxnerf checkpoint")
    model = ckpt.get("model")
    version = model.get("version") if isinstance(model, dict) else ckpt.get("version")  # the first format's: 1
    if version != STATE_VERSION:
        held = "no version" if version is None else f"version {version}"
        raise VoxnerfError(f"{path}: a checkpoint of {held}; this release reads version {STATE_VERSION} only "
                           f"(train the scene again)")
    return ckpt


def checkpoint_model(ckpt: dict, path: Path) -> Model:
    """The model that checkpoint `ckpt` (read from `path` by `load_checkpoint`) holds, on the CPU; a VoxnerfError
    naming `path` where its tensors do not fit this release's field (one trained with an option since removed)."""
    try:
        return Model.from_checkpoint(ckpt)
    except RuntimeError as e:  # load_state_dict: tensors missing, unexpected or of another shape
        detail = " ".join(str(e).split())
        raise VoxnerfError(f"{path}: its tensors do not fit this release's field ({detail[:200]}); train the scene "
                           f"again") from None


def check_resumable(ckpt: dict, path: Path) -> None:
    """VoxnerfError unless `ckpt` (from `load_checkpoint`) holds the training state a resume needs."""
    missing = [k for k in RESUME_KEYS if k not in ckpt]
    if missing:
        raise VoxnerfError(f"{path}: this checkpoint holds no training state to resume ({', '.join(missing)} "
                           f"missing)")
