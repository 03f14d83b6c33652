"""A run folder's housekeeping: one writer at a time (a lock), the leftovers of an interrupted write, metric rows
past a resumed checkpoint, a clean start for --overwrite, and whether a scene is the one a run was trained on.

The lock is an advisory `fcntl.flock` on RUN/.voxnerf.lock: the kernel releases it when its holder exits in any way
(a SIGKILL too), so a lock left by a killed process is stale by construction and the next writer takes it over.
The file records its holder ("pid N on HOST") while held and is emptied on a clean release: a file still naming a holder
when the lock is free was left by a killed process. (`filelock` truncates the file on every attempt, which would
erase the holder's name that a refused writer prints.)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Callable

import numpy as np

from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import CHECKPOINT
from voxnerf.system.progress import track

LOCK = ".voxnerf.lock"
METRICS = ("metrics.jsonl", "metrics.csv")
# What a run writes into its folder (--overwrite removes these and nothing else).
RUN_OUTPUTS = (CHECKPOINT, "config.yaml", *METRICS, "profile.json", "tensorboard", "renders")


class RunLocked(VoxnerfError):
    """Another process holds the run folder's lock."""


class RunLock:
    """The run folder's writer lock, held from `__enter__` to `__exit__`.

    Args:
        folder: the run folder (created if needed).
        say: told when a stale lock of a killed process is taken over.
    """

    def __init__(self, folder: Path, say: Callable[[str], None]):
        self.folder, self.say = Path(folder), say
        self.fd: int | None = None

    @property
    def path(self) -> Path:
        return self.folder / LOCK

    def __enter__(self) -> "RunLock":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise VoxnerfError(f"{self.folder}: cannot write the run folder ({e.strerror})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            os.close(self.fd)
            raise RunLocked(f"{self.folder}: another voxnerf process ({holder or 'unknown'}) is writing this run "
                            f"folder; wait for it to end or choose another --out") from None
        stale = self._holder()
        if stale:
            self.say(f"note: took over the lock of {self.folder} left by {stale} (that process is gone)")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return self

    def _holder(self) -> str:
        return os.pread(self.fd, 200, 0).decode(errors="replace").strip()

    def __exit__(self, *exc) -> None:
        os.ftruncate(self.fd, 0)
        os.close(self.fd)
        self.fd = None


def remove_orphans(folder: Path) -> list[Path]:
    """Delete the temporary files of checkpoint writes that a killed process left behind (only the lock holder
    may call this: a live writer's temporary file looks the same); returns what was removed."""
    orphans = sorted(Path(folder).glob(f".{CHECKPOINT}.*.tmp"))
    for path in orphans:
        path.unlink(missing_ok=True)
    return orphans


def trim_metrics(folder: Path, step: int) -> int:
    """Drop the metric rows logged after `step` (a resumed checkpoint's step: training repeats those steps, and
    would log them twice); returns how many rows of metrics.jsonl were dropped."""
    jsonl, csv = (Path(folder) / name for name in METRICS)
    if not jsonl.is_file():
        return 0
    lines = jsonl.read_text().splitlines()
    kept = [line for line in lines if _row_step(line) <= step]
    jsonl.write_text("".join(line + "\n" for line in kept))
    if csv.is_file():
        header, *rows = csv.read_text().splitlines() or [""]
        column = header.split(",").index("step") if "step" in header.split(",") else None
        rows = [r for r in rows if column is None or _csv_step(r, column) <= step]
        csv.write_text("".join(line + "\n" for line in [header, *rows] if line))
    return len(lines) - len(kept)


def _row_step(line: str) -> float:
    """The step of one metrics.jsonl line; a torn line (a killed write) counts as past every step."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


def _csv_step(row: str, column: int) -> float:
    try:
        return float(row.split(",")[column])
    except (ValueError, IndexError):
        return float("inf")


def clear_outputs(folder: Path) -> None:
    """Remove what an earlier run wrote into `folder` (RUN_OUTPUTS and its eval*.json scores), so that nothing
    of it stays beside a new run that is interrupted early."""
    folder = Path(folder)
    for path in [folder / name for name in RUN_OUTPUTS] + sorted(folder.glob("eval*.json")):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def scene_fingerprint(scene) -> str:
    """A short hash of a loaded Scene's cameras and image content (every 7th value of each image), which the
    checkpoint keeps: two toy scenes rendered from the same cameras differ in it, a moved copy does not."""
    digest = hashlib.sha1()
    cameras = scene.cameras
    for array in (cameras.c2w, cameras.intrinsics, cameras.sizes):
        digest.update(np.round(np.asarray(array, np.float64), 6).tobytes())
    for image in track(scene.images or [], "reading photos for the run's fingerprint", "photo"):
        digest.update(np.ascontiguousarray(image.reshape(-1)[::7]).tobytes())
    return digest.hexdigest()[:16]


def mask_fingerprint(scene) -> str | None:
    """A short hash of a loaded Scene's foreground masks (every 7th pixel of each), which the checkpoint keeps beside
    `scene_fingerprint`: a masked capture's box of interest is its masks' visual hull, so masks edited since would
    frame another. None for a scene without masks."""
    if scene.masks is None:
        return None
    digest = hashlib.sha1()
    for mask in track(scene.masks, "reading masks for the run's fingerprint", "mask"):
        digest.update(np.packbits(np.asarray(mask, bool).reshape(-1)[::7]).tobytes())
    return digest.hexdigest()[:16]


def scene_fingerprints(scene) -> dict[str, str | None]:
    """What a checkpoint's scene record keeps of the scene's content: "fingerprint" (`scene_fingerprint`) and
    "mask_fingerprint" (`mask_fingerprint`)."""
    return {"fingerprint": scene_fingerprint(scene), "mask_fingerprint": mask_fingerprint(scene)}


def mask_mismatch(recorded: str | None, scene) -> str | None:
    """Why `scene`'s masks are not those of a checkpoint whose mask fingerprint is `recorded`, or None when they
    are: the mask folder is named."""
    if recorded == mask_fingerprint(scene):
        return None
    mask_paths = scene.extras.get("mask_paths")
    folder = Path(mask_paths[0]).parent if mask_paths else Path(scene.root)
    if recorded is None:
        return f"it has masks ({folder}), the run was trained without masks"
    if scene.masks is None:
        return f"it has no masks ({folder}), the run was trained with masks"
    return f"its masks in {folder} differ from those the run was trained on"


def scene_mismatch(recorded: dict, scene) -> str | None:
    """Why `scene` (a loaded Scene, images included) is not the scene a checkpoint's `recorded` scene dict
    (`SceneRecord.to_dict`, with the fingerprints `Trainer.checkpoint` adds: `scene_fingerprints`) describes, or None
    when it is. A scene folder moved elsewhere still matches, and so does a box of interest that this version frames
    otherwise from the same masks (the masks' visual hull: the run keeps its own); masks are compared where the
    checkpoint recorded them (earlier versions did not), and checkpoints without a fingerprint by format and
    bounds."""
    if scene.format != recorded["format"]:
        return f"it is a {scene.format} scene, the run was trained on a {recorded['format']} scene"
    if "fingerprint" in recorded and recorded["fingerprint"] != scene_fingerprint(scene):
        return "its cameras or images differ from those the run was trained on"
    why = mask_mismatch(recorded["mask_fingerprint"], scene) if "mask_fingerprint" in recorded else None
    if why:
        return why
    bbox = np.asarray(recorded["bbox"], np.float64)  # compared only without a fingerprint: with the same cameras
    #                                                   and photos the run keeps the box it recorded
    if "fingerprint" not in recorded and not np.allclose(np.asarray(scene.bbox), bbox, rtol=1e-4,
                                                         atol=1e-6 * (float(np.abs(bbox).max()) + 1e-9)):
        return "its box of interest differs from the one the run recorded"
    if not np.isclose(scene.near, recorded["near"], rtol=1e-4) or not np.isclose(scene.far, recorded["far"],
                                                                                  rtol=1e-4):
        return "its near/far range differs from the one the run recorded"
    return None
