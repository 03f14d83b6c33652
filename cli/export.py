"""`voxnerf export RUN --mesh OUT` / `--pointcloud OUT`: geometry out of a trained run, in world units."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from voxnerf.errors import VoxnerfError
from voxnerf.export import METHODS, export_mesh, export_pointcloud
from voxnerf.export.box import parse_bbox
from voxnerf.export.output import MESH_FORMATS, POINTCLOUD_FORMATS, check_output, summary
from voxnerf.export.pointcloud import SOURCES
from voxnerf.run import load_run
from voxnerf.trainer import resolve_device


def export(
    run: Path = typer.Argument(..., help="Run folder (or checkpoint file)."),
    mesh: Optional[Path] = typer.Option(None, help=f"Write a mesh ({', '.join(MESH_FORMATS)})."),
    pointcloud: Optional[Path] = typer.Option(None, help="Write a surface point cloud (.ply)."),
    method: str = typer.Option("density", help=f"Mesh method: {' | '.join(METHODS)} (marching cubes on opacity, "
                                               "or TSDF fusion of depth rendered from the training cameras)."),
    level: float = typer.Option(0.5, help="Opacity iso value, alpha = 1 - exp(-sigma * voxel)."),
    resolution: Optional[int] = typer.Option(None, help="Samples per axis over the unit box (default: the grid's)."),
    bbox: Optional[str] = typer.Option(None, help="Keep x0,y0,z0,x1,y1,z1 (world units); default the scene box."),
    min_component: float = typer.Option(0.05, help="Drop mesh parts smaller than this fraction of the largest."),
    target_faces: Optional[int] = typer.Option(None, help="Decimate the mesh to about this many faces."),
    source: str = typer.Option("grid", help=f"Point source: {' | '.join(SOURCES)} (iso-surface, or rendered depth)."),
    num_points: int = typer.Option(100_000, help="Points to draw (at most this many from depth)."),
    outliers: bool = typer.Option(True, "--remove-outliers/--keep-outliers", help="Statistical outlier removal."),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
) -> None:
    """Export a mesh (vertex colors: the field's color looking at the surface head-on) and/or a point cloud."""
    if mesh is None and pointcloud is None:
        raise VoxnerfError("voxnerf export: nothing to do (give --mesh OUT and/or --pointcloud OUT)")
    if mesh is not None:
        check_output(mesh, MESH_FORMATS, "--mesh")
    if pointcloud is not None:
        check_output(pointcloud, POINTCLOUD_FORMATS, "--pointcloud")
    if resolution is not None and resolution < 2:
        raise VoxnerfError(f"--resolution {resolution}: expected at least 2 samples per axis")
    box = parse_bbox(bbox) if bbox else None
    loaded = load_run(run, resolve_device(device))
    if mesh is not None:
        result = export_mesh(loaded, mesh, method, resolution, level, box, min_component, target_faces, progress=True)
        typer.echo(summary(mesh, result))
    if pointcloud is not None:
        result = export_pointcloud(loaded, pointcloud, source, num_points, resolution, level, box, outliers,
                                   progress=True)
        typer.echo(summary(pointcloud, result))
