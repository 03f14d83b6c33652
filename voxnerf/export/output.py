"""Writing exports with open3d, checking the output path first, and the one-paragraph summary printed after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import open3d as o3d

from voxnerf.errors import VoxnerfError

MESH_FORMATS = (".ply", ".obj", ".glb")
POINTCLOUD_FORMATS = (".ply",)


def check_output(path: str | Path, formats: tuple[str, ...], option: str) -> Path:
    """The output file `path` if its suffix is one of `formats` and no file stands where its folder goes (the
    folder is made when the export is written), else VoxnerfError."""
    path = Path(path)
    if path.suffix.lower() not in formats:
        raise VoxnerfError(f"{option} {path}: unsupported format (use {', '.join(formats)})")
    blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise VoxnerfError(f"{option} {path}: {blocked} is a file, not a folder")
    return path


def make_folder(path: Path) -> None:
    """Create the folder of the output file `path` (and its parents) when missing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VoxnerfError(f"{path}: cannot create its folder ({e.strerror})") from None


def write_mesh(mesh: o3d.geometry.TriangleMesh, path: Path) -> None:
    """Write a mesh (vertex colors and normals included) by its suffix, or raise VoxnerfError."""
    if len(mesh.triangles) == 0:
        raise VoxnerfError(f"{path}: the mesh is empty (nothing reached the iso value inside the box; try --iso "
                           f"auto, a lower --iso or another --bbox)")
    make_folder(path)
    if not o3d.io.write_triangle_mesh(str(path), mesh, write_vertex_normals=True, write_vertex_colors=True):
        raise VoxnerfError(f"{path}: open3d could not write the mesh")


def write_pointcloud(pcd: o3d.geometry.PointCloud, path: Path) -> None:
    """Write a point cloud (colors and normals included) as binary PLY, or raise VoxnerfError."""
    if len(pcd.points) == 0:
        raise VoxnerfError(f"{path}: the point cloud is empty (no surface found inside the box)")
    make_folder(path)
    if not o3d.io.write_point_cloud(str(path), pcd):
        raise VoxnerfError(f"{path}: open3d could not write the point cloud")


def summary(path: Path, geometry) -> str:
    """Lines naming the written file, its vertex/face or point counts and its world bounding box."""
    points = np.asarray(geometry.vertices if isinstance(geometry, o3d.geometry.TriangleMesh) else geometry.points)
    if isinstance(geometry, o3d.geometry.TriangleMesh):
        counts = f"{len(points)} vertices, {len(geometry.triangles)} faces"
    else:
        counts = f"{len(points)} points"
    lo, hi = points.min(0), points.max(0)
    box = f"({lo[0]:.3f}, {lo[1]:.3f}, {lo[2]:.3f}) to ({hi[0]:.3f}, {hi[1]:.3f}, {hi[2]:.3f})"
    return f"wrote {path}\n  {counts}\n  world bounds {box}"
