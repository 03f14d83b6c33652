"""Density meshes: the opacity iso-surface over the occupied blocks only, then smoothing, cropping and cleanup.

The surface is where the opacity alpha = 1 - exp(-sigma * delta) of one working voxel (delta = the grid's cell
size) equals the iso value. alpha is monotonic in sigma, so this is the surface log sigma = log(-log(1 - iso) /
delta), and marching cubes runs on log sigma: across a sharp surface alpha jumps from 0 to 1 within a cell and
linear interpolation along cube edges would put every crossing near an edge's middle (terraces), while log sigma
changes about linearly there. Samples lie on a lattice of S intervals per axis over the unit box (sample i at
-1 + i * 2 / S, i = 0..S); with S = R they are the grid's vertices. The lattice is cut into
blocks of BLOCK cubes per axis; a block is sampled only if an occupied cell reaches into one of its cubes, and
its samples include the first sample of the next block (a one-sample overlap), so the block meshes share their
boundary vertices exactly and are welded into one mesh. Memory is O(BLOCK^3), never O(S^3).

By default the lattice has FINER samples per grid cell (S = FINER * R, up to FINE_LATTICE; `default_samples`):
the field between the grid's vertices is
trilinear, and marching cubes at S = R cuts each cell's curved piece of surface with a few flat chords, whose
neighbours meet at sharp angles; at S = 2R it follows the trilinear surface itself. One step of neighbour
averaging (each vertex moved to the mean of its neighbours, open3d `filter_smooth_simple`) then takes out what is
left of the density's cell-scale noise: at S = 2R a step moves a vertex by less than its edges' length (half a
cell), so thin parts keep their width. On lego_100 and ethiopianHead_8 this halved the roughness (mean angle
between adjacent faces) and kept the silhouette IoU and the color PSNR against S = R with five Taubin iterations,
the earlier default, at 3.6-3.7x the faces (benchmarks/log/2026-11-25-mesh-export.md). Taubin iterations and a
Gaussian blur of log sigma before marching were measured and not kept for the dense mesh: Taubin hardly lowers
the roughness (and raises it on a clean sphere), the blur thins lego's thin parts (same log). A light mesh (`light`)
is marched on sigma blurred by a fraction of a cell after clipping (`lattice_block`), which keeps them. A grid of
256^3 cells (a GPU run) is meshed on its own vertices: on lego at 200 px its mesh there has 18 degrees of roughness
and IoU 0.990, where twice the samples gave 11 degrees at 4x the faces (2.4 M), 3x the time and 4.3 GB.
"""

from __future__ import annotations

import numpy as np
import open3d as o3d
from scipy import ndimage
from skimage import measure

from voxnerf.data.cameras import Cameras
from voxnerf.data.rays import image_rays
from voxnerf.export.depth import spread_views
from voxnerf.export.query import LOG_EMPTY, log_density, opacity_to_density
from voxnerf.render.model import Model
from voxnerf.run.load import Run
from voxnerf.system.progress import track

BLOCK = 32
FINER = 2  # lattice samples per grid cell and axis ...
FINE_LATTICE = 256  # ... up to this many samples a side (`default_samples`)
SMOOTHING = 1  # steps of neighbour averaging of the marched mesh
SEEN_VIEWS = 25  # cameras (evenly spread) whose rays decide which components are seen
CEILING = 2.0  # a blurred density is first clipped at this many times the iso value's (`lattice_block`)
BLUR_TRUNCATE = 2.5  # standard deviations the blur reaches (and the margin sampled around a block)
WELD_PER_SAMPLE = 1 << 12  # vertices closer than 1/4096 sample spacing are welded


def sample_range(lo: float, hi: float, samples: int) -> tuple[int, int]:
    """First and last lattice index (`samples` intervals over [-1, 1]) inside the unit interval [lo, hi]."""
    h = 2.0 / samples
    first = max(0, int(np.ceil((lo + 1) / h - 1e-9)))
    last = min(samples, int(np.floor((hi + 1) / h + 1e-9)))
    return first, last


