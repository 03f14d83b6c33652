"""The subject of a run whose grid holds a whole scene (an unbounded or forward-facing capture): what a mesh
export keeps by default, and how many views it renders to find it.

An unbounded capture's cameras circle their subject: it stands in the upright cylinder around the point their
optical axes meet (`subject_cylinder`), as wide as the largest sphere there that every camera sees whole
(`voxnerf.data.bounds.bounds_from_cameras`) and as tall as every camera frames it (`subject_box`, the box that
fusion and cropping use; `in_cylinder` then keeps the cylinder). That sphere alone is set by the narrowest field of
view, and a phone held upright frames much more height than width: a can filmed in portrait reached a third of its
height below it. What stands in the cylinder besides the subject is mostly what it stands on: the ground, a plane
below the cameras' focus that they look down on (`find_ground`, `cut_ground`). A forward-facing capture has no
subject the cameras circle; its mesh is the scene box's relief.
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from voxnerf.data.bounds import bounds_from_cameras
from voxnerf.data.cameras import Cameras
from voxnerf.data.footprint import focus_pixel
from voxnerf.data.rays import pixels_seen

SUBJECT_VIEWS = 24  # training views rendered (spread over the cameras) for a scene run's TSDF
PIXELS_PER_VOXEL = 2.0  # views are rendered downscaled until a TSDF voxel at the focus spans this many pixels
GROUND_PITCH = 70.0  # degrees: the cameras may look down on the ground this steeply (the median camera's)
GROUND_CAMERAS = 0.9  # share of the cameras that stand above the ground
GROUND_SHARE = 0.1  # share of the mesh's vertices the ground holds at least
GROUND_MARGIN = 2.0  # TSDF voxels above the ground plane cut with it (the plane's own thickness and the seam)
GROUND_REMNANT = 6.0  # TSDF voxels: pieces left by the cut that rise no higher above the ground go with it
FRAMED_LATTICE = 48  # lattice points a side where what every camera frames is sampled
FRAMED_REACH = 3.0  # the lattice reaches this many radii of the sphere every camera sees whole from the focus
RANSAC_ITERATIONS = 1000
PLANES = 3  # the largest planes of the mesh tried as the ground, one after the other


def subject_cylinder(cameras: Cameras) -> tuple[np.ndarray, float, np.ndarray]:
    """The upright cylinder the subject stands in: (3,) the cameras' focus, the radius of the largest sphere there
    that every camera sees whole (`bounds_from_cameras`), and (3,) its axis, the cameras' up (`Cameras.up`)."""
    sphere = bounds_from_cameras(cameras)[0]
    return sphere.mean(0), 0.5 * float(sphere[1, 0] - sphere[0, 0]), cameras.up


def off_axis(points: np.ndarray, focus: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(N,) distances of world points (N, 3) from the line through `focus` (3,) along the unit `up` (3,)."""
    offset = points - focus
    return np.linalg.norm(offset - np.outer(offset @ up, up), axis=1)


def subject_box(cameras: Cameras) -> np.ndarray:
    """(2, 3) world box of what every camera frames of the `subject_cylinder`: the points of a lattice
    (FRAMED_LATTICE a side, FRAMED_REACH radii from the focus) in the cylinder that project inside every image, in
    front of the camera, with the sphere's own box."""
    focus, radius, up = subject_cylinder(cameras)
    axis = np.linspace(-1.0, 1.0, FRAMED_LATTICE) * FRAMED_REACH * radius
    points = focus + np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    points = points[off_axis(points, focus, up) <= radius]
    framed = np.ones(len(points), bool)
    for i in range(len(cameras)):
        framed &= pixels_seen(cameras, i, points, tuple(cameras.sizes[i][::-1]))[1]
    inside = np.concatenate([points[framed], [focus - radius, focus + radius]])
    return np.stack([inside.min(0), inside.max(0)])


def in_cylinder(mesh: o3d.geometry.TriangleMesh, cameras: Cameras) -> o3d.geometry.TriangleMesh:
    """Remove the vertices of `mesh` outside the `subject_cylinder` (its box's corners hold the room and the
    ground's far edges). Modifies and returns `mesh`."""
    focus, radius, up = subject_cylinder(cameras)
    mesh.remove_vertices_by_mask(off_axis(np.asarray(mesh.vertices), focus, up) > radius)
    return mesh


def render_scale(cameras: Cameras, voxel: float) -> float:
    """The image scale (at most 1) at which a TSDF voxel of `voxel` world units at the cameras' focus spans
    PIXELS_PER_VOXEL pixels in the median view: finer renders add time and no detail to the fused surface."""
    return float(np.clip(PIXELS_PER_VOXEL * focus_pixel(cameras, subject_cylinder(cameras)[0]) / voxel, 1 / 8, 1.0))


def find_ground(mesh: o3d.geometry.TriangleMesh, cameras: Cameras, voxel: float) -> np.ndarray | None:
    """The ground the subject stands on, as (4,) plane coefficients (unit normal toward the cameras, offset: a
    point x lies above it by `x @ plane[:3] + plane[3]`), or None: of the PLANES largest planes in the mesh's
    vertices (RANSAC, one after the other, `voxel` world units thick), the first that holds GROUND_SHARE of them and
    that the cameras look down on (`looked_down_on`)."""
    points = np.asarray(mesh.vertices)
    focus = subject_cylinder(cameras)[0]
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
    """Remove what lies below the (4,) ground `plane` (`find_ground`) or within GROUND_MARGIN voxels above it, and
    the pieces of ground that this leaves (connected components that rise no more than GROUND_REMNANT voxels above
    the plane: where the fused floor bends, under a reflection or at the edge of a view). Modifies and returns
    `mesh`."""
    mesh.remove_vertices_by_mask(np.asarray(mesh.vertices) @ plane[:3] + plane[3] < GROUND_MARGIN * voxel)
    return drop_components(mesh, np.asarray(mesh.vertices) @ plane[:3] + plane[3] <= GROUND_REMNANT * voxel)


def drop_components(mesh: o3d.geometry.TriangleMesh, near: np.ndarray) -> o3d.geometry.TriangleMesh:
    """Remove the connected components of `mesh` whose vertices are all `near` ((V,) bool). Modifies and returns
    `mesh`."""
    if not len(mesh.triangles):
        return mesh
    clusters = np.asarray(mesh.cluster_connected_triangles()[0])
    reaches = np.zeros(clusters.max() + 1, bool)
    np.logical_or.at(reaches, clusters, ~near[np.asarray(mesh.triangles)].all(1))
    mesh.remove_triangles_by_mask(~reaches[clusters])
    mesh.remove_unreferenced_vertices()
    return mesh
