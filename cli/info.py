"""`voxnerf info SCENE`: what was loaded from a scene folder."""

from __future__ import annotations

from pathlib import Path

import typer

from voxnerf.data import load_scene


def info(scene: Path = typer.Argument(..., help="Scene folder (any supported format).")) -> None:
    """Print the detected format, views per split, resolution, intrinsics and bounds."""
    s = load_scene(scene, with_images=False).summary()
    fx = s["intrinsics[0]"]
    lo, hi = s["bbox"]
    res = ", ".join(f"{w}x{h}" for w, h in s["resolutions"])
    splits = " / ".join(f"{n} {k}" for k, n in s["splits"].items())
    typer.echo(f"scene       {s['root']}")
    typer.echo(f"format      {s['format']}")
    typer.echo(f"views       {s['images']} ({splits})")
    typer.echo(f"resolution  {res}")
    typer.echo(f"intrinsics  fx {fx['fx']:.1f}  fy {fx['fy']:.1f}  cx {fx['cx']:.1f}  cy {fx['cy']:.1f}  (camera 0)")
    typer.echo(f"distortion  {'yes' if s['distortion'] else 'none'}")
    typer.echo(f"bounds      min ({lo[0]:.3f}, {lo[1]:.3f}, {lo[2]:.3f})  max ({hi[0]:.3f}, {hi[1]:.3f}, {hi[2]:.3f})")
    typer.echo(f"near / far  {s['near']:.3f} / {s['far']:.3f}")
    bg = s["background"]
    typer.echo(f"background  {'opaque images' if bg is None else tuple(round(c, 3) for c in bg)}")
    typer.echo(f"masks       {'yes' if s['masks'] else 'no'}   sparse points  {s['points']}")
