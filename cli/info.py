"""`voxnerf info SCENE [--plot top.png] [--check-masks]`: what was loaded from a scene folder, a top view of its
cameras, and whether its masks agree with its poses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras
from voxnerf.data.mask_check import ViewAgreement, mask_agreement
from voxnerf.data.layout import detect_layout, top_down_axes
from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
TICK_FRACTION = 0.06  # longest view wedge of a camera, as a fraction of the plot's extent
TICK_NEAR = 0.3  # longest view wedge of a camera, as a fraction of the near distance
# The 12 edges of a box, as pairs of corner indices; corner k has x = bit 0, y = bit 1, z = bit 2 of k.
BOX_EDGES = [(k, k | bit) for k in range(8) for bit in (1, 2, 4) if not k & bit]
MASK_TOLERANCE = 2.0  # px: silhouettes this far outside the other views' masks still agree (masks are hand-made)
DISAGREEING = 0.1  # a view disagrees when this share of its silhouette lies beyond the tolerance
WORST_SHOWN = 5


def info(
    scene: Path = typer.Argument(..., help="Scene folder (any supported format)."),
    plot: Path = typer.Option(None, help="Also draw a top view of the cameras, box and near/far into this PNG."),
    downscale: int = typer.Option(1, min=1, help="Describe the scene as `train --downscale N` would read it."),
    format: str = typer.Option(None, "--format", help="Read SCENE as this format (default: detected)."),
    check_masks: bool = typer.Option(False, "--check-masks", help="Also test each view's mask against the other "
                                     "views' masks and the poses (tens of seconds): views that disagree train soft "
                                     "edges."),
) -> None:
    """Print the detected format and layout, views per split, resolution, intrinsics and bounds; with
    --check-masks, whether the masks agree with the poses."""
    if plot is not None and plot.suffix.lower() not in PLOT_SUFFIXES:
        raise VoxnerfError(f"--plot {plot}: expected a file name ending in {', '.join(PLOT_SUFFIXES)}")
    loaded = load_scene(scene, with_images=check_masks, downscale=downscale, format=format)  # images: decoded lazily
    if check_masks and not loaded.has_masks:
        raise VoxnerfError(f"{scene}: --check-masks needs foreground masks, and this scene has none")
    layout = detect_layout(loaded)
    s = loaded.summary()
    fx = s["intrinsics[0]"]
    lo, hi = s["bbox"]
    res = ", ".join(f"{w}x{h}" for w, h in s["resolutions"])
    splits = " / ".join(f"{n} {k}" for k, n in s["splits"].items())
    typer.echo(f"scene       {s['root']}")
    typer.echo(f"format      {s['format']}")
    typer.echo(f"layout      {layout}")
    typer.echo(f"views       {s['images']} ({splits})")
    typer.echo(f"resolution  {res}")
    typer.echo(f"intrinsics  fx {fx['fx']:.1f}  fy {fx['fy']:.1f}  cx {fx['cx']:.1f}  cy {fx['cy']:.1f}  (camera 0)")
    typer.echo(f"distortion  {'yes' if s['distortion'] else 'none'}")
    typer.echo(f"bounds      min ({lo[0]:.3f}, {lo[1]:.3f}, {lo[2]:.3f})  max ({hi[0]:.3f}, {hi[1]:.3f}, {hi[2]:.3f})")
    typer.echo(f"near / far  {s['near']:.3f} / {s['far']:.3f}")
    bg = s["background"]
    typer.echo(f"background  {'opaque images' if bg is None else tuple(round(c, 3) for c in bg)}")
    mask_paths = loaded.extras.get("mask_paths")
    masks = f"yes ({len(mask_paths)} in {mask_paths[0].parent.name}/: the alpha of their images)" if mask_paths \
        else ("yes" if s["masks"] else "no")
    typer.echo(f"masks       {masks}   sparse points  {s['points']}")
    if plot is not None:
        typer.echo(f"top view    {plot_top_view(loaded, layout, plot)}")
    if check_masks:
        typer.echo(f"mask check  {mask_verdict(mask_agreement(loaded, MASK_TOLERANCE))}")


def mask_verdict(report: list[ViewAgreement]) -> str:
    """One line: how many views' silhouettes disagree with the other views' masks, and the worst of them; empty
    masks are named first."""
    empty = [v.name for v in report if not v.pixels]
    empty_note = f"empty masks: {', '.join(empty[:WORST_SHOWN])}; " if empty else ""
    bad = sorted((v for v in report if v.disagreeing > DISAGREEING), key=lambda v: -v.disagreeing)
    if not bad:
        return (f"{empty_note}the {len(report)} masks agree with the poses (no view has over {DISAGREEING:.0%} of its "
                f"silhouette more than {MASK_TOLERANCE:g} px outside the other views' masks)")
    worst = ", ".join(f"{v.name} {v.disagreeing:.0%}" for v in bad[:WORST_SHOWN])
    return (f"{empty_note}{len(bad)} of {len(report)} views disagree with the others (share of the silhouette more than "
            f"{MASK_TOLERANCE:g} px outside the other views' masks: {worst}): their poses, intrinsics or masks are "
            f"off, so trained silhouettes will be soft there and the edges will cap the PSNR")


def side_rays(cameras: Cameras) -> np.ndarray:
    """(N, 2, 3) unit world directions of the rays through the middle of each image's left and right edges."""
    fx, _, cx, _ = cameras.intrinsics.T
    width = cameras.sizes[:, 0]
    x = np.stack([-cx / fx, (width - cx) / fx], -1)
    local = np.stack(np.broadcast_arrays(x, 0.0, 1.0), -1)
    local /= np.linalg.norm(local, axis=-1, keepdims=True)
    return np.einsum("nij,nkj->nki", cameras.c2w[:, :, :3], local)


