"""`voxnerf demo`: the whole job on a built-in toy scene: make it, train, score, render, export; prints the paths."""

from __future__ import annotations

from pathlib import Path

import typer

import voxnerf.scenes as toy_scenes
from voxnerf.cli.export import chosen_iso
from voxnerf.cli.options import threads_option, use_threads
from voxnerf.cli.render import print_rendered
from voxnerf.cli.train import interrupted_line, print_outcome
from voxnerf.errors import VoxnerfError
from voxnerf.export import export_mesh, export_pointcloud
from voxnerf.export.iso import DEFAULT_ISO
from voxnerf.export.output import summary
from voxnerf.run.load import load_run
from voxnerf.system.device import resolve_device
from voxnerf.train.interrupt import exit_status
from voxnerf.train.presets import build_config, preset_path
from voxnerf.train.session import train_run
from voxnerf.view.renders import render_run

STAGES = 4
MAX_TIME = 60.0  # seconds of training: a mesh needs more than the occupancy warm-up of fp32 steps (AVX2-only CPUs)


def stage(k: int, text: str) -> None:
    typer.echo(f"[{k}/{STAGES}] {text}")


def export_step(run_dir: Path, max_time: float) -> None:
    """Stage 4: the demo run's mesh and point cloud, as `voxnerf export --iso auto` writes them.

    A minute of training leaves a soft density whose per-voxel opacity rarely reaches 0.5, so the demo meshes the
    iso value whose silhouettes match the rendered ones (`iso.auto_iso`) and draws the points from that surface.
    A run too short for any iso value to match them (`max_time` seconds of fp32 steps spent in the occupancy
    warm-up) is refused with what to run instead; the trained run and its renders stay.
    """
    run = load_run(run_dir)
    longer = max(MAX_TIME, 2 * max_time)
    iso = chosen_iso(run, None, f"The run and its renders are kept in {run_dir}: train longer than {max_time:g} s "
                                f"(voxnerf demo --max-time {longer:g}), or mesh it anyway with voxnerf export "
                                f"{run_dir} --mesh mesh.ply --iso {DEFAULT_ISO:g}")
    mesh, points = run_dir / "mesh.ply", run_dir / "points.ply"
    for path, geometry in ((mesh, export_mesh(run, mesh, iso=iso)),
                           (points, export_pointcloud(run, points, iso=iso))):
        typer.echo(summary(path, geometry))


def demo(
    out: Path = typer.Option(Path("runs/demo"), help="Folder for the scene (OUT/scene) and the run (OUT/run)."),
    scene: str = typer.Option("sphere", help="Toy scene: " + ", ".join(toy_scenes.SCENES) + "."),
    max_time: float = typer.Option(MAX_TIME, help="Seconds of training."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: int = threads_option(", in every stage"),
) -> None:
    """Make a toy scene, train on it with configs/cpu.yaml (a minute), score, render and export it; prints the paths."""
    if scene not in toy_scenes.SCENES:
        raise VoxnerfError(f"--scene {scene}: unknown toy scene (known: {', '.join(toy_scenes.SCENES)})")
    resolve_device(device)
    use_threads(threads)  # training sets it again from its configuration (voxnerf.train.trainer)
    build_config(preset_path("cpu"), [], None, max_time, threads)  # bad options fail before stage 1
    stage(1, f"rendering the toy scene '{scene}' (ground truth) into {out / 'scene'}")
    scene_dir = toy_scenes.make_scene(scene, out / "scene", n_train=60, n_val=5, n_test=10, size=64,
                                      n_samples=256, progress=True)
    stage(2, f"training with {preset_path('cpu')}")
    outcome = train_run(scene_dir, preset_path("cpu"), out / "run", device=device, overwrite=True,
                        max_time=max_time, threads=threads)
    if outcome.interrupted:
        typer.echo(interrupted_line(outcome, f"voxnerf train {scene_dir} --out {outcome.out} --resume"), err=True)
        raise typer.Exit(exit_status(outcome.stopped_by))
    stage(3, "rendering the test views and an orbit")
    rendered = render_run(outcome.out, frames=48, device=device)
    stage(4, "exporting a mesh and a point cloud")
    export_step(outcome.out, max_time)
    typer.echo("")
    typer.echo(f"scene       {scene_dir}")
    print_outcome(outcome)
    print_rendered(rendered)
