"""`voxnerf train SCENE`: train a field, checkpoint it, score it on the test split, print where everything went."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import os

import torch
import typer

from voxnerf.checkpoint import CHECKPOINT
from voxnerf.config import TrainConfig, load_config, parse_override
from voxnerf.data import load_scene
from voxnerf.distributed import dump_rank_state, launch_local, world_from_env
from voxnerf.errors import VoxnerfError
from voxnerf.layout import detect_layout
from voxnerf.scene import Scene
from voxnerf.trainer import Trainer, resolve_device
from voxnerf_cli.evaluate import mean_line, score, write_scores

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
INTERRUPTED = 130  # exit status after Ctrl-C, as a shell reports SIGINT


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

    @property
    def checkpoint(self) -> Path:
        return self.out / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.csv"


def preset_path(name_or_path: str | Path) -> Path:
    """A preset name ('blender') -> configs/blender.yaml; anything else is taken as a path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith((".yaml", ".yml")):
        return CONFIGS / f"{text}.yaml"
    return Path(text)


def default_config(scene: Scene, out: Path, resume: bool) -> Path:
    """The run's own config.yaml when resuming; else the preset for the scene's layout (see `preset_for`)."""
    if resume and (out / "config.yaml").is_file():
        return out / "config.yaml"
    name, why = preset_for(scene)
    typer.echo(f"preset      configs/{name}.yaml ({why}; --config to choose another)")
    return preset_path(name)


def preset_for(scene: Scene) -> tuple[str, str]:
    """The preset name for a scene and the reason, from its detected layout (voxnerf.layout)."""
    layout = detect_layout(scene)
    if layout == "forward":
        return "llff", "forward-facing cameras"
    if layout == "unbounded":
        return "360", "cameras around an unbounded scene"
    if scene.masks is not None and scene.background is None:
        return "object-masked", "object capture with masks"
    return "blender", "object capture with a transparent background"


def parse_times(text: str | None) -> tuple[float, ...]:
    """'60,120' -> (60.0, 120.0); a bad list is a VoxnerfError naming --eval-at."""
    if not text:
        return ()
    try:
        return tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise VoxnerfError(f"--eval-at {text}: expected seconds separated by commas, e.g. 60,120,300") from None


def check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Resume needs a checkpoint; a fresh run must not silently replace one."""
    has_checkpoint = (out / CHECKPOINT).is_file()
    if resume and not has_checkpoint:
        raise VoxnerfError(f"{out}: no {CHECKPOINT} to resume from (train without --resume to start a run)")
    if has_checkpoint and not (resume or overwrite):
        raise VoxnerfError(f"{out}: a run is already here (--resume continues it, --overwrite starts over)")


def parse_set(text: str) -> dict:
    """One --set KEY=VALUE as an override dict, checked on its own so that a bad key is blamed on the option."""
    override = parse_override(text)
    try:
        load_config(None, [override])
    except VoxnerfError as e:
        raise VoxnerfError(f"--set {text}: {e}") from None
    return override


def build_config(path: Path, sets: list[str], max_steps: int | None, max_time: float | None,
                 threads: int | None) -> TrainConfig:
    """Preset, then --set overrides, then the explicit flags (later wins)."""
    overrides = [parse_set(s) for s in sets]
    flags = {"max_steps": max_steps, "max_time": max_time, "threads": threads}
    overrides.append({k: v for k, v in flags.items() if v is not None})
    cfg = load_config(path, overrides)
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
            max_steps: int | None = None, max_time: float | None = None,
            threads: int | None = None) -> tuple[Scene, TrainConfig]:
    """The scene (from its absolute path, so the run records where it lives) and the run's configuration."""
    scene = load_scene(Path(scene_dir).resolve())
    path = preset_path(config) if config else default_config(scene, out, resume)
    cfg = build_config(path, list(sets), max_steps, max_time, threads)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return scene, cfg


def train_run(scene_dir: Path, config: Path | None, out: Path, *, device: str = "auto", resume: bool = False,
              overwrite: bool = False, init: Path | None = None, sets: list[str] = (), max_steps: int | None = None,
              max_time: float | None = None, threads: int | None = None, eval_at: tuple[float, ...] = (),
              quiet: bool = False) -> TrainOutcome:
    """Load the scene, train, checkpoint, and score the test split into OUT/eval.json (skipped after Ctrl-C).

    Under torchrun (or `launch_local`) every rank calls this; they train together and rank 0 writes and scores.
    """
    out = Path(out)
    check_out(out, resume, overwrite)
    scene, cfg = prepare(scene_dir, config, out, resume, list(sets), max_steps, max_time, threads)
    with world_from_env(resolve_device(device)) as world:
        trainer = Trainer(scene, cfg, out, world.device, resume=resume, init=init, eval_at=eval_at, quiet=quiet,
                          world=world)
        world.copy_from_main(trainer.model)
        done = trainer.train()
        if not done["interrupted"]:
            world.check_identical(trainer.model, "the end of training")
            dump_rank_state(trainer.model, world)
    outcome = TrainOutcome(out, done["step"], done["elapsed"], done["interrupted"], done["snapshots"],
                           main=world.is_main)
    if not outcome.interrupted and outcome.main:
        outcome.scores = score(trainer.model, scene, cfg, world.device, "test", cfg.eval_every_view)
        outcome.scores_file = write_scores(outcome.scores, out)
    return outcome


