"""`voxnerf eval RUN`: PSNR, SSIM (and LPIPS when installed) of a trained run, per view and mean."""

from __future__ import annotations

import json
from pathlib import Path

import typer

import torch

from voxnerf.config import TrainConfig
from voxnerf.data import load_scene
from voxnerf.errors import VoxnerfError
from voxnerf.model import Model
from voxnerf.run import load_run
from voxnerf.scene import Scene
from voxnerf.trainer import amp_dtype_for, evaluate_field, resolve_device


def score(model: Model, scene: Scene, cfg: TrainConfig, device: torch.device, split: str = "test",
          every: int = 1) -> dict:
    """`evaluate_field` on a split that must hold views (else VoxnerfError naming the scene and split)."""
    if not len(scene.split_indices(split)):
        raise VoxnerfError(f"{scene.root}: no '{split}' views to evaluate")
    return evaluate_field(model, scene, cfg.render, device, amp_dtype_for(cfg.precision, device), split, every)


def scores_path(run_dir: Path, split: str) -> Path:
    """Where a split's scores go: eval.json for the test split, eval_SPLIT.json for the others."""
    return Path(run_dir) / ("eval.json" if split == "test" else f"eval_{split}.json")


def write_scores(result: dict, run_dir: Path) -> Path:
    """Write an `evaluate_field` result as JSON into the run folder; returns the file."""
    path = scores_path(run_dir, result["split"])
    path.write_text(json.dumps(result, indent=2))
    return path


def mean_line(result: dict) -> str:
    """'test  PSNR 31.20 dB  SSIM 0.952  (10 views)' from an `evaluate_field` result."""
    mean, n = result["mean"], len(result["views"])
    parts = [f"{result['split']:<5} PSNR {mean['psnr']:.2f} dB", f"SSIM {mean['ssim']:.3f}"]
    if "lpips" in mean:
        parts.append(f"LPIPS {mean['lpips']:.3f}")
    return "  ".join(parts) + f"  ({n} view{'s' * (n != 1)})"


def print_scores(result: dict) -> None:
    """One line per view, then the mean."""
    for row in result["views"]:
        extra = f"  LPIPS {row['lpips']:.3f}" if "lpips" in row else ""
        typer.echo(f"  {row['view']:<24} PSNR {row['psnr']:6.2f} dB  SSIM {row['ssim']:.3f}{extra}")
    typer.echo(mean_line(result))


def run_scene(record: dict, scene: Path | None, with_images: bool = True) -> Scene:
    """The scene a run was trained on (its recorded folder), or `scene` when given (a moved folder)."""
    return load_scene(scene if scene is not None else Path(record["root"]), with_images=with_images)


def eval_command(
    run: Path = typer.Argument(..., help="Run folder (or its checkpoint.pt)."),
    split: str = typer.Option("test", help="Split to score: test, val or train."),
    every: int = typer.Option(1, min=1, help="Score every k-th view of the split."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
) -> None:
    """Render the split's views and score them; writes RUN/eval.json (eval_SPLIT.json for other splits)."""
    dev = resolve_device(device)
    loaded = load_run(run, dev)
    data = run_scene(loaded.scene, scene)
    result = score(loaded.model, data, loaded.config, dev, split, every)
    path = write_scores(result, loaded.path)
    print_scores(result)
    typer.echo(f"scores      {path}")
