"""The subject of a run whose grid holds a whole scene (an unbounded or forward-facing capture): what a mesh
export keeps by default, and how many views it renders to find it.

An unbounded capture's cameras circle their subject: its region is the largest sphere around the point their optical
axes meet (`voxnerf.data.bounds.bounds_from_cameras`) that every camera sees whole, as a box. What stands in that
box besides the subject is mostly what it stands on: the ground, a plane below the cameras' focus facing them
(`cut_ground`). A forward-facing capture has no subject the cameras circle; its mesh is the scene box's relief.
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from voxnerf.data.bounds import bounds_from_cameras
from voxnerf.data.cameras import Cameras
from voxnerf.data.footprint import focus_pixel

SUBJECT_VIEWS = 24  # training views rendered (spread over the cameras) for a scene run's TSDF
PIXELS_PER_VOXEL = 2.0  # views are rendered downscaled until a TSDF voxel at the focus spans this many pixels
GROUND_ANGLE = 30.0  # degrees: a plane whose normal lies within this of the cameras' up direction may be the ground
GROUND_SHARE = 0.1  # ... when it holds at least this share of the mesh's vertices
GROUND_MARGIN = 2.0  # TSDF voxels above the ground plane cut with it (the plane's own thickness and the seam)
RANSAC_ITERATIONS = 1000
PLANES = 3  # the largest planes of the mesh tried as the ground, one after the other


def subject_box(cameras: Cameras) -> np.ndarray:
    """(2, 3) world box around the cameras' focus: the largest sphere there that every camera sees whole."""
    return bounds_from_cameras(cameras)[0]


def render_scale(cameras: Cameras, voxel: float) -> float:
    """The image scale (at most 1) at which a TSDF voxel of `voxel` world units at the cameras' focus spans
    PIXELS_PER_VOXEL pixels in the median view: finer renders add time and no detail to the fused surface."""
    return float(np.clip(PIXELS_PER_VOXEL * focus_pixel(cameras, subject_box(cameras).mean(0)) / voxel, 1 / 8, 1.0))


def cut_ground(mesh: o3d.geometry.TriangleMesh, cameras: Cameras, voxel: float) -> o3d.geometry.TriangleMesh:
    """Remove the ground the subject stands on: of the PLANES largest planes in the vertices (RANSAC, one after
    the other, `voxel` world units thick), the first that holds GROUND_SHARE of them, faces the cameras' up direction
    within GROUND_ANGLE and passes below their focus, with everything on its far side and GROUND_MARGIN voxels above
    it. A mesh without such a plane is kept whole. Modifies and returns `mesh`."""
    points = np.asarray(mesh.vertices)
    focus = subject_box(cameras).mean(0)
    left = np.arange(len(points))
    o3d.utility.random.seed(0)
    for _ in range(PLANES):
        if len(left) < GROUND_SHARE * len(points) or len(left) < 3:
            break
        cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points[left]))
        plane, inliers = cloud.segment_plane(voxel, 3, RANSAC_ITERATIONS)
        normal, offset = np.asarray(plane[:3]) / np.linalg.norm(plane[:3]), plane[3] / np.linalg.norm(plane[:3])
        if cameras.centers.mean(0) @ normal + offset < 0:  # the normal points to the cameras' side
            normal, offset = -normal, -offset
        facing = normal @ cameras.up >= np.cos(np.radians(GROUND_ANGLE))
        if facing and len(inliers) >= GROUND_SHARE * len(points) and focus @ normal + offset > 0:
            mesh.remove_vertices_by_mask(points @ normal + offset < GROUND_MARGIN * voxel)
            return mesh
        left = np.delete(left, inliers)
    return mesh
