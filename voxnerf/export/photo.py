"""Colors of surface points from the training photos: the robust, visibility-weighted color of the views that see
each point.

Training view i sees a point when the point projects inside its image, in front of the camera, onto a pixel whose
depth (a depth map of distances along the pixel rays: the mesh's, ray cast, or the run's rendered median depth)
lies within `tolerance` of the point's own distance, and the view faces the point (cosine between the outward
normal and the direction to the camera above MIN_COSINE). Each such view gives the photo's color there (bilinear,
premultiplied by the photo's alpha and divided by it again, so that transparent pixels do not darken an edge) with
the weight cos * focal / distance: the photo's pixels per unit length of the surface, so near, head-on views count
most. A point's color is the weighted median of its views' colors, channel by channel, which drops the specular
highlights and the misregistered edges that a mean would smear in. Points no view sees keep the field's color seen
head-on (`query.head_on_colors`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import open3d as o3d

from voxnerf.data.cameras import Cameras
from voxnerf.data.images import premultiplied
from voxnerf.data.rays import image_rays, project
from voxnerf.errors import VoxnerfError
from voxnerf.export.query import head_on_colors
from voxnerf.run.load import Run
from voxnerf.system.progress import track

COLORS = ("photos", "field")
MIN_COSINE = 0.1  # views more grazing than about 84 degrees are left out
MIN_ALPHA = 0.5  # photo pixels more transparent than this are not the object
DEPTH_TOLERANCE = 2.0  # grid cells: a point this close to a view's depth at its pixel is what the view shows
DEPTH_RELATIVE = 0.005  # ... plus this fraction of its distance (contracted runs: far cells are larger)

DepthMaps = Callable[[int], np.ndarray]  # training view index -> (H, W) distances along its pixel rays, 0 or inf: none


def bilinear(image: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Values (N, C) of an image (H, W, C) at pixel coordinates uv (N, 2) (centers at +0.5), edges clamped."""
    h, w = image.shape[:2]
    x, y = uv[:, 0] - 0.5, uv[:, 1] - 0.5
    x0, y0 = np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    xa, xb = np.clip(x0, 0, w - 1), np.clip(x0 + 1, 0, w - 1)
    ya, yb = np.clip(y0, 0, h - 1), np.clip(y0 + 1, 0, h - 1)
    top = image[ya, xa] * (1 - fx) + image[ya, xb] * fx
    bottom = image[yb, xa] * (1 - fx) + image[yb, xb] * fx
    return top * (1 - fy) + bottom * fy