def print_outcome(outcome: TrainOutcome) -> None:
    """The run's files and the test scores, one line each."""
    typer.echo(f"trained     {outcome.steps} steps in {outcome.seconds:.1f} s")
    for snap in outcome.snapshots:
        typer.echo(f"  at {snap['time']:>6.0f} s  step {snap['step']:<6} test PSNR {snap['psnr']:.2f} dB")
    typer.echo(f"run         {outcome.out}")
    typer.echo(f"checkpoint  {outcome.checkpoint}")
    typer.echo(f"metrics     {outcome.metrics}")
    typer.echo(f"eval        {outcome.scores_file}")
    typer.echo(mean_line(outcome.scores))


def train(
    scene: Path = typer.Argument(..., help="Scene folder (any supported format, see `voxnerf info`)."),
    config: Path = typer.Option(None, help="YAML preset or its name (blender, object-masked, llff, 360, "
                                           "fast-cpu). Default: picked from the scene's layout (see `voxnerf "
                                           "info`); the run's own config.yaml with --resume."),
    out: Path = typer.Option(None, help="Run folder. Default: runs/<scene folder name>."),
    max_steps: int = typer.Option(None, help="Stop after this many steps (overrides the config)."),
    max_time: float = typer.Option(None, help="Stop after this many seconds of training (overrides the config)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint."),
    overwrite: bool = typer.Option(False, help="Start over in an --out that already holds a run."),
    init: Path = typer.Option(None, help="Checkpoint (or run folder) whose field starts this run (fine-tuning)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field, e.g. --set optim.lr_grid=0.05."),
    eval_at: str = typer.Option(None, help="Training seconds at which to score the test views, e.g. 60,120."),
    threads: int = typer.Option(None, help="torch CPU threads (default: torch's choice); with --nproc, in all."),
    nproc: int = typer.Option(1, help="Train with this many local worker processes (threads split among them); "
                                      "for several machines use torchrun (see the README)."),
    profile: bool = typer.Option(False, help="Profile 10 steps into OUT/profile.json (Chrome trace) and stop "
                                             "without saving; with --resume, steps of that run."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Train a sparse-voxel field on SCENE; checkpoints, metrics and test scores go to the run folder."""
    out = out or Path("runs") / scene.resolve().name
    if profile:
        return _profile(scene, config, out, device, resume, set_, threads, quiet)
    options = dict(device=device, resume=resume, overwrite=overwrite, init=init, sets=set_, max_steps=max_steps,
                   max_time=max_time, threads=threads, eval_at=parse_times(eval_at), quiet=quiet)
    if nproc != 1:
        options["threads"] = worker_threads(threads, nproc)
        check_out(out, resume, overwrite)
        code = launch_local(nproc, train_and_report, scene, config, out, options)
    else:
        code = train_and_report(scene, config, out, options)
    if code:
        raise typer.Exit(code)


def worker_threads(threads: int | None, nproc: int) -> int:
    """Threads of each of `nproc` local workers: `threads` (default: torch's count on this machine) split evenly."""
    if nproc < 1:
        raise VoxnerfError(f"--nproc {nproc}: expected 1 or more worker processes")
    if "WORLD_SIZE" in os.environ:
        raise VoxnerfError("--nproc: already running under torchrun (let torchrun start the workers)")
    return max(1, (threads or torch.get_num_threads()) // nproc)


def train_and_report(scene: Path, config: Path | None, out: Path, options: dict) -> int:
    """`train_run`, then rank 0 prints the outcome; returns the exit status (INTERRUPTED after Ctrl-C)."""
    outcome = train_run(scene, config, out, **options)
    if not outcome.main:
        return 0
    if outcome.interrupted:
        typer.echo(f"interrupted; checkpoint saved to {outcome.checkpoint} (continue with --resume)", err=True)
        return INTERRUPTED
    print_outcome(outcome)
    return 0


def _profile(scene_dir: Path, config: Path | None, out: Path, device: str, resume: bool, sets: list[str],
             threads: int | None, quiet: bool) -> None:
    """`train --profile`: a profiler trace of a few steps (of a resumed run with --resume); writes no checkpoint."""
    if resume:
        check_out(out, resume=True, overwrite=False)
    scene, cfg = prepare(scene_dir, config, out, resume, sets, threads=threads)
    trainer = Trainer(scene, cfg, out, resolve_device(device), resume=resume, quiet=True)
    table = profile_steps(trainer, out / "profile.json")
    if not quiet:
        typer.echo(table)
    typer.echo(f"profile     {out / 'profile.json'} (open in chrome://tracing or https://ui.perfetto.dev)")
