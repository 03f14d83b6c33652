"""Surface point clouds with colors and normals, from the grid's iso-surface or from rendered depth.

"grid" (the default) samples the opacity iso-surface that `mesh.field_mesh` extracts, uniformly by area, with the
mesh's interpolated normals. "depth" back-projects the median depth (see `depth`) of every training pixel that sees
a surface, with the density-gradient normal, and keeps the points that at least MIN_VIEWS training views show at
their depth (its own and another): floaters and the fog that a single view renders are not on the surface. Both
color the points as meshes are colored (`photo.surface_colors`: from the photos by default), occluded by the mesh
or by the rendered depth. On toy scenes the grid points lie closer to the true surface (see tests/test_export.py).
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from voxnerf.errors import VoxnerfError
from voxnerf.export.depth import chosen_views, rendered_views
from voxnerf.export.mesh import crop, drop_hidden, field_mesh
from voxnerf.export.photo import field_colors, mesh_depth_maps, photo_colors, surface_colors
from voxnerf.export.query import density_normals
from voxnerf.run.load import Run

SOURCES = ("grid", "depth")
MIN_VIEWS = 2  # depth points that fewer training views show at their depth are dropped
OUTLIER_NEIGHBORS = 20  # statistical outlier removal: neighbors of each point
OUTLIER_STD = 2.0  # points whose mean neighbor distance exceeds the average by this many std are dropped


def colored_cloud(points: np.ndarray, normals: np.ndarray, colors: np.ndarray) -> o3d.geometry.PointCloud:
    """An open3d point cloud of points, normals and colors (N, 3) each."""
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points))
    pcd.normals = o3d.utility.Vector3dVector(np.asarray(normals, np.float64))
    pcd.colors = o3d.utility.Vector3dVector(np.asarray(colors, np.float64))
    return pcd


def grid_points(run: Run, box_world: np.ndarray, count: int, samples: int | None = None, iso: float = 0.5,
                colors: str = "photos", seed: int = 0, progress: bool = False) -> o3d.geometry.PointCloud:
    """`count` points on the opacity iso-surface inside the world box (2, 3), with colors (`colors`: see
    `photo.surface_colors`) and normals; parts of the surface that no training camera sees are left out."""
    mesh = drop_hidden(field_mesh(run, box_world, samples, iso, progress=progress), run.training_cameras())
    if len(mesh.triangles) == 0:
        return o3d.geometry.PointCloud()
    o3d.utility.random.seed(seed)
    sampled = mesh.sample_points_uniformly(count, use_triangle_normal=False)
    points, normals = np.asarray(sampled.points), np.asarray(sampled.normals)
    found = surface_colors(run, points, normals, mesh_depth_maps(mesh, run.training_cameras()), colors, progress)
    return colored_cloud(points, normals, found)


def depth_points(run: Run, box_world: np.ndarray, count: int, colors: str = "photos", seed: int = 0,
                 views: int | None = None, progress: bool = False) -> o3d.geometry.PointCloud:
    """Up to `count` points back-projected from the rendered depth of the training views (all, or `views` spread
    over the cameras: `depth.chosen_views`), inside the world box, that MIN_VIEWS of those views show (see the
    module docstring), with colors (`colors`: see `photo.surface_colors`) and density-gradient normals."""
    cameras = run.training_cameras()
    chosen = chosen_views(len(cameras), views)
    points, depths = [], {}
    for sv in rendered_views(run, cameras, chosen, progress):
        points.append(sv.points())
        depths[sv.index] = sv.depth.reshape(sv.view.depth.shape).astype(np.float32)
    points = np.concatenate(points)
    points = points[np.all((points >= box_world[0]) & (points <= box_world[1]), axis=1)]
    if len(points) > count:
        points = points[np.random.default_rng(seed).choice(len(points), count, replace=False)]
    normals = density_normals(run.model, run.to_unit(points)).astype(np.float64)
    found, seen_by = photo_colors(run, points, normals, depths.__getitem__, progress, chosen)
    if colors == "field":
        found = field_colors(run, points, normals)
    on_surface = seen_by >= MIN_VIEWS
    return colored_cloud(points[on_surface], normals[on_surface], found[on_surface])


def remove_outliers(pcd: o3d.geometry.PointCloud, neighbors: int = OUTLIER_NEIGHBORS,
                    std_ratio: float = OUTLIER_STD) -> o3d.geometry.PointCloud:
    """Statistical outlier removal (open3d); clouds too small to have `neighbors` neighbors are kept whole."""
    if len(pcd.points) <= neighbors:
        return pcd
    kept, _ = pcd.remove_statistical_outlier(neighbors, std_ratio)
    return kept


def surface_points(run: Run, box_world: np.ndarray, source: str = "grid", count: int = 100_000,
                   samples: int | None = None, iso: float = 0.5, outliers: bool = True, colors: str = "photos",
                   views: int | None = None, progress: bool = False) -> o3d.geometry.PointCloud:
    """A surface point cloud in world units from `source` ("grid" or "depth"), cropped to the world box (2, 3).

    Args:
        run: the loaded run.
        box_world: (2, 3) world region to keep.
        source: where the points come from (see the module docstring).
        count: points to draw (depth: at most this many).
        samples, iso: lattice samples per axis and opacity iso value of the "grid" source.
        outliers: apply statistical outlier removal.
        colors: "photos" or "field" (see `photo.surface_colors`).
        views: the "depth" source renders this many training views spread over the cameras; default all.
        progress: show progress bars.
    """
    if source not in SOURCES:
        raise VoxnerfError(f"--source {source}: expected one of {', '.join(SOURCES)}")
    if source == "grid":
        pcd = crop(grid_points(run, box_world, count, samples, iso, colors, progress=progress), box_world)
    else:
        pcd = depth_points(run, box_world, count, colors, views=views, progress=progress)
    return remove_outliers(pcd) if outliers else pcd
