"""TSDF fusion (open3d's tensor VoxelBlockGrid) of the depth and color rendered from the training cameras.

The alternative to the density iso-surface for real scenes, where density is noisy but rendered depth is not.
open3d wants z-depth in the camera frame and world-to-camera extrinsics in the OpenCV convention; our cameras
are OpenCV already, and the median depth of a surface pixel (distance along the unit ray, see `depth`) becomes
z-depth by the ray's cosine with the optical axis. open3d's pinhole model puts pixel centers at integers, ours at
+0.5: the principal point is shifted by half a pixel. The views are rendered as ideal pinholes (the training
cameras without their lens distortion): open3d's model has none, and a distorted view's depth fused as a pinhole's
bends planes (a floor filmed with a phone's k1 of 0.035 bent several voxels toward its views' edges).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import open3d as o3d
import open3d.core as o3c

from voxnerf.data.cameras import Cameras
from voxnerf.export.depth import SurfaceView, chosen_views, rendered_views, z_depth
from voxnerf.run.load import Run

TRUNCATION_VOXELS = 4.0  # the signed distance is truncated at this many voxels
MIN_VIEWS = 2.0  # voxels seen by fewer views are left out of the mesh
BLOCK_COUNT = 40_000  # initial capacity of the voxel-block hash map (8^3 voxels a block; it grows as needed)


def depth_image(sv: SurfaceView, c2w: np.ndarray) -> np.ndarray:
    """(H, W) float32 camera-frame z of the surface pixels (`z_depth`), 0 elsewhere: open3d's depth image."""
    h, w = sv.view.depth.shape
    return np.where(sv.surface, z_depth(sv.depth, sv.dirs, c2w), 0.0).reshape(h, w).astype(np.float32)


def pinhole(cameras: Cameras, i: int) -> tuple[o3c.Tensor, o3c.Tensor]:
    """3x3 intrinsic matrix (pixel centers at integers) and 4x4 world-to-camera extrinsic of camera i, float64."""
    fx, fy, cx, cy = cameras.intrinsics[i]
    k = np.array([[fx, 0.0, cx - 0.5], [0.0, fy, cy - 0.5], [0.0, 0.0, 1.0]])
    c2w = np.vstack([cameras.c2w[i], [0.0, 0.0, 0.0, 1.0]])
    return o3c.Tensor(k, o3c.float64), o3c.Tensor(np.linalg.inv(c2w), o3c.float64)


def inside(points: np.ndarray, box: np.ndarray, margin: float) -> np.ndarray:
    """(P,) bool: `points` (P, 3) within `margin` of the world box (2, 3)."""
    return np.all((points >= box[0] - margin) & (points <= box[1] + margin), axis=1)


def fuse(run: Run, voxel: float, far: float | None = None, min_views: float = MIN_VIEWS, views: int | None = None,
         scale: float = 1.0, box: np.ndarray | None = None, progress: bool = False) -> o3d.geometry.TriangleMesh:
    """The TSDF mesh of the run's rendered training views, world units, with vertex colors.

    Args:
        run: the loaded run (its scene folder must still hold the training cameras).
        voxel: TSDF voxel edge in world units.
        far: depth beyond which pixels are ignored (default the scene's far bound).
        min_views: voxels integrated fewer times than this are left out of the mesh.
        views: fuse this many training views spread over the cameras (`depth.chosen_views`); default all.
        scale: render the views at this scale of the training images (`Cameras.scaled`).
        box: (2, 3) world box: only pixels whose surface lies in it (or within the truncation of it) are fused.
        progress: show a bar over the views.
    """
    scaled = run.training_cameras().scaled(scale)
    cameras = dataclasses.replace(scaled, distortion=np.zeros_like(scaled.distortion))  # ideal pinholes
    device = o3c.Device("CPU:0")
    grid = o3d.t.geometry.VoxelBlockGrid(
        attr_names=("tsdf", "weight", "color"), attr_dtypes=(o3c.float32, o3c.float32, o3c.float32),
        attr_channels=((1), (1), (3)), voxel_size=voxel, block_resolution=8, block_count=BLOCK_COUNT, device=device)
    far = float(run.record.far if far is None else far)
    for sv in rendered_views(run, cameras, chosen_views(len(cameras), views), progress):
        if box is not None:
            sv.surface[sv.surface] = inside(sv.points(), box, TRUNCATION_VOXELS * voxel)
        rgb = sv.view.rgb.reshape(-1, 3).copy()
        rgb[sv.surface] = sv.foreground_rgb(run.background)
        color = o3d.t.geometry.Image(o3c.Tensor(rgb.reshape(sv.view.rgb.shape).astype(np.float32)))
        depth = o3d.t.geometry.Image(o3c.Tensor(depth_image(sv, cameras.c2w[sv.index])))
        intrinsic, extrinsic = pinhole(cameras, sv.index)
        blocks = grid.compute_unique_block_coordinates(depth, intrinsic, extrinsic, 1.0, far, TRUNCATION_VOXELS)
        grid.integrate(blocks, depth, color, intrinsic, extrinsic, 1.0, far, TRUNCATION_VOXELS)
    mesh = grid.extract_triangle_mesh(weight_threshold=min_views).to_legacy()
    mesh.compute_vertex_normals()
    return mesh
