"""Geometry out of a trained run: meshes and point clouds (the open3d occupancy view is in voxnerf.view).

May import: `voxnerf.errors`, `system`, `data`, `fields`, `render`, `run`; never `train` or `view`.

    from voxnerf.run import load_run
    from voxnerf.export import export_mesh, export_pointcloud
    run = load_run("runs/lego")
    mesh = export_mesh(run, "lego.ply")                      # density iso-surface (opacity 0.5), world units
    mesh = export_mesh(run, "lego.glb")                      # a light mesh (100,000 faces) with a baked texture
    iso = auto_iso(run, crop_box(run)).iso                   # the iso value matching the rendered silhouettes
    mesh = export_mesh(run, "lego_auto.ply", iso=iso)
    mesh = export_mesh(run, "lego_tsdf.ply", method="tsdf")   # TSDF fusion of rendered depth
    pcd = export_pointcloud(run, "lego_points.ply")           # surface points with colors and normals

Colors come from the training photos (`photo`), or from the field seen head-on with colors="field"; as vertex
colors on the dense mesh (.ply's default), or on a light mesh as a texture over UV charts (.obj's and .glb's
default; `light`, `charts`, `texture`).

Modules: `mesh` (marching cubes over occupied blocks, smoothing, cleanup), `light` (a face budget: a blurred density,
decimation), `iso` (the automatic iso value), `tsdf` (open3d fusion), `pointcloud` (grid or depth points), `photo`
(colors from the photos), `charts` (xatlas's UV charts, texels of the faces, padding), `texture` (texture
baking), `depth` (rendered views of the training cameras), `query` (log density, normals, colors of the field),
`box` (crop region), `subject` (what an unbounded run's mesh keeps: the subject its cameras circle, cut from
the ground), `output` (writing and summary).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import open3d as o3d

from voxnerf.errors import VoxnerfError
from voxnerf.export.box import crop_box, require_box_space
from voxnerf.export.iso import DEFAULT_ISO, auto_iso
from voxnerf.export.light import LIGHT_BLUR, LIGHT_FACES, decimate
from voxnerf.export.mesh import SMOOTHING, clean_mesh, crop, drop_hidden, field_mesh
from voxnerf.export.output import (MESH_FORMATS, POINTCLOUD_FORMATS, TEXTURED_FORMATS, Y_UP_FORMATS, check_output,
                                   write_mesh, write_pointcloud)
from voxnerf.export.photo import check_colors, color_mesh
from voxnerf.export.pointcloud import surface_points
from voxnerf.export.subject import (SUBJECT_VIEWS, cut_ground, find_ground, in_cylinder, render_scale,
                                    subject_box)
from voxnerf.export.texture import TEXTURE_SIZE, check_texture, textured_mesh
from voxnerf.export.tsdf import fuse
from voxnerf.run.load import Run

METHODS = ("density", "tsdf")


def export_mesh(run: Run, out: str | Path, method: str | None = None, samples: int | None = None,
                iso: float = DEFAULT_ISO, bbox: np.ndarray | None = None, min_component: float = 0.05,
                target_faces: int | None = None, hidden: bool = False, colors: str = "photos",
                smoothing: int = SMOOTHING, views: int | None = None, texture: bool | None = None,
                texture_size: int = TEXTURE_SIZE, whole_scene: bool = False,
                progress: bool = False) -> o3d.geometry.TriangleMesh:
    """Extract, crop, clean and write a mesh of the run in world units (.ply, .obj or .glb by `out`'s suffix).

    Args:
        run: the loaded run.
        out: the file to write.
        method: "density" (the opacity iso-surface, by marching cubes) or "tsdf" (fusion of rendered depth);
            default `default_method`.
        samples: lattice samples per axis over the unit box (density; default twice the grid's resolution up to
            256, `mesh.default_samples`) or TSDF voxels per unit-box width (tsdf; default the grid's resolution).
        iso: iso value of the opacity of one grid cell, 1 - exp(-sigma * cell) (density only); see
            `iso.auto_iso` for the iso value that matches the field's rendered silhouettes.
        bbox: (2, 3) world box to keep; default the scene's box of interest, or for an unbounded run the subject
            its cameras circle (`subject`: its box, cut from the ground) unless `whole_scene`.
        min_component: drop connected components with fewer than this fraction of the largest's triangles.
        target_faces: a light mesh (`light`): marched on the slightly blurred density, then decimated to about
            this many triangles; default LIGHT_FACES for a textured mesh, 0 (the dense mesh) otherwise.
        hidden: keep connected components that no training camera sees (else they are dropped, which needs the
            run's scene folder for the cameras).
        colors: "photos" (the training photos that see each vertex, see `photo`; needs the run's scene folder) or
            "field" (the field's color seen head-on).
        smoothing: steps of neighbour averaging of the density mesh (see `mesh.field_mesh`).
        views: tsdf fuses this many training views spread over the cameras (default all for a box run: a rendering
            each; SUBJECT_VIEWS for a scene run).
        texture: bake `colors` into a texture over UV charts (see `texture`, `charts`) instead of coloring the
            vertices (.obj and .glb only); default: for .obj and .glb.
        texture_size: the texture's largest width and height in texels (it is as large as the photos' pixels
            on the surface need: `texture.texel_density`).
        whole_scene: an unbounded run keeps the scene's whole box, not only the subject its cameras circle.
        progress: show progress bars.
    Returns:
        The written mesh, in world coordinates: with vertex colors, or textured (`texture.textured_mesh`). An .obj
        or .glb file holds it turned so that the training cameras' up direction is +y (`output.write_mesh`).
    """
    out = check_output(out, MESH_FORMATS, "--mesh")
    texture = out.suffix.lower() in TEXTURED_FORMATS if texture is None else texture
    target_faces = (LIGHT_FACES if texture else 0) if target_faces is None else target_faces
    check_texture(out, texture, texture_size)
    method = method or default_method(run)
    if method not in METHODS:
        raise VoxnerfError(f"--method {method}: expected one of {', '.join(METHODS)}")
    if not 0 < iso < 1:
        raise VoxnerfError(f"--iso {iso}: the opacity iso value must lie in (0, 1)")
    check_colors(colors)
    subject = bbox is None and not whole_scene and circles_subject(run)
    cameras = run.training_cameras() if subject or not hidden else None
    box = crop_box(run, subject_box(cameras) if subject else bbox)
    if method == "density":
        require_box_space(run, "--method density", "--method tsdf")
        mesh = field_mesh(run, box, samples, iso, smoothing, LIGHT_BLUR if target_faces else 0.0, progress)
    else:
        voxel = 2.0 / (samples or run.model.estimator.resolution) / run.scale
        scene_run = not run.model.space.bounded
        views = views or (SUBJECT_VIEWS if scene_run else None)
        scale = render_scale(cameras, voxel) if subject else 1.0
        mesh = crop(fuse(run, voxel, views=views, scale=scale, box=box if scene_run else None, progress=progress),
                    box)
        if subject:
            mesh = in_cylinder(mesh, cameras)
        ground = find_ground(mesh, cameras, voxel) if subject else None
        if ground is not None:
            mesh = cut_ground(mesh, ground, voxel)
    if not hidden:
        mesh = drop_hidden(mesh, cameras)
    mesh = clean_mesh(mesh, min_component)
    if target_faces:
        mesh = decimate(mesh, target_faces)
    if texture and len(mesh.triangles):  # an empty mesh is refused by `write_mesh`
        mesh = textured_mesh(run, mesh, colors, texture_size, progress)
    else:
        mesh = color_mesh(run, mesh, colors, progress)
    write_mesh(mesh, out, run.training_cameras().up if out.suffix.lower() in Y_UP_FORMATS else None)
    return mesh


def default_method(run: Run) -> str:
    """The mesh method for `run`: the density iso-surface of a box run; TSDF fusion of rendered depth for an
    unbounded or forward-facing one, whose density over a whole scene holds haze that rendering sees through."""
    return "density" if run.model.space.bounded else "tsdf"


def circles_subject(run: Run) -> bool:
    """Whether `run` holds a whole scene around a subject its cameras circle (an unbounded, not forward-facing,
    run): its mesh is then the subject's (`subject`)."""
    return not run.model.space.bounded and not run.model.space.faces_forward


def export_pointcloud(run: Run, out: str | Path, source: str = "grid", count: int = 100_000,
                      samples: int | None = None, iso: float = DEFAULT_ISO, bbox: np.ndarray | None = None,
                      outliers: bool = True, colors: str = "photos", views: int | None = None,
                      progress: bool = False) -> o3d.geometry.PointCloud:
    """Write a surface point cloud (PLY, world units, colors and normals); see `pointcloud.surface_points`."""
    out = check_output(out, POINTCLOUD_FORMATS, "--pointcloud")
    check_colors(colors)
    if source == "grid":
        require_box_space(run, "--source grid", "--source depth")
    pcd = surface_points(run, crop_box(run, bbox), source, count, samples, iso, outliers, colors, views, progress)
    write_pointcloud(pcd, out)
    return pcd
