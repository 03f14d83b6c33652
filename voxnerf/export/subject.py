"""The subject of a run whose grid holds a whole scene (an unbounded or forward-facing capture): what a mesh
export keeps by default, and how many views it renders to find it.

An unbounded capture's cameras circle their subject: its region is the largest sphere around the point their optical
axes meet (`voxnerf.data.bounds.bounds_from_cameras`) that every camera sees whole, as a box. What stands in that
box besides the subject is mostly what it stands on: the ground, a plane below the cameras' focus that they look
down on (`find_ground`, `cut_ground`). A forward-facing capture has no subject the cameras circle; its mesh is the
scene box's relief.
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from voxnerf.data.bounds import bounds_from_cameras
from voxnerf.data.cameras import Cameras
from voxnerf.data.footprint import focus_pixel

SUBJECT_VIEWS = 24  # training views rendered (spread over the cameras) for a scene run's TSDF
PIXELS_PER_VOXEL = 2.0  # views are rendered downscaled until a TSDF voxel at the focus spans this many pixels
GROUND_PITCH = 70.0  # degrees: the cameras may look down on the ground this steeply (the median camera's)
GROUND_CAMERAS = 0.9  # share of the cameras that stand above the ground
GROUND_SHARE = 0.1  # share of the mesh's vertices the ground holds at least
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


def find_ground(mesh: o3d.geometry.TriangleMesh, cameras: Cameras, voxel: float) -> np.ndarray | None:
    """The ground the subject stands on, as (4,) plane coefficients (unit normal toward the cameras, offset: a
    point x lies above it by `x @ plane[:3] + plane[3]`), or None: of the PLANES largest planes in the mesh's
    vertices (RANSAC, one after the other, `voxel` world units thick), the first that holds GROUND_SHARE of them and
    that the cameras look down on (`looked_down_on`)."""
    points = np.asarray(mesh.vertices)
    focus = subject_box(cameras).mean(0)
    left = np.arange(len(points))
    o3d.utility.random.seed(0)
    for _ in range(PLANES):
        if len(left) < GROUND_SHARE * len(points) or len(left) < 3:
            break
        cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points[left]))
        plane, inliers = cloud.segment_plane(voxel, 3, RANSAC_ITERATIONS)
        plane = np.asarray(plane) / np.linalg.norm(plane[:3])
        if np.median(cameras.centers @ plane[:3] + plane[3]) < 0:  # the normal toward the cameras' side
            plane = -plane
        if len(inliers) >= GROUND_SHARE * len(points) and looked_down_on(plane, cameras, focus):
            return plane
        left = np.delete(left, inliers)
    return None


def looked_down_on(plane: np.ndarray, cameras: Cameras, focus: np.ndarray) -> bool:
    """Whether the cameras look down on the (4,) `plane` (unit normal toward them) as on the ground below their
    subject: the focus and GROUND_CAMERAS of the cameras stand above it, and the median camera's up direction lies
    within GROUND_PITCH of its normal. A camera pitched down by an angle to its subject has its up that far from
    the ground's normal, whichever way it faces; a wall behind the subject lies more than 90 degrees from it, a side
    wall about 90 (the cameras' mean up is no guide: over a half circle of steep views it leans toward the
    subject)."""
    normal, offset = plane[:3], plane[3]
    above = np.mean(cameras.centers @ normal + offset > 0) >= GROUND_CAMERAS
    ups = -cameras.c2w[:, :, 1]
    facing = np.median(ups @ normal) >= np.cos(np.radians(GROUND_PITCH))
    return bool(above and facing and focus @ normal + offset > 0)


def cut_ground(mesh: o3d.geometry.TriangleMesh, plane: np.ndarray, voxel: float) -> o3d.geometry.TriangleMesh:
    """Remove what lies below the (4,) ground `plane` (`find_ground`) or within GROUND_MARGIN voxels above it.
    Modifies and returns `mesh`."""
    points = np.asarray(mesh.vertices)
    mesh.remove_vertices_by_mask(points @ plane[:3] + plane[3] < GROUND_MARGIN * voxel)
    return mesh
