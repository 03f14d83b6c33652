"""A training session as a library: pick and build the configuration, check the run folder, train, score.

The `voxnerf train` command (voxnerf.cli.train) is a thin layer over these functions; scripts and benchmarks
call `train_run` directly.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

import torch

from voxnerf import configs as presets
from voxnerf.data import load_scene
from voxnerf.data.layout import detect_layout
from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import CHECKPOINT, check_resumable, load_checkpoint
from voxnerf.run.config import TrainConfig, check_override, load_config, parse_override, read_preset
from voxnerf.run.folder import RunLock, clear_outputs, remove_orphans, scene_mismatch, trim_metrics
from voxnerf.run.scores import scores_path, write_scores
from voxnerf.system.device import cpu_has_fast_bf16, resolve_device
from voxnerf.train.distributed import world_from_env
from voxnerf.train.trainer import Trainer

CONFIGS = Path(str(resources.files(presets)))  # the presets ship inside the package (configs/ in the repo)


def silent(message: str) -> None:
    """The default `say`: notes are dropped."""


@dataclass
class TrainOutcome:
    """What `train_run` produced: the run folder, its files, and the test scores (None when interrupted)."""

    out: Path
    steps: int
    seconds: float
    interrupted: bool
    snapshots: list[dict]
    scores: dict | None = None
    scores_file: Path | None = None
    main: bool = True  # rank 0 (or a single process): the rank that wrote the files and scored the run
    stopped_by: int = signal.SIGINT  # the signal that interrupted the run (when `interrupted`)
    unscored: bool = False  # trained to the end, but the final scoring was interrupted (Ctrl-C)

    @property
    def checkpoint(self) -> Path:
        return self.out / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.csv"


def preset_path(name_or_path: str | Path) -> Path:
    """A shipped preset as `train` names it ('blender', 'blender.yaml' or 'configs/blender.yaml', when no such file
    is here) -> the installed file; anything else is taken as a path."""
    path = Path(name_or_path)
    shipped = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if path.parent in (Path("."), Path("configs")) and not path.is_file() and shipped.is_file():
        return shipped
    return path


CPU_OVERLAY = "cpu"  # configs/cpu.yaml: the CPU sizing applied over a layout's preset
FP32_OVERLAY = "cpu-fp32"  # configs/cpu-fp32.yaml: over configs/cpu.yaml where the CPU has no native bf16 (fp32 steps)
FP32_PRESETS = ("llff", "blender")  # the presets whose every-capture rows it raised by the rule (RESULTS.md)


def default_config(scene: Scene, out: Path, resume: bool, device: torch.device,
                   say: Callable[[str], None] = silent) -> tuple[Path, list[Path]]:
    """The run's own config.yaml when resuming; else the preset for the scene's layout and the device (see
    `preset_for`), which is told to `say`. Returns the preset and the overlays applied over it, in order."""
    if resume and (out / "config.yaml").is_file():
        return out / "config.yaml", []
    name, overlays, why = preset_for(scene, device)
    shown = " + ".join(f"configs/{n}.yaml" for n in (name, *overlays))
    say(f"preset      {shown} ({why}; --config to choose another)")
    return preset_path(name), [preset_path(o) for o in overlays]


def preset_for(scene: Scene, device: torch.device = torch.device("cpu")) -> tuple[str, list[str], str]:
    """The preset for a scene's detected layout (voxnerf.data.layout), the overlays for the device (configs/cpu.yaml on a
    CPU: the layout presets are sized for a GPU; then configs/cpu-fp32.yaml for FP32_PRESETS where the CPU has no
    native bf16, so `precision: auto` trains in fp32), and the reason."""
    layout = detect_layout(scene)
    if layout == "forward":
        name, why = "llff", "forward-facing cameras"
    elif layout == "unbounded":
        name, why = "360", "cameras around an unbounded scene"
    elif scene.has_masks and scene.background is None:
        name, why = "object-masked", "object capture with masks"
    else:
        name, why = "blender", "object capture with a transparent background"
    if device.type != "cpu":
        return name, [], f"{why}; on {device.type.upper()}: 262k samples per step, grid up to 256^3"
    why = f"{why}; on a CPU: smaller batches, grid up to 128^3, a 300 s budget"
    if cpu_has_fast_bf16() or name not in FP32_PRESETS:
        return name, [CPU_OVERLAY], why
    return name, [CPU_OVERLAY, FP32_OVERLAY], f"{why}; no native bf16 (fp32 steps): a narrower color MLP"


def parse_times(text: str | None) -> tuple[float, ...]:
    """'60,120' -> (60.0, 120.0); a bad list is a VoxnerfError naming --eval-at."""
    if not text:
        return ()
    try:
        return tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise VoxnerfError(f"--eval-at {text}: expected seconds separated by commas, e.g. 60,120,300") from None


def check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Resume needs a checkpoint; a fresh run must not silently replace one; resume and overwrite exclude."""
    if resume and overwrite:
        raise VoxnerfError("--resume --overwrite: choose one (--resume continues the run, --overwrite starts over)")
    has_checkpoint = (out / CHECKPOINT).is_file()
    if resume and not has_checkpoint:
        raise VoxnerfError(f"{out}: no {CHECKPOINT} to resume from (train without --resume to start a run)")
    if has_checkpoint and not (resume or overwrite):
        raise VoxnerfError(f"{out}: a run is already here (--resume continues it, --overwrite starts over)")


