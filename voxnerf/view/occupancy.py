"""An open3d view of the learned occupancy: occupied voxels colored by opacity or learned color, camera frusta.

`show` opens a window ('[' shows occupied bricks, ']' occupied cells). `screenshot` renders the same scene
without a display: open3d's legacy Visualizer falls back to EGL offscreen rendering with Mesa when no display is
found (Debian packages libegl1, libegl-mesa0 and libgl1-mesa-dri; `make system-deps` installs them).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import open3d as o3d
import torch

from voxnerf.data.cameras import Cameras
from voxnerf.errors import VoxnerfError
from voxnerf.export.query import head_on_colors
from voxnerf.fields.bricks import BRICK
from voxnerf.run.load import Run

VOXELS = ("cells", "bricks")  # what a voxel of the view is: an occupancy cell or a brick of 8^3 of them
COLORINGS = ("density", "rgb")
BACKGROUND = (1.0, 1.0, 1.0)
FRUSTUM_COLOR = (0.35, 0.35, 0.35)
VIEW_TURN = np.radians(25.0)  # the default view's turn away from the first camera
FRUSTUM_DEPTH_PER_DISTANCE = 0.12  # each camera's frustum is this deep, as a fraction of its distance to the center
AXES = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], np.float32)
# viridis at 0, 0.25, 0.5, 0.75, 1
_VIRIDIS = np.array([[0.267, 0.005, 0.329], [0.229, 0.322, 0.546], [0.128, 0.567, 0.551],
                     [0.369, 0.789, 0.383], [0.993, 0.906, 0.144]])


def colormap(values: np.ndarray) -> np.ndarray:
    """(N,) values in [0, 1] -> (N, 3) viridis colors (piecewise linear through five stops)."""
    stops = np.linspace(0, 1, len(_VIRIDIS))
    v = np.clip(values, 0, 1)
    return np.stack([np.interp(v, stops, _VIRIDIS[:, c]) for c in range(3)], -1)


def occupied_cells(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Integer coordinates (K, 3) of the occupied cells and their opacity score (K,) (the estimator's running max
    of one sample step's opacity); in a contracted or NDC space, only the cells the space can show
    (`Space.displayable`)."""
    occupancy = run.model.estimator
    shown = occupancy.occupied & run.model.space.displayable(occupancy.bricks.cell_centers())
    return occupancy.bricks.slot_vertices()[shown].cpu().numpy(), occupancy.score[shown].cpu().numpy()


def cell_colors(run: Run, cells: np.ndarray, alpha: np.ndarray, coloring: str) -> np.ndarray:
    """(K, 3) colors of cells (K, 3): their opacity alpha (K,) through viridis, or the learned color at their
    centers averaged over the six axis view directions."""
    if coloring == "density":
        return colormap(alpha)
    centers = grid_to_unit(run, (cells + 0.5) * run.model.estimator.cell_size - 1)
    colors = [head_on_colors(run.model, centers, np.broadcast_to(-d, centers.shape)) for d in AXES]
    return np.mean(colors, axis=0)


def grid_to_unit(run: Run, g: np.ndarray) -> np.ndarray:
    """Grid coordinates (N, 3) -> unit-box points (N, 3) through the run's space."""
    return run.model.space.from_grid(torch.as_tensor(g, dtype=torch.float64)).numpy()


def _keys(cells: np.ndarray, span: int) -> np.ndarray:
    """(K,) int64 distinct keys of cube coordinates (K, 3) in [-1, span - 2]."""
    c = cells + 1
    return (c[:, 0] * span + c[:, 1]) * span + c[:, 2]


