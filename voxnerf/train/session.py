"""A training session as a library: the orchestration of a `voxnerf train`. The configuration (voxnerf.train.presets),
the image size (voxnerf.train.downscale) and the run folder's checks (voxnerf.train.folder_checks) come together
here; the run trains and is scored (voxnerf.train.outcome).

The `voxnerf train` command (voxnerf.cli.train) is a thin layer over these functions; scripts and benchmarks
call `train_run` directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Callable, Sequence

import torch

from voxnerf.data import load_scene
from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import load_checkpoint
from voxnerf.run.config import TrainConfig
from voxnerf.run.folder import RunLock
from voxnerf.system.device import resolve_device
from voxnerf.train.distributed import world_from_env
from voxnerf.train.downscale import recorded_downscale, size_line, training_downscale
from voxnerf.train.folder_checks import check_fits, check_out, start_writing
from voxnerf.train.outcome import TrainOutcome, score
from voxnerf.train.presets import build_config, default_config, preset_path, silent
from voxnerf.train.trainer import Trainer


def parse_times(text: str | None) -> tuple[float, ...]:
    """'60,120' -> (60.0, 120.0); a bad list is a VoxnerfError naming --eval-at."""
    if not text:
        return ()
    try:
        return tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise VoxnerfError(f"--eval-at {text}: expected seconds separated by commas, e.g. 60,120,300") from None


def profile_steps(trainer: Trainer, path: Path, steps: int = 10, warmup: int = 3) -> str:
    """Run `warmup` steps, then `steps` under torch.profiler; write a Chrome trace to `path`.

    The steps advance the trainer's schedule but no checkpoint is written: profiling a resumed run leaves it as it was.

    Returns:
        The profiler's table of the most expensive operators.
    """
    from torch.profiler import ProfilerActivity, profile

    def advance(n: int) -> None:
        for _ in range(n):
            trainer.train_step()
            trainer.step += 1

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if trainer.device.type == "cuda" else [])
    advance(warmup)
    with profile(activities=activities, record_shapes=True) as prof:
        advance(steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    sort = "self_cuda_time_total" if trainer.device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=15)


def prepare(scene_dir: Path, config: Path | None, out: Path, resume: bool, sets: list[str],
            max_steps: int | None = None, max_time: float | None = None, threads: int | None = None,
            device: torch.device = torch.device("cpu"), downscale: int | None = None, format: str | None = None,
            say: Callable[[str], None] = silent) -> tuple[Scene, TrainConfig]:
    """The scene (from its absolute path, so the run records where it lives; read as `format`) and the run's
    configuration (the preset picked for the scene and the device is told to `say`).

    The images come `downscale` times smaller; by default at the size the configuration can use
    (`training_downscale`; a resumed run keeps its own), which is told to `say` when it is not the photos' own."""
    root = Path(scene_dir).resolve()
    scene = load_scene(root, downscale=downscale or 1, format=format)
    if not len(scene.split_indices("test")):
        raise VoxnerfError(f"{scene.root}: no test or val views (training ends by scoring them)")
    path, overlays = (preset_path(config), []) if config else default_config(scene, out, resume, device, say)
    cfg = build_config(path, list(sets), max_steps, max_time, threads, overlays, saved=path == out / "config.yaml")
    if downscale is None:
        chosen = recorded_downscale(out) if resume else training_downscale(scene.cameras.sizes, cfg)
        if chosen > 1:
            smaller = load_scene(root, downscale=chosen, format=format)
            say(size_line(scene.cameras.sizes, smaller.cameras.sizes, chosen, cfg, resume))
            scene = smaller
    return scene, cfg


def train_run(scene_dir: Path, config: Path | None, out: Path, *, device: str = "auto", resume: bool = False,
              overwrite: bool = False, init: Path | None = None, sets: list[str] = (), max_steps: int | None = None,
              max_time: float | None = None, threads: int | None = None, eval_at: tuple[float, ...] = (),
              quiet: bool = False, downscale: int | None = None, format: str | None = None,
              say: Callable[[str], None] = silent,
              on_step: Sequence[Callable[[Trainer, dict], None]] = ()) -> TrainOutcome:
    """Load the scene, train, checkpoint, and score the test split into OUT/eval.json (skipped after Ctrl-C).

    Under torchrun (or `voxnerf.train.launch.launch_local`) every rank calls this; they train together and rank 0
    holds the run folder's lock, writes and scores. SIGINT and SIGTERM stop training between two steps and save.
    The preset picked for the scene (without `config`) and notes on the run folder are told to `say`; `on_step`
    hooks run after every step (see `Trainer`).
    """
    out = Path(out)
    main = int(os.environ.get("RANK", "0")) == 0
    check_out(out, resume, overwrite)
    torch_device = resolve_device(device)
    scene, cfg = prepare(scene_dir, config, out, resume, list(sets), max_steps, max_time, threads, torch_device,
                         downscale, format, say)
    if init is not None:
        check_fits(load_checkpoint(init), Path(init), "--init", cfg)
    with RunLock(out, say) if main else contextlib.nullcontext():
        if main:
            check_out(out, resume, overwrite)  # again: another writer may have finished in the meantime
            start_writing(out, scene, cfg, resume, overwrite, say)
        with world_from_env(torch_device) as world:
            trainer = Trainer(scene, cfg, out, world.device, resume=resume, init=init, eval_at=eval_at, quiet=quiet,
                              world=world, on_step=on_step)
            world.copy_from_main(trainer.model)
            with trainer.stop:
                done = trainer.train()
            if not done["interrupted"]:
                world.check_identical(trainer.model, "the end of training")
        outcome = TrainOutcome(out, done["step"], done["elapsed"], done["interrupted"], done["snapshots"],
                               main=world.is_main, stopped_by=trainer.stop.signum or signal.SIGINT)
        if not outcome.interrupted and outcome.main:
            score(trainer, outcome)
    return outcome


def worker_threads(threads: int | None, nproc: int) -> int:
    """Threads of each of `nproc` local workers: `threads` (default: torch's count on this machine) split evenly."""
    if nproc < 1:
        raise VoxnerfError(f"--nproc {nproc}: expected 1 or more worker processes")
    if "WORLD_SIZE" in os.environ:
        raise VoxnerfError("--nproc: already running under torchrun (let torchrun start the workers)")
    return max(1, (threads or torch.get_num_threads()) // nproc)