def checked_override(override: dict, option: str) -> dict:
    """`override` if it is valid on its own (`check_override`), else VoxnerfError blaming `option`."""
    try:
        check_override(override, "config")
    except VoxnerfError as e:
        raise VoxnerfError(f"{option}: {e}") from None
    return override


def build_config(path: Path, sets: list[str], max_steps: int | None, max_time: float | None,
                 threads: int | None, overlays: list[Path] = (), saved: bool = False) -> TrainConfig:
    """Preset (`saved`: a run's own config.yaml, see `load_config`), then its overlays (presets too), then --set
    overrides, then the explicit flags (later wins); a bad value is blamed on its option."""
    overrides = [read_preset(p) for p in overlays]
    overrides += [checked_override(parse_override(s), f"--set {s}") for s in sets]
    flags = {"max_steps": (max_steps, "--max-steps"), "max_time": (max_time, "--max-time"),
             "threads": (threads, "--threads")}
    overrides += [checked_override({k: v}, f"{flag} {v}") for k, (v, flag) in flags.items() if v is not None]
    cfg = load_config(path, overrides, saved)
    if not cfg.max_steps and not cfg.max_time:
        raise VoxnerfError("max_steps and max_time are both 0: training would never stop (set one of them)")
    return cfg


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


def training_downscale(sizes, cfg: TrainConfig) -> int:
    """The smallest whole downscale at which the largest of the images, (N, 2) width, height `sizes`, holds at
    most (cfg.pixels_per_cell x the finest level's resolution)^2 pixels: a subject filling the frame then gets
    about that many pixels per finest cell across; larger photos only add decoding, memory and scoring time."""
    budget = (cfg.pixels_per_cell * finest_resolution(cfg)) ** 2
    width, height = largest_size(sizes)
    return max(1, math.ceil(math.sqrt(width * height / budget) - 1e-9))


def finest_resolution(cfg: TrainConfig) -> int:
    """The finest level's grid resolution (levels never coarsen: `check_levels`)."""
    return cfg.levels[-1].resolution


def largest_size(sizes) -> tuple[int, int]:
    """(width, height) of the largest by pixels of (N, 2) image `sizes`."""
    return max(((int(w), int(h)) for w, h in sizes), key=lambda size: size[0] * size[1])


def recorded_downscale(out: Path) -> int:
    """The image downscale the run in `out` was trained at (its checkpoint's scene record)."""
    return int(load_checkpoint(out / CHECKPOINT)["scene"].get("downscale", 1))


def size_line(full, used, downscale: int, cfg: TrainConfig, resume: bool) -> str:
    """'images      4000x4000 -> 500x500 (1/8: ...; --downscale 1 keeps 4000x4000)' for (N, 2) `full` and
    `used` image sizes."""
    (fw, fh), (uw, uh) = largest_size(full), largest_size(used)
    why = ("the run's own size" if resume else
           f"the finest grid, {finest_resolution(cfg)}^3, uses up to "
           f"{cfg.pixels_per_cell:g} pixels per cell")
    return f"images      {fw}x{fh} -> {uw}x{uh} (1/{downscale}: {why}; --downscale 1 keeps {fw}x{fh})"


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
        raise VoxnerfError(f"{option} {path}: it was trained on {ckpt['scene']['root']}, not on {scene.root} ({why})")


def score(trainer: Trainer, outcome: TrainOutcome) -> None:
    """The test scores of a finished run into `outcome` and OUT/eval.json; Ctrl-C leaves it `unscored`."""
    try:
        outcome.scores = trainer.evaluate(every=trainer.cfg.eval_every_view, write=False, progress=not trainer.quiet)
    except KeyboardInterrupt:
        outcome.interrupted = outcome.unscored = True
        return
    outcome.scores_file = save_scores(outcome.scores, outcome.out)


def save_scores(result: dict, folder: Path) -> Path:
    """`write_scores`, with an unwritable file reported as a VoxnerfError naming it."""
    try:
        return write_scores(result, folder)
    except OSError as e:
        raise VoxnerfError(f"{scores_path(folder, result['split'])}: cannot write the scores ({e.strerror})") \
            from None


def worker_threads(threads: int | None, nproc: int) -> int:
    """Threads of each of `nproc` local workers: `threads` (default: torch's count on this machine) split evenly."""
    if nproc < 1:
        raise VoxnerfError(f"--nproc {nproc}: expected 1 or more worker processes")
    if "WORLD_SIZE" in os.environ:
        raise VoxnerfError("--nproc: already running under torchrun (let torchrun start the workers)")
    return max(1, (threads or torch.get_num_threads()) // nproc)
