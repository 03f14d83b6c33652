"""What a run folder and a checkpoint must satisfy before a run trains in it: a fresh run replaces no run unasked, a
resumed one continues a checkpoint of its own scene and field, leftovers of killed writes go."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable

from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import CHECKPOINT, check_resumable, load_checkpoint
from voxnerf.run.config import TrainConfig
from voxnerf.run.folder import clear_outputs, remove_orphans, scene_mismatch, trim_metrics


def check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Resume needs a checkpoint; a fresh run must not silently replace one; resume and overwrite exclude."""
    if resume and overwrite:
        raise VoxnerfError("--resume --overwrite: choose one (--resume continues the run, --overwrite starts over)")
    has_checkpoint = (out / CHECKPOINT).is_file()
    if resume and not has_checkpoint:
        raise VoxnerfError(f"{out}: no {CHECKPOINT} to resume from (train without --resume to start a run)")
    if has_checkpoint and not (resume or overwrite):
        raise VoxnerfError(f"{out}: a run is already here (--resume continues it, --overwrite starts over)")


def start_writing(out: Path, scene: Scene, cfg: TrainConfig, resume: bool, overwrite: bool,
                  say: Callable[[str], None]) -> None:
    """Rank 0, holding the lock, before training: the checkpoint to resume must fit the scene and the
    configuration; leftovers of killed writes go, and so does an earlier run's output (--overwrite) or the metric
    rows past the checkpoint (--resume)."""
    if resume:
        ckpt = load_checkpoint(out / CHECKPOINT)
        check_resumable(ckpt, out / CHECKPOINT)
        check_fits(ckpt, out / CHECKPOINT, "--resume", cfg, scene)
        dropped = trim_metrics(out, ckpt["step"])
        if dropped:
            say(f"note: dropped {dropped} metric rows logged after the checkpoint's step {ckpt['step']}")
    orphans = remove_orphans(out)
    if orphans:
        say(f"note: removed {len(orphans)} temporary file(s) of a checkpoint write that was killed")
    if overwrite and not resume:
        clear_outputs(out)


def check_fits(ckpt: dict, path: Path, option: str, cfg: TrainConfig, scene: Scene | None = None) -> None:
    """VoxnerfError naming `option` when checkpoint `ckpt` holds a field of another shape than `cfg` asks for
    (its field options differ), or was trained on another scene than `scene` (when given)."""
    saved = ckpt["config"].get("field", {})
    wanted = asdict(cfg.field)
    differs = [f"{k} {saved[k]} vs {wanted[k]}" for k in wanted if k in saved and saved[k] != wanted[k]]
    if differs:
        raise VoxnerfError(f"{option} {path}: its field differs from this run's configuration (field "
                           f"{', '.join(differs)}); a checkpoint only continues a field of its own shape")
    why = scene_mismatch(ckpt["scene"], scene) if scene is not None else None
    if why:
        trained_on = ckpt["scene"]["root"]
        what = (f"{scene.root} changed since it was trained" if Path(trained_on) == Path(scene.root)
                else f"it was trained on {trained_on}, not on {scene.root}")
        raise VoxnerfError(f"{option} {path}: {what} ({why})")