def view_samples(cameras: Cameras, i: int, photo: np.ndarray, depth: np.ndarray, points: np.ndarray,
                 normals: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The colors that camera i's photo gives the points it sees.

    Args:
        cameras, i: the camera.
        photo: (H, W, 4) float32 premultiplied RGBA (`voxnerf.data.images.premultiplied`).
        depth: (H, W) distances along the pixel rays to what the view shows (0 or inf: nothing).
        points, normals: (N, 3) world points and outward unit normals.
        tolerance: world distance (plus DEPTH_RELATIVE times the point's) within which a point is the surface its
            pixel shows.
    Returns:
        seen (K,) int64 indices into points, colors (K, 3) float32 and weights (K,) float64 (cos * focal / dist).
    """
    uv, dist, in_front = project(cameras, i, points)
    w, h = cameras.sizes[i]
    col, row = np.floor(uv[:, 0]).astype(np.int64), np.floor(uv[:, 1]).astype(np.int64)
    inside = in_front & (col >= 0) & (col < w) & (row >= 0) & (row < h)
    seen = np.flatnonzero(inside)
    seen = seen[np.abs(depth[row[seen], col[seen]] - dist[seen]) <= tolerance + DEPTH_RELATIVE * dist[seen]]
    cosine = ((cameras.c2w[i][:, 3] - points[seen]) * normals[seen]).sum(1) / dist[seen]
    rgba = bilinear(photo, uv[seen])
    keep = (cosine > MIN_COSINE) & (rgba[:, 3] > MIN_ALPHA)
    focal = cameras.intrinsics[i, :2].mean()
    return seen[keep], rgba[keep, :3] / rgba[keep, 3:], cosine[keep] * focal / dist[seen][keep]


def weighted_median(groups: np.ndarray, values: np.ndarray, weights: np.ndarray,
                    count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-group weighted medians, channel by channel.

    Args:
        groups: (K,) int64 group of each sample, in [0, count).
        values: (K, C) samples.
        weights: (K,) positive weights.
        count: number of groups.
    Returns:
        medians (count, C) float32 (the lower weighted median: the first sample, by value, at which the group's
        cumulative weight reaches half its total; zero for empty groups) and has (count,) bool, groups with samples.
    """
    totals = np.bincount(groups, weights, minlength=count)
    before = np.cumsum(totals) - totals  # weight of the groups sorted ahead of each group
    out = np.zeros((count, values.shape[1]), np.float32)
    for c in range(values.shape[1]):
        order = np.argsort(groups + unit_interval(values[:, c]))  # by group, then value: one sort, not a lexsort
        g = groups[order]
        within = np.cumsum(weights[order]) - before[g]
        reached = np.flatnonzero(within >= 0.5 * totals[g])
        first = reached[np.flatnonzero(np.diff(g[reached], prepend=-1))]  # the first of each group's run
        out[g[first], c] = values[order[first], c]
    return out, totals > 0


def unit_interval(values: np.ndarray) -> np.ndarray:
    """(K,) float64 values mapped in order onto [0, 1) (an affine map; all zero when they are equal)."""
    v = values.astype(np.float64)
    if len(v) == 0:
        return v
    return (v - v.min()) / max(float(np.ptp(v)), 1e-300) * (1 - 1e-6)


def photo_colors(run: Run, points: np.ndarray, normals: np.ndarray, depth_maps: DepthMaps,
                 progress: bool = False, views: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The photos' colors of world surface points (see the module docstring).

    Args:
        run: the loaded run (its scene folder must still hold the training photos).
        points, normals: (N, 3) world points and outward unit normals.
        depth_maps: the depth map of each training view, by its index among the training cameras.
        progress: show a bar over the views.
        views: (K,) indices of the training views to color from (default all; `depth_maps` need only these).
    Returns:
        colors (N, 3) float32 (the field's head-on color where no view sees a point) and views (N,) int64, the
        number of views that see each point.
    """
    scene = run.scene()
    train = scene.split_indices("train")
    cameras = scene.cameras.subset(train)
    tolerance = DEPTH_TOLERANCE * run.model.estimator.cell_size / run.scale
    groups, colors, weights = [np.zeros(0, np.int64)], [np.zeros((0, 3), np.float32)], [np.zeros(0)]
    indices = range(len(cameras)) if views is None else views.tolist()
    for i in track(indices, "coloring from photos", "view", enabled=progress):
        photo = premultiplied(scene.rgba(train[i])).numpy()
        for part, found in zip((groups, colors, weights),
                               view_samples(cameras, i, photo, depth_maps(i), points, normals, tolerance)):
            part.append(found)
    groups, colors, weights = (np.concatenate(p) for p in (groups, colors, weights))
    median, seen = weighted_median(groups, colors, weights, len(points))
    if not seen.all():
        median[~seen] = field_colors(run, points[~seen], normals[~seen])
    return median, np.bincount(groups, minlength=len(points))


def mesh_depth_maps(mesh: o3d.geometry.TriangleMesh, cameras: Cameras) -> DepthMaps:
    """The depth maps of a world mesh seen by the cameras (open3d ray casting; inf where a ray misses)."""
    caster = o3d.t.geometry.RaycastingScene()
    caster.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))

    def depth(i: int) -> np.ndarray:
        rays = np.concatenate([t.numpy() for t in image_rays(cameras, i)], axis=1)
        hits = caster.cast_rays(o3d.core.Tensor(rays.astype(np.float32)))["t_hit"].numpy()
        w, h = cameras.sizes[i]
        return hits.reshape(h, w)

    return depth


def check_colors(colors: str) -> None:
    """VoxnerfError naming --colors unless `colors` is one of COLORS."""
    if colors not in COLORS:
        raise VoxnerfError(f"--colors {colors}: expected one of {', '.join(COLORS)}")


def field_colors(run: Run, points: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """The field's colors (N, 3) float32 of world points (N, 3) seen head-on along their outward normals (N, 3)."""
    return head_on_colors(run.model, run.to_unit(points), normals)


def surface_colors(run: Run, points: np.ndarray, normals: np.ndarray, depth_maps: DepthMaps, colors: str = "photos",
                   progress: bool = False) -> np.ndarray:
    """Colors (N, 3) float32 of world surface points (N, 3) with outward normals (N, 3): from the photos
    (`photo_colors`) or, for `colors` "field", the field's head-on colors."""
    if colors == "field":
        return field_colors(run, points, normals)
    return photo_colors(run, points, normals, depth_maps, progress)[0]


def color_mesh(run: Run, mesh: o3d.geometry.TriangleMesh, colors: str = "photos",
               progress: bool = False) -> o3d.geometry.TriangleMesh:
    """Set a world mesh's vertex colors (see `surface_colors`; the mesh itself hides what it occludes). Modifies
    and returns `mesh`."""
    if len(mesh.vertices):
        mesh.compute_vertex_normals()
        found = surface_colors(run, np.asarray(mesh.vertices), np.asarray(mesh.vertex_normals),
                               mesh_depth_maps(mesh, run.training_cameras()), colors, progress)
        mesh.vertex_colors = o3d.utility.Vector3dVector(found.astype(np.float64))
    return mesh
