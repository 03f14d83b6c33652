"""`voxnerf process IMAGES_OR_VIDEO OUT`: structure from motion (pycolmap) into a scene folder voxnerf trains on."""

from __future__ import annotations

from pathlib import Path

import pycolmap
import typer

from voxnerf.cli.options import parse_downscales
from voxnerf.process.capture import ProcessReport, process_capture
from voxnerf.process.sfm import CAMERA_MODELS, MATCHERS, SfmOptions


def print_report(report: ProcessReport) -> None:
    """How many images registered (and which did not), the camera, the points, and where the scene went."""
    total, posed = report.images, len(report.registered)
    typer.echo(f"registered  {posed} of {total} images ({100 * posed / total:.0f}%)"
               + (f" in the largest of {report.models} models" if report.models > 1 else ""))
    if report.unregistered:
        shown = ", ".join(report.unregistered[:8]) + (" ..." if len(report.unregistered) > 8 else "")
        typer.echo(f"  not posed: {shown}")
    typer.echo(f"camera      {report.camera}")
    typer.echo(f"points      {report.points} (mean reprojection error {report.reprojection_error:.2f} px)")
    for folder in report.downscaled:
        typer.echo(f"copies      {folder}")
    typer.echo(f"scene       {report.out} (train it: voxnerf train {report.out})")
    if posed < total / 2:
        typer.echo(f"warning: only {posed} of {total} images were posed; the scene covers part of the capture",
                   err=True)


def process(
    source: Path = typer.Argument(..., metavar="IMAGES_OR_VIDEO",
                                  help="A folder of photos, or a video file (.mp4, .mov, ...)."),
    out: Path = typer.Argument(..., metavar="OUT", help="The scene folder to make (new or empty)."),
    camera_model: str = typer.Option("SIMPLE_RADIAL", help=f"COLMAP camera model: {', '.join(CAMERA_MODELS)}. "
                                     "Models other than the first five are undistorted to PINHOLE images."),
    single_camera: bool = typer.Option(True, help="One camera shared by all images (a video, one phone); "
                                       "--no-single-camera: one per image size."),
    matcher: str = typer.Option(None, help=f"{' | '.join(MATCHERS)} (default: sequential for a video, else "
                                "exhaustive)."),
    frames: int = typer.Option(150, help="Frames to take from a video, spread evenly over it."),
    downscales: str = typer.Option("2,4", help="Factors of the downscaled copies (images_2/, images_4/)."),
    min_inliers: int = typer.Option(100, help="Matches the first image pair needs (COLMAP's 100); lower it for "
                                    "small images (a few hundred pixels)."),
    threads: int = typer.Option(-1, help="CPU threads for COLMAP (-1: all)."),
    overwrite: bool = typer.Option(False, help="Replace what OUT holds."),
    verbose: bool = typer.Option(False, help="Show COLMAP's log."),
) -> None:
    """Pose photos or a video's frames with COLMAP (SIFT, matching, incremental mapping) into a scene folder."""
    pycolmap.logging.minloglevel = 0 if verbose else 3
    options = SfmOptions(camera_model=camera_model, single_camera=single_camera,
                         matcher=matcher or ("sequential" if source.is_file() else "exhaustive"),
                         min_inliers=min_inliers, threads=threads)
    print_report(process_capture(source, out, options, frames, parse_downscales(downscales), overwrite))