def occupied_blocks(model: Model, samples: int, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Blocks of the lattice that an occupied cell reaches into.

    Args:
        model: the model (its estimator's occupancy).
        samples: S, lattice intervals per axis over the unit box.
        first, last: (3,) int lattice index range of the region, inclusive.
    Returns:
        (K, 3) int64 block coordinates; block k covers cubes first + k * BLOCK ... first + (k + 1) * BLOCK - 1.
    """
    occupancy = model.estimator
    h = 2.0 / samples
    cells = occupancy.occupied_cells().cpu().numpy()
    s_lo = np.ceil(cells * occupancy.cell_size / h - 1e-9).astype(np.int64)  # first sample inside each (closed) cell
    s_hi = np.floor((cells + 1) * occupancy.cell_size / h + 1e-9).astype(np.int64)  # last one
    keep = np.all(s_lo <= s_hi, axis=1)
    n_blocks = np.maximum((last - first + BLOCK - 1) // BLOCK, 1)
    k_lo = np.clip((s_lo[keep] - 1 - first) // BLOCK, 0, n_blocks - 1)  # cubes touching a cell's samples
    k_hi = np.clip((s_hi[keep] - first) // BLOCK, 0, n_blocks - 1)
    inside = np.all((s_hi[keep] >= first) & (s_lo[keep] <= last), axis=1)
    k_lo, k_hi = k_lo[inside], k_hi[inside]
    mark = np.zeros(n_blocks, dtype=bool)
    span = int((k_hi - k_lo).max(initial=0)) + 1
    for offset in np.ndindex(span, span, span):
        k = np.minimum(k_lo + offset, k_hi)
        mark[k[:, 0], k[:, 1], k[:, 2]] = True
    return np.argwhere(mark)


def weld(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices at the same lattice position (block seams) and drop faces that collapse.

    Args:
        vertices: (V, 3) float64 positions in lattice-index units.
        faces: (F, 3) int vertex indices.
    Returns:
        vertices (V', 3) and faces (F', 3).
    """
    keys = np.round(vertices * WELD_PER_SAMPLE).astype(np.int64)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    faces = inverse.reshape(-1)[faces]
    good = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    return vertices[first], faces[good]


def lattice_block(model: Model, start: np.ndarray, stop: np.ndarray, samples: int, blur: float,
                  ceiling: float) -> np.ndarray:
    """The values marching cubes runs on at the lattice samples start..stop (inclusive, (3,) int each) of `samples`
    intervals per axis: log sigma, or with a `blur` (standard deviation in samples) sigma clipped at `ceiling`
    and blurred by a Gaussian.

    The blur acts on sigma itself, not on log sigma: a thin, dense part keeps its mass (blurring log sigma
    averages it with the empty space's LOG_EMPTY and erases it). sigma is clipped at `ceiling` first (CEILING
    times the iso value's): a sharp step from 0 to the ceiling, blurred, crosses the iso value half way up, where
    the step was and where the blurred step is nearly straight (so marching cubes interpolates sigma itself there,
    not its log, which bends), and a part a fraction of a cell thin still reaches it (a solid's density far above the iso value, unclipped, would push the
    surface outward by the blur's width). The block is sampled with a margin of BLUR_TRUNCATE * blur samples
    (within the unit box) so that its edges are blurred as the whole lattice would be.

    Returns:
        (n0, n1, n2) float32 log sigma, or with a blur float64 sigma, n = stop - start + 1.
    """
    margin = int(np.ceil(BLUR_TRUNCATE * blur))
    lo, hi = np.maximum(start - margin, 0), np.minimum(stop + margin, samples)
    axes = [np.arange(a, b + 1) for a, b in zip(lo, hi)]
    index = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    volume = log_density(model, -1 + index * (2.0 / samples)).reshape([len(a) for a in axes])
    if blur > 0:
        density = np.minimum(np.exp(volume.astype(np.float64)), ceiling)
        volume = ndimage.gaussian_filter(density, blur, mode="nearest", truncate=BLUR_TRUNCATE)
    return volume[tuple(slice(a - b, c - b + 1) for a, b, c in zip(start, lo, stop))]


def march_blocks(model: Model, box_unit: np.ndarray, samples: int, iso: float = 0.5, blur: float = 0.0,
                 progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The iso-surface alpha = iso of the field inside a unit-box region, block by block.

    Args:
        model: the field and its occupancy.
        box_unit: (2, 3) unit-box min and max corners of the region.
        samples: S, lattice intervals per axis over the whole unit box.
        iso: iso value of the opacity, in (0, 1).
        blur: standard deviation, in lattice samples, of a Gaussian blur of the density (`lattice_block`).
        progress: show a bar over the blocks.
    Returns:
        vertices (V, 3) float64 unit-box positions and faces (F, 3) int64, wound so normals point outward
        (toward lower opacity).
    """
    sigma = opacity_to_density(iso, model.estimator.cell_size)
    level = sigma if blur > 0 else float(np.log(sigma))  # see `lattice_block`
    ranges = [sample_range(lo, hi, samples) for lo, hi in zip(*box_unit)]
    first, last = np.array([r[0] for r in ranges]), np.array([r[1] for r in ranges])
    if np.any(last <= first):
        return np.zeros((0, 3)), np.zeros((0, 3), np.int64)
    verts, faces, count = [], [], 0
    for block in track(occupied_blocks(model, samples, first, last), "marching cubes", "block", enabled=progress):
        start = first + block * BLOCK
        stop = np.minimum(start + BLOCK, last)
        if np.any(stop - start < 1):
            continue
        volume = lattice_block(model, start, stop, samples, blur, CEILING * sigma)
        if volume.max() < level or volume.min() > level:
            continue
        v, f, _, _ = measure.marching_cubes(volume, level, gradient_direction="ascent")
        verts.append(v + start)
        faces.append(f + count)
        count += len(v)
    if not verts:
        return np.zeros((0, 3)), np.zeros((0, 3), np.int64)
    v, f = weld(np.concatenate(verts).astype(np.float64), np.concatenate(faces).astype(np.int64))
    return -1 + v * (2.0 / samples), f


def default_samples(resolution: int) -> int:
    """Lattice intervals per axis for a grid of `resolution` cells: FINER times as many, up to FINE_LATTICE (never
    fewer than the grid's)."""
    return max(resolution, min(FINER * resolution, FINE_LATTICE))


def field_mesh(run: Run, box_world: np.ndarray, samples: int | None = None, iso: float = 0.5,
               smoothing: int = SMOOTHING, blur: float = 0.0, progress: bool = False) -> o3d.geometry.TriangleMesh:
    """The density mesh of a run in world units, with outward vertex normals (no colors: see `photo.color_mesh`).

    Args:
        run: the loaded run.
        box_world: (2, 3) world region to mesh (see `box.crop_box`).
        samples: lattice intervals per axis over the unit box; default `default_samples` of the occupancy's.
        iso: opacity iso value.
        smoothing: steps of neighbour averaging of the mesh (see the module docstring); 0: none.
        blur: standard deviation, in grid cells, of a Gaussian blur of the density before marching (0: none).
        progress: show progress bars.
    """
    samples = samples or default_samples(run.model.estimator.resolution)
    blur_samples = blur * samples * run.model.estimator.cell_size / 2
    verts, faces = march_blocks(run.model, run.to_unit(box_world), samples, iso, blur_samples, progress)
    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(run.to_world(verts)),
                                     o3d.utility.Vector3iVector(faces))
    if smoothing and len(faces):
        mesh = mesh.filter_smooth_simple(number_of_iterations=smoothing)
    mesh.compute_vertex_normals()
    return mesh


def clean_mesh(mesh: o3d.geometry.TriangleMesh, min_component: float = 0.05) -> o3d.geometry.TriangleMesh:
    """Drop connected components with fewer than `min_component` times the largest's triangles. Modifies and
    returns `mesh`, with vertex normals."""
    if len(mesh.triangles) and min_component > 0:
        clusters, sizes, _ = mesh.cluster_connected_triangles()
        sizes = np.asarray(sizes)
        small = sizes[np.asarray(clusters)] < min_component * sizes.max()
        mesh.remove_triangles_by_mask(small)
        mesh.remove_unreferenced_vertices()
    mesh.compute_vertex_normals()
    return mesh


def seen_components(mesh: o3d.geometry.TriangleMesh, cameras: Cameras, views: int = SEEN_VIEWS) -> np.ndarray:
    """(F,) bool over the mesh's triangles: those of connected components that some pixel ray of the cameras
    (world units, up to `views` of them, evenly spread) meets first."""
    components = np.asarray(mesh.cluster_connected_triangles()[0])
    caster = o3d.t.geometry.RaycastingScene()
    caster.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    seen = np.zeros(components.max(initial=-1) + 1, dtype=bool)
    for i in spread_views(len(cameras), views):
        rays = np.concatenate([t.numpy() for t in image_rays(cameras, i)], axis=1)
        hit = caster.cast_rays(o3d.core.Tensor(rays.astype(np.float32)))["primitive_ids"].numpy()
        seen[components[hit[hit != caster.INVALID_ID]]] = True
    return seen[components]


def drop_hidden(mesh: o3d.geometry.TriangleMesh, cameras: Cameras) -> o3d.geometry.TriangleMesh:
    """Remove the connected components that no camera sees (surfaces inside others, e.g. around the soft interior
    density of a trained object). Modifies and returns `mesh`."""
    if len(mesh.triangles):
        mesh.remove_triangles_by_mask(~seen_components(mesh, cameras))
        mesh.remove_unreferenced_vertices()
    return mesh


def crop(geometry, box_world: np.ndarray):
    """The part of an open3d mesh or point cloud inside the world box (2, 3)."""
    return geometry.crop(o3d.geometry.AxisAlignedBoundingBox(box_world[0], box_world[1]))

