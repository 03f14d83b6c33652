"""Surface point clouds with colors and normals, from the grid's iso-surface or from rendered depth.

"grid" (the default) samples the opacity iso-surface that `mesh.field_mesh` extracts, uniformly by area; its
points inherit the mesh's head-on colors and normals. "depth" back-projects the median depth (see `depth`) of
every training pixel that sees a surface, with the rendered color and the density-gradient normal. On toy scenes
the grid points lie closer to the true surface (see tests/test_export.py).
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from voxnerf.errors import VoxnerfError
from voxnerf.export.depth import rendered_views
from voxnerf.export.mesh import crop, drop_hidden, field_mesh
from voxnerf.export.query import density_normals
from voxnerf.run import Run

SOURCES = ("grid", "depth")
OUTLIER_NEIGHBORS = 20  # statistical outlier removal: neighbors of each point
OUTLIER_STD = 2.0  # points whose mean neighbor distance exceeds the average by this many std are dropped


def grid_points(run: Run, box_world: np.ndarray, count: int, samples: int | None = None, level: float = 0.5,
                seed: int = 0, progress: bool = False) -> o3d.geometry.PointCloud:
    """`count` points on the opacity iso-surface inside the world box (2, 3), with colors and normals; parts of
    the surface that no training camera sees are left out."""
    mesh = drop_hidden(field_mesh(run, box_world, samples, level, progress), run.training_cameras())
    if len(mesh.triangles) == 0:
        return o3d.geometry.PointCloud()
    o3d.utility.random.seed(seed)
    return mesh.sample_points_uniformly(count, use_triangle_normal=False)


def depth_points(run: Run, box_world: np.ndarray, count: int, seed: int = 0,
                 progress: bool = False) -> o3d.geometry.PointCloud:
    """Up to `count` points back-projected from the rendered depth of the training views, inside the world box.

    Colors are the rendered colors with the background removed; normals are density-gradient normals.
    """
    points, colors = [], []
    for sv in rendered_views(run, run.training_cameras(), progress):
        points.append(sv.points())
        colors.append(sv.foreground_rgb(run.background))
    points, colors = np.concatenate(points), np.concatenate(colors)
    inside = np.all((points >= box_world[0]) & (points <= box_world[1]), axis=1)
    points, colors = points[inside], colors[inside]
    if len(points) > count:
        pick = np.random.default_rng(seed).choice(len(points), count, replace=False)
        points, colors = points[pick], colors[pick]
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points))
    pcd.colors = o3d.utility.Vector3dVector(colors.astype(np.float64))
    pcd.normals = o3d.utility.Vector3dVector(density_normals(run.model, run.to_unit(points)).astype(np.float64))
    return pcd


def remove_outliers(pcd: o3d.geometry.PointCloud, neighbors: int = OUTLIER_NEIGHBORS,
                    std_ratio: float = OUTLIER_STD) -> o3d.geometry.PointCloud:
    """Statistical outlier removal (open3d); clouds too small to have `neighbors` neighbors are kept whole."""
    if len(pcd.points) <= neighbors:
        return pcd
    kept, _ = pcd.remove_statistical_outlier(neighbors, std_ratio)
    return kept


def surface_points(run: Run, box_world: np.ndarray, source: str = "grid", count: int = 100_000,
                   samples: int | None = None, level: float = 0.5, outliers: bool = True,
                   progress: bool = False) -> o3d.geometry.PointCloud:
    """A surface point cloud in world units from `source` ("grid" or "depth"), cropped to the world box (2, 3).

    Args:
        run: the loaded run.
        box_world: (2, 3) world region to keep.
        source: where the points come from (see the module docstring).
        count: points to draw (depth: at most this many).
        samples, level: lattice samples per axis and opacity iso value of the "grid" source.
        outliers: apply statistical outlier removal.
        progress: show progress bars.
    """
    if source not in SOURCES:
        raise VoxnerfError(f"--source {source}: expected one of {', '.join(SOURCES)}")
    if source == "grid":
        pcd = crop(grid_points(run, box_world, count, samples, level, progress=progress), box_world)
    else:
        pcd = depth_points(run, box_world, count, progress=progress)
    return remove_outliers(pcd) if outliers else pcd
