"""`voxnerf eval RUN`: PSNR, SSIM (and LPIPS when installed) of a trained run, per view and mean."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.cli.options import threads_option, use_threads
from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import load_checkpoint
from voxnerf.run.folder import RunLock, scene_mismatch
from voxnerf.run.load import load_run
from voxnerf.system.device import resolve_device
from voxnerf.train.outcome import save_scores


def mean_line(result: dict) -> str:
    """'test  PSNR 31.20 dB  SSIM 0.952  (10 views at 500x500, 1/8 size, 64.1k rays/s)' from a `score_split`
    result (scores written before sizes were recorded leave the size out)."""
    mean, n = result["mean"], len(result["views"])
    parts = [f"{result['split']:<5} PSNR {mean['psnr']:.2f} dB", f"SSIM {mean['ssim']:.3f}"]
    if "lpips" in mean:
        parts.append(f"LPIPS {mean['lpips']:.3f}")
    speed = result["rays"] / max(result["render_seconds"], 1e-9)
    return "  ".join(parts) + f"  ({n} view{'s' * (n != 1)}{size_words(result)}, {speed / 1e3:.1f}k rays/s)"


def size_words(result: dict) -> str:
    """' at 500x500, 1/8 size' (' at 100x100' at the photos' own size) for a `score_split` result; '' when it
    has no size."""
    if "size" not in result:
        return ""
    words = " at {}x{}".format(*result["size"])
    return words + (f", 1/{result['downscale']} size" if result.get("downscale", 1) > 1 else "")


def print_scores(result: dict) -> None:
    """One line per view, then the mean."""
    for row in result["views"]:
        extra = f"  LPIPS {row['lpips']:.3f}" if "lpips" in row else ""
        typer.echo(f"  {row['view']:<24} PSNR {row['psnr']:6.2f} dB  SSIM {row['ssim']:.3f}{extra}")
    typer.echo(mean_line(result))


def eval_command(
    run: Path = typer.Argument(..., help="Run folder (or its checkpoint.pt)."),
    split: str = typer.Option("test", help="Split to score: test, val or train."),
    every: int = typer.Option(1, min=1, help="Score every k-th view of the split."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    scene: Path = typer.Option(None, help="Scene folder, when it moved since training (default: the recorded one)."),
    downscale: int = typer.Option(None, min=1, help="Score on images this many times smaller (default: the "
                                                    "training's)."),
    threads: int = threads_option(),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Render the split's views and score them; writes RUN/eval.json (eval_SPLIT.json for other splits)."""
    use_threads(threads)
    loaded = load_run(run, resolve_device(device), scene, downscale)
    if scene is not None:
        why = scene_mismatch(load_checkpoint(loaded.path)["scene"], loaded.scene())
        if why:
            raise VoxnerfError(f"--scene {scene}: not the scene {loaded.path} was trained on ({why}); its scores "
                               f"would not describe this run")
    with RunLock(loaded.path, typer.echo):
        result = loaded.evaluate(split=split, every=every, progress=not quiet)
        path = save_scores(result, loaded.path)
    print_scores(result)
    typer.echo(f"scores      {path}")