def box_corners(bbox: np.ndarray) -> np.ndarray:
    """(8, 3) corners of the box bbox (2, 3); corner k takes max x, y, z where bits 0, 1, 2 of k are set."""
    bits = (np.arange(8)[:, None] >> np.arange(3)) & 1
    return np.where(bits == 1, bbox[1], bbox[0])


def axis_text(axis: np.ndarray) -> str:
    """A direction (3,) as "(x, y, z)" with two decimals and no negative zeros."""
    return "(" + ", ".join(f"{round(float(v), 2) + 0.0:.2f}" for v in axis) + ")"


def plot_top_view(scene: Scene, layout: str, path: Path) -> Path:
    """Draw camera centers with view wedges, the box of interest and camera 0's frustum from near to far, seen
    from above (along the cameras' mean up), into the image file `path`; return `path`."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    axes = top_down_axes(scene.cameras)
    centers, rays = scene.cameras.centers @ axes.T, side_rays(scene.cameras) @ axes.T
    corners = box_corners(scene.bbox) @ axes.T
    extent = np.ptp(np.concatenate([centers, corners]), axis=0).max()
    tick = min(TICK_FRACTION * extent, TICK_NEAR * scene.near)
    wedges = np.stack([centers + tick * rays[:, 0], centers, centers + tick * rays[:, 1]], 1)
    near, far = scene.near * rays[0], scene.far * rays[0]
    frustum = centers[0] + np.stack([near[0], far[0], far[1], near[1], near[0]])

    figure = Figure(figsize=(7, 7.5), dpi=100, layout="constrained")
    ax = figure.add_subplot()
    ax.add_collection(LineCollection([corners[[i, j]] for i, j in BOX_EDGES], colors="tab:green", label="box of interest"))
    ax.plot(*frustum.T, "--", color="tab:orange", label=f"camera 0, near {scene.near:.3g} to far {scene.far:.3g}")
    ax.add_collection(LineCollection(wedges, colors="tab:blue", linewidths=0.8))
    ax.scatter(*centers.T, s=10, color="tab:blue", label=f"{len(centers)} cameras (wedge: field of view)")
    ax.scatter(*centers[0], s=40, color="tab:orange", zorder=3)
    ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    ax.set_xlabel(f"world units along {axis_text(axes[0])}")
    ax.set_ylabel(f"world units along {axis_text(axes[1])}")
    ax.set_title(f"{scene.root.name}\n{scene.format}, {layout}: top view, the cameras' mean up toward you", fontsize="medium")
    figure.legend(loc="outside lower center", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
