"""`voxnerf export RUN --mesh OUT` / `--pointcloud OUT`: geometry out of a trained run, in world units."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from voxnerf.cli.options import threads_option, use_threads
from voxnerf.errors import VoxnerfError
from voxnerf.export import METHODS, default_method, export_mesh, export_pointcloud
from voxnerf.export.box import crop_box, parse_bbox
from voxnerf.export.iso import DEFAULT_ISO, WEAK_IOU, auto_iso, trusted
from voxnerf.export.light import LIGHT_FACES
from voxnerf.export.output import MESH_FORMATS, POINTCLOUD_FORMATS, TEXTURED_FORMATS, check_output, summary
from voxnerf.export.photo import COLORS
from voxnerf.export.pointcloud import SOURCES
from voxnerf.export.subject import SUBJECT_VIEWS
from voxnerf.export.texture import MAX_TEXTURE, TEXTURE_SIZE, check_texture
from voxnerf.run.load import Run, load_run
from voxnerf.system.device import resolve_device


def parse_iso(text: str) -> float | None:
    """--iso: a number (validated by the export) or 'auto' (None)."""
    if text == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise VoxnerfError(f"--iso {text}: expected a number in (0, 1) or auto") from None


EXPORT_REMEDY = f"Give --iso {DEFAULT_ISO:g} (or another value) to extract it anyway, or --method tsdf"


def chosen_iso(run: Run, bbox, remedy: str = EXPORT_REMEDY) -> float:
    """The automatic iso value of `run` inside `bbox` (world (2, 3) or None: the scene box), printed as it is found;
    VoxnerfError ending with `remedy` when its silhouettes match the rendered ones poorly (`iso.trusted`)."""
    chosen = trusted(auto_iso(run, crop_box(run, bbox), progress=True), remedy)
    typer.echo(f"iso auto: {chosen.iso:.4g} (silhouette IoU {chosen.iou:.3f} against the field's rendering, "
               f"{chosen.rays} training rays)")
    return chosen.iso


def export(
    run: Path = typer.Argument(..., help="Run folder (or checkpoint file)."),
    mesh: Optional[Path] = typer.Option(None, help=f"Write a mesh ({', '.join(MESH_FORMATS)})."),
    pointcloud: Optional[Path] = typer.Option(None, help="Write a surface point cloud (.ply)."),
    method: Optional[str] = typer.Option(None, help=f"Mesh method: {' | '.join(METHODS)} (marching cubes on "
                                         "opacity, or TSDF fusion of depth rendered from the training cameras). "
                                         "Default: density for an object (box) run, tsdf for an unbounded or "
                                         "forward-facing one."),
    iso: str = typer.Option("auto", "--iso", "--level", help="Iso value of one grid cell's opacity, alpha = 1 - exp(-sigma * cell), "
                              f"in (0, 1) ({DEFAULT_ISO}: NSVF's); or auto: the iso value whose silhouettes match the "
                              "field's rendering of the training views (a trained density is soft); a run where no "
                              f"iso value matches them (IoU < {WEAK_IOU}) is refused."),
    resolution: Optional[int] = typer.Option(None, help="Samples per axis over the unit box (default: twice the grid's, up "
                                                 "to 256, for density meshes and grid points; the grid's for TSDF)."),
    bbox: Optional[str] = typer.Option(None, help="Keep x0,y0,z0,x1,y1,z1 (world units); default the scene box, or "
                                       "for an unbounded run the subject its cameras circle, cut from the ground."),
    whole_scene: bool = typer.Option(False, "--whole-scene", help="An unbounded run's mesh keeps the whole scene "
                                     "box (the ground, the room), not only the subject the cameras circle."),
    min_component: float = typer.Option(0.05, help="Drop mesh parts smaller than this fraction of the largest."),
    target_faces: Optional[int] = typer.Option(None, min=0, help=f"A light mesh: marched on a slightly blurred "
                                               "density (smoother), decimated to about this many faces. Default: "
                                               f"{LIGHT_FACES:,} for a textured mesh, none for vertex colors; 0: "
                                               "keep every face."),
    hidden: bool = typer.Option(False, "--keep-hidden/--drop-hidden", help="Keep mesh parts that no training camera "
                                "sees (surfaces inside the object); dropping them needs the run's scene folder."),
    source: str = typer.Option("grid", help=f"Point source: {' | '.join(SOURCES)} (iso-surface, or rendered depth)."),
    num_points: int = typer.Option(100_000, min=1, help="Points to draw (at most this many from depth)."),
    outliers: bool = typer.Option(True, "--remove-outliers/--keep-outliers", help="Statistical outlier removal."),
    colors: str = typer.Option("photos", help=f"Vertex and point colors: {' | '.join(COLORS)} (the weighted median "
                               "of the training photos that see each point, which needs the run's scene folder; "
                               "or the field's color looking at the surface head-on)."),
    views: Optional[int] = typer.Option(None, min=2, help="--method tsdf and --source depth: render this many "
                                        "training views, spread over the cameras (default all for an object run, "
                                        f"{SUBJECT_VIEWS} for a mesh of an unbounded or forward-facing one)."),
    texture: Optional[bool] = typer.Option(None, "--texture/--vertex-colors", help="Bake the colors into a texture "
                                           "over UV charts (.obj, with its .mtl and .png beside it, or .glb, "
                                           "embedded), or color the vertices. Default: a texture for .obj and .glb "
                                           "(a light mesh, see --target-faces), vertex colors for .ply (the dense "
                                           "mesh)."),
    texture_size: int = typer.Option(TEXTURE_SIZE, help=f"Largest texture width and height in texels (up to "
                                     f"{MAX_TEXTURE})."),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    threads: Optional[int] = threads_option(),
) -> None:
    """Export a mesh (colors from the training photos: for .obj and .glb a light mesh with a texture, for .ply the
    dense mesh with vertex colors) and/or a point cloud (colors likewise)."""
    if mesh is None and pointcloud is None:
        raise VoxnerfError("voxnerf export: nothing to do (give --mesh OUT and/or --pointcloud OUT)")
    use_threads(threads)
    if mesh is not None:
        out = check_output(mesh, MESH_FORMATS, "--mesh")
        check_texture(out, out.suffix.lower() in TEXTURED_FORMATS if texture is None else texture, texture_size)
    if pointcloud is not None:
        check_output(pointcloud, POINTCLOUD_FORMATS, "--pointcloud")
    if resolution is not None and resolution < 2:
        raise VoxnerfError(f"--resolution {resolution}: expected at least 2 samples per axis")
    box = parse_bbox(bbox) if bbox else None
    iso = parse_iso(iso)
    loaded = load_run(run, resolve_device(device))
    method = method or default_method(loaded)
    if views is not None and not (mesh is not None and method == "tsdf" or pointcloud is not None and source == "depth"):
        raise VoxnerfError("--views: only --method tsdf and --source depth render views")
    if iso is None:
        marched = method == "density" and mesh is not None or source == "grid" and pointcloud is not None
        iso = chosen_iso(loaded, box) if marched else DEFAULT_ISO
    if mesh is not None:
        result = export_mesh(loaded, mesh, method, resolution, iso, box, min_component, target_faces, hidden,
                             colors, views=views, texture=texture, texture_size=texture_size,
                             whole_scene=whole_scene, progress=True)
        typer.echo(summary(mesh, result))
    if pointcloud is not None:
        result = export_pointcloud(loaded, pointcloud, source, num_points, resolution, iso, box, outliers, colors,
                                   views, progress=True)
        typer.echo(summary(pointcloud, result))