def cube_faces(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The faces of a set of unit cubes that no other cube of the set covers (the visible hull).

    Args:
        cells: (K, 3) int64 distinct cube coordinates (cube c spans c to c + 1).
    Returns:
        quads (Q, 4, 3) int64 corner coordinates, counter-clockwise seen from outside, and owner (Q,) the index of
        each quad's cube.
    """
    span = int(cells.max(initial=0)) + 3
    keys = np.sort(_keys(cells, span))
    quads, owners = [], []
    for axis in range(3):
        u, v = (axis + 1) % 3, (axis + 2) % 3
        for sign in (1, -1):
            step = np.zeros(3, np.int64)
            step[axis] = sign
            neighbor = _keys(cells + step, span)
            where = np.searchsorted(keys, neighbor).clip(max=len(keys) - 1)
            exposed = np.flatnonzero(keys[where] != neighbor)
            corner = np.zeros((4, 3), np.int64)
            corner[:, axis] = 1 if sign > 0 else 0
            order = [(0, 0), (1, 0), (1, 1), (0, 1)] if sign > 0 else [(0, 0), (0, 1), (1, 1), (1, 0)]
            corner[:, u], corner[:, v] = zip(*order)
            quads.append(cells[exposed, None, :] + corner)
            owners.append(exposed)
    return np.concatenate(quads), np.concatenate(owners)


def voxel_mesh(run: Run, coloring: str = "density", voxels: str = "cells") -> o3d.geometry.TriangleMesh:
    """The occupied cells (or the bricks holding any) as a lit mesh of cube faces in world units.

    Only faces between an occupied and an empty cube are drawn. Bricks take the mean color of their cells.
    """
    if coloring not in COLORINGS:
        raise VoxnerfError(f"--color {coloring}: expected one of {', '.join(COLORINGS)}")
    if voxels not in VOXELS:
        raise VoxnerfError(f"--voxels {voxels}: expected one of {', '.join(VOXELS)}")
    cells, alpha = occupied_cells(run)
    colors = cell_colors(run, cells, alpha, coloring)
    size = run.model.estimator.cell_size
    if voxels == "bricks":
        cells, owner = np.unique(cells // BRICK, axis=0, return_inverse=True)
        owner = owner.reshape(-1)
        colors = np.stack([np.bincount(owner, colors[:, c]) for c in range(3)], -1) / np.bincount(owner)[:, None]
        size *= BRICK
    quads, owner = cube_faces(cells)
    vertices = run.to_world(grid_to_unit(run, quads.reshape(-1, 3) * size - 1.0))
    first = 4 * np.arange(len(quads))[:, None]
    triangles = np.concatenate([first + [0, 1, 2], first + [0, 2, 3]])
    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(vertices), o3d.utility.Vector3iVector(triangles))
    mesh.vertex_colors = o3d.utility.Vector3dVector(np.repeat(colors[owner], 4, axis=0))
    mesh.compute_vertex_normals()
    return mesh


def camera_frusta(cameras: Cameras, center: np.ndarray) -> o3d.geometry.LineSet:
    """One LineSet drawing every camera's frustum (world units), sized relative to its distance to `center`."""
    frusta = o3d.geometry.LineSet()
    for i in range(len(cameras)):
        w, h = (int(s) for s in cameras.sizes[i])
        fx, fy, cx, cy = cameras.intrinsics[i]
        k = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
        w2c = np.linalg.inv(np.vstack([cameras.c2w[i], [0.0, 0.0, 0.0, 1.0]]))
        depth = FRUSTUM_DEPTH_PER_DISTANCE * np.linalg.norm(cameras.centers[i] - center)
        frusta += o3d.geometry.LineSet.create_camera_visualization(w, h, k, w2c, depth)
    return frusta.paint_uniform_color(FRUSTUM_COLOR)


def viewpoint(run: Run, cameras: Cameras | None) -> dict:
    """Where the default view looks from: at the scene center, from the first camera turned by VIEW_TURN about
    its image's up axis (so that its own frustum is off-center), with that camera's up.

    Returns:
        dict of open3d ViewControl settings: lookat, front (toward the viewer), up.
    """
    center = np.asarray(run.record.bbox, np.float64).mean(0)
    if cameras is None or len(cameras) == 0:
        return {"lookat": center, "front": np.array([1.0, -1.0, 0.8]) / np.sqrt(2.64), "up": np.array([0.0, 0, 1])}
    back, right, up = -cameras.c2w[0][:, 2], cameras.c2w[0][:, 0], -cameras.c2w[0][:, 1]
    front = np.cos(VIEW_TURN) * back + np.sin(VIEW_TURN) * right
    return {"lookat": center, "front": front, "up": up}


def _apply_view(vis: o3d.visualization.Visualizer, view: dict, zoom: float) -> None:
    ctr = vis.get_view_control()
    ctr.set_lookat(view["lookat"])
    ctr.set_front(view["front"])
    ctr.set_up(view["up"])
    ctr.set_zoom(zoom)
    opt = vis.get_render_option()
    opt.background_color = np.asarray(BACKGROUND)


def screenshot(geometries: list, out: str | Path, view: dict, width: int = 800, height: int = 600,
               zoom: float = 0.3) -> np.ndarray:
    """Render open3d geometries offscreen (EGL when there is no display) and write a PNG.

    Args:
        geometries: open3d geometries, world units.
        out: the PNG to write.
        view: lookat, front, up (see `viewpoint`).
        width, height: image size in pixels.
        zoom: open3d zoom (1 fits every geometry, smaller is closer).
    Returns:
        (height, width, 3) uint8 image.
    """
    vis = o3d.visualization.Visualizer()
    if not vis.create_window(window_name="voxnerf", width=width, height=height, visible=False):
        raise VoxnerfError(f"{out}: no offscreen renderer (open3d needs EGL: run `make system-deps` or "
                           f"apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri)")
    try:
        for g in geometries:
            vis.add_geometry(g)
        _apply_view(vis, view, zoom)
        image = np.asarray(vis.capture_screen_float_buffer(do_render=True))
    finally:
        vis.destroy_window()
    image = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    iio.imwrite(out, image)
    return image


def has_display() -> bool:
    """Whether a window can be shown: on Linux, an X11 or Wayland display; elsewhere assumed."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def show(run: Run, cameras: Cameras | None, coloring: str = "density", voxels: str = "cells",
         zoom: float = 0.3) -> None:
    """Open a window with the occupancy and the camera frusta; '[' shows bricks, ']' cells."""
    if not has_display():
        raise VoxnerfError("voxnerf view: no display found (use --screenshot OUT.png to render without one)")
    grids = {kind: None for kind in VOXELS}
    state = {"voxels": voxels}

    def grid_of(kind: str) -> o3d.geometry.TriangleMesh:
        if grids[kind] is None:
            grids[kind] = voxel_mesh(run, coloring, kind)
        return grids[kind]

    def switch(vis, kind: str) -> bool:
        if kind != state["voxels"]:
            vis.remove_geometry(grid_of(state["voxels"]), reset_bounding_box=False)
            vis.add_geometry(grid_of(kind), reset_bounding_box=False)
            state["voxels"] = kind
        return True

    vis = o3d.visualization.VisualizerWithKeyCallback()
    vis.create_window(window_name=f"voxnerf: {run.path}  ('[' bricks, ']' cells)")
    vis.add_geometry(grid_of(voxels))
    if cameras is not None:
        vis.add_geometry(camera_frusta(cameras, viewpoint(run, cameras)["lookat"]))
    vis.register_key_callback(ord("["), lambda v: switch(v, "bricks"))
    vis.register_key_callback(ord("]"), lambda v: switch(v, "cells"))
    _apply_view(vis, viewpoint(run, cameras), zoom)
    vis.run()
    vis.destroy_window()
