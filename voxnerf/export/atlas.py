"""UV atlases of meshes: one square cell of the texture per face, so that no two faces can share a texel.

The texture is cut into a grid of n x n-texel cells, one per face. A face maps affinely onto the right triangle in
the top-left half of its cell whose corners are the centers of the cell's corner texels (its first vertex at the
top-left texel, the second at the top-right, the third at the bottom-left). Every texel of the cell is baked
(`cell_texels`): those the triangle covers with their own point of the face, the rest with the nearest point of
the face's edge, so a viewer's bilinear filter, which reads the texels within one texel of a UV, only ever reads
the face's own colors. Charts of many faces, the alternative, fold over themselves on a density mesh's crumpled
surface (faces of one side joined through tilted slivers share texels,
benchmarks/log/2026-11-25-mesh-export.md) and take xatlas minutes to cut; a cell per face cannot fold and costs nothing to lay out, at the price of a texture that is
no use for painting by hand and of mipmaps that blend neighbouring cells. The faces are laid out in the Morton
order of their centers, so that cells side by side hold nearby faces and a coarse mipmap blends nearby colors.

Every face gets the same cell, so the cell is as large as the texture allows (at least MIN_CELL texels a side,
`faces_for_texture`: a mesh with more faces is decimated first). The texels each face gets then follow its size only
in that a small face's texels lie closer together on the surface: a near-uniform mesh (marching cubes, quadric
decimation) keeps the texel density near uniform.

UVs follow glTF's image convention: u to the right, v downward, (0, 0) the texture's top-left corner, texel (row
r, column c) centered at ((c + 0.5) / W, (r + 0.5) / H).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_CELL = 4  # texels a side of a face's cell: 10 of its 16 texels inside the face


@dataclass
class Atlas:
    """A mesh's faces laid out in the cells of a texture.

    Attributes:
        source: (3F,) int64 index of each atlas vertex's vertex in the input mesh (each face has its own three).
        faces: (F, 3) int64 atlas vertex indices, the input faces in the same order.
        uv: (3F, 2) float64 texture coordinates in [0, 1] (glTF convention, see the module docstring).
        cell: n, texels a side of a face's cell.
        origin: (F, 2) int64 column and row of the top-left texel of each face's cell.
        size: (width, height) of the texture in texels.
    """

    source: np.ndarray
    faces: np.ndarray
    uv: np.ndarray
    cell: int
    origin: np.ndarray
    size: tuple[int, int]


def faces_for_texture(max_size: int) -> int:
    """The most faces a texture of max_size x max_size texels holds at MIN_CELL texels a side per face."""
    return (max_size // MIN_CELL) ** 2


def morton_order(points: np.ndarray) -> np.ndarray:
    """(N,) int64 order of points (N, 3) along a Z-order (Morton) curve through their bounding box (10 bits an
    axis)."""
    lo, hi = points.min(0), points.max(0)
    q = ((points - lo) / np.maximum(hi - lo, 1e-12) * 1023).astype(np.int64)
    code = np.zeros(len(points), np.int64)
    for bit in range(10):
        for axis in range(3):
            code |= ((q[:, axis] >> bit) & 1) << (3 * bit + axis)
    return np.argsort(code, kind="stable")


def cell_layout(count: int, max_size: int) -> tuple[int, int, tuple[int, int]]:
    """The largest square cell that fits `count` cells into a texture at most max_size texels a side.

    Returns:
        n (texels a side of a cell), the cells per row and the texture (width, height), each side a power of two
        when max_size is one (WebGL 1 mipmaps no others); the height is the smallest that holds the rows.
    Raises:
        ValueError when the cells would be smaller than MIN_CELL (the mesh has more than `faces_for_texture`).
    """
    count = max(count, 1)
    n = max_size // int(np.ceil(np.sqrt(count)))
    while n >= MIN_CELL and (max_size // (n + 1)) ** 2 >= count:  # n already fits: max_size // n >= ceil(sqrt)
        n += 1
    if n < MIN_CELL:
        raise ValueError(f"{count} faces need cells below {MIN_CELL} texels in a {max_size}^2 texture")
    per_row = max_size // n
    width = 1 << int(np.ceil(np.log2(per_row * n)))
    height = 1 << int(np.ceil(np.log2(int(np.ceil(count / per_row)) * n)))
    return n, per_row, (min(width, max_size), min(height, max_size))


def face_atlas(vertices: np.ndarray, faces: np.ndarray, max_size: int) -> Atlas:
    """The atlas of a mesh with a cell for each face (see the module docstring).

    Args:
        vertices: (V, 3) positions (their Morton order lays out the cells).
        faces: (F, 3) vertex indices, F <= faces_for_texture(max_size).
        max_size: largest texture width and height (a power of two).
    """
    n, per_row, (w, h) = cell_layout(len(faces), max_size)
    slot = np.empty(len(faces), np.int64)
    slot[morton_order(vertices[faces].mean(1))] = np.arange(len(faces))
    origin = np.stack([slot % per_row, slot // per_row], 1) * n
    corners = np.array([[0.5, 0.5], [n - 0.5, 0.5], [0.5, n - 0.5]])  # texel units within the cell
    uv = (origin[:, None, :] + corners) / np.array([w, h])
    return Atlas(faces.reshape(-1).astype(np.int64), np.arange(3 * len(faces)).reshape(-1, 3), uv.reshape(-1, 2),
                 n, origin, (w, h))


def cell_barycentrics(n: int) -> np.ndarray:
    """(n * n, 3) barycentric coordinates, row-major over an n x n cell, of the face point each texel bakes: the
    point at its center when the triangle covers it, else the nearest point of the triangle's long edge."""
    t, s = np.mgrid[0:n, 0:n] / (n - 1)  # along the second (s) and third (t) vertex's legs
    s, t = s.ravel(), t.ravel()
    beyond = s + t > 1
    s_edge = np.clip((s - t + 1) / 2, 0, 1)  # the foot of the perpendicular on the edge s + t = 1
    s, t = np.where(beyond, s_edge, s), np.where(beyond, 1 - s_edge, t)
    return np.stack([1 - s - t, s, t], 1)


def cell_texels(atlas: Atlas) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every texel of every face's cell with the face point it bakes.

    Returns:
        texels (F * n * n,) int64 row-major indices into the (height, width) texture, face (F * n * n,) int64 and
        barycentric (F * n * n, 3) float64 coordinates of the face's vertices, grouped face by face.
    """
    n, (w, _) = atlas.cell, atlas.size
    rows, cols = np.mgrid[0:n, 0:n]
    within = (rows * w + cols).ravel()
    texels = (atlas.origin[:, 1] * w + atlas.origin[:, 0])[:, None] + within
    bary = np.tile(cell_barycentrics(n), (len(atlas.faces), 1))
    return texels.ravel(), np.repeat(np.arange(len(atlas.faces)), n * n), bary
