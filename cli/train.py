"""`voxnerf train SCENE`: train a field, checkpoint it, score it on the test split, print where everything went."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.cli.evaluate import mean_line
from voxnerf.cli.options import threads_option
from voxnerf.errors import VoxnerfError
from voxnerf.system.device import resolve_device
from voxnerf.train.interrupt import exit_status
from voxnerf.train.launch import launch_local
from voxnerf.train.folder_checks import check_out
from voxnerf.train.outcome import TrainOutcome
from voxnerf.train.session import parse_times, prepare, profile_steps, train_run, worker_threads
from voxnerf.train.trainer import Trainer


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
                                           "cpu). Default: picked from the scene's layout (see `voxnerf info`), "
                                           "with configs/cpu.yaml over it on a CPU (and configs/cpu-fp32.yaml "
                                           "for forward-facing and transparent-background scenes where the CPU has "
                                           "no native bf16); the run's own config.yaml with --resume."),
    out: Path = typer.Option(None, help="Run folder. Default: runs/<scene folder name>."),
    max_steps: int = typer.Option(None, help="Stop after this many steps (overrides the config)."),
    max_time: float = typer.Option(None, help="Stop after this many seconds of training (overrides the config)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint."),
    overwrite: bool = typer.Option(False, help="Start over in an --out that already holds a run."),
    init: Path = typer.Option(None, help="Checkpoint (or run folder) whose field starts this run (fine-tuning)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field, e.g. --set optim.lr_grid=0.05."),
    eval_at: str = typer.Option(None, help="Training seconds at which to score the test views, e.g. 60,120."),
    threads: int = threads_option("; with --nproc, in all (default: torch's)"),
    nproc: int = typer.Option(1, help="Train with this many local worker processes (threads split among them); "
                                      "for several machines use torchrun (docs/multi-gpu.md)."),
    profile: bool = typer.Option(False, help="Profile 10 steps into OUT/profile.json (Chrome trace) and stop "
                                             "without saving; with --resume, steps of that run."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    downscale: int = typer.Option(None, min=1, help="Train on images this many times smaller: the format's copies "
                                                    "(images_N/) where present, else resized on load. Default: "
                                                    "photos larger than the finest grid can use are downscaled to "
                                                    "it (said in an `images` line; a resumed run keeps its size); "
                                                    "1 keeps the photos' size."),
    format: str = typer.Option(None, "--format", help="Read SCENE as this format (default: detected; see "
                                                      "`voxnerf info`)."),
    viewer: bool = typer.Option(False, "--viewer", help="Serve a web viewer of the training (its URL is printed); "
                                                        "it stays up after training until Ctrl-C."),
    viewer_port: int = typer.Option(8080, help="The --viewer's port (the next free one when taken)."),
) -> None:
    """Train a sparse-voxel field on SCENE; checkpoints, metrics and test scores go to the run folder."""
    out = out or Path("runs") / scene.resolve().name
    if profile:
        return _profile(scene, config, out, device, resume, set_, threads, quiet)
    live = None
    if viewer:
        from voxnerf.view.viewer import TrainingViewer  # viser loads only for --viewer

        live = TrainingViewer(port=viewer_port, say=typer.echo)
    options = dict(device=device, resume=resume, overwrite=overwrite, init=init, sets=set_, max_steps=max_steps,
                   max_time=max_time, threads=threads, eval_at=parse_times(eval_at), quiet=quiet,
                   downscale=downscale, format=format, on_step=[live] if live else [])
    if nproc != 1 and live:
        raise VoxnerfError("--viewer: not with --nproc (train with one process to watch it)")
    if nproc != 1:
        options["threads"] = worker_threads(threads, nproc)
        check_out(out, resume, overwrite)
        code = launch_local(nproc, train_and_report, scene, config, out, options)
    else:
        code = train_and_report(scene, config, out, options)
    if live:
        live.serve_after_training(code)
    if code:
        raise typer.Exit(code)


def train_and_report(scene: Path, config: Path | None, out: Path, options: dict) -> int:
    """`train_run`, then rank 0 prints the outcome; returns the exit status (INTERRUPTED after Ctrl-C)."""
    outcome = train_run(scene, config, out, **options, say=typer.echo)
    if not outcome.main:
        return 0
    if outcome.interrupted:
        typer.echo(interrupted_line(outcome, f"voxnerf train {scene} --out {out} --resume"), err=True)
        return exit_status(outcome.stopped_by)
    print_outcome(outcome)
    return 0


def interrupted_line(outcome: TrainOutcome, resume: str) -> str:
    """What an interrupted `train_run` left, and how to go on (`resume`: the command that continues it)."""
    if outcome.unscored:
        return (f"interrupted during the final scoring; the trained checkpoint is saved in {outcome.checkpoint} "
                f"(voxnerf eval {outcome.out} scores it)")
    return f"interrupted; checkpoint saved to {outcome.checkpoint} at step {outcome.steps} (continue with {resume})"


def _profile(scene_dir: Path, config: Path | None, out: Path, device: str, resume: bool, sets: list[str],
             threads: int | None, quiet: bool) -> None:
    """`train --profile`: a profiler trace of a few steps (of a resumed run with --resume); writes no checkpoint."""
    if resume:
        check_out(out, resume=True, overwrite=False)
    device = resolve_device(device)
    scene, cfg = prepare(scene_dir, config, out, resume, sets, threads=threads, device=device, say=typer.echo)
    trainer = Trainer(scene, cfg, out, device, resume=resume, quiet=True)
    table = profile_steps(trainer, out / "profile.json")
    if not quiet:
        typer.echo(table)
    typer.echo(f"profile     {out / 'profile.json'} (open in chrome://tracing or https://ui.perfetto.dev)")
