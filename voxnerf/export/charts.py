"""UV charts that follow the surface: xatlas cuts a light mesh into charts, flattens and packs them, and every texel
a face covers is found by rasterizing the faces in the texture.

xatlas grows charts over faces of similar normals and cuts them along creases, so a chart is a piece of the
surface that a person recognises (and can paint), its texels keep the surface's proportions, and neighbouring
points of the surface are neighbouring texels (a coarse mipmap blends nearby colors). Charts are packed PADDING
texels apart, so a viewer's bilinear filter, which reads the texels within one texel of a UV, never reads another
chart's; the texels around each chart are filled with the nearest chart texel's color (`pad`), so the filter and
the mipmaps read the chart's own colors at its edges.

UVs follow glTF's image convention: u to the right, v downward, (0, 0) the texture's top-left corner, texel (row
r, column c) centered at ((c + 0.5) / W, (r + 0.5) / H).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xatlas
from scipy import ndimage

PADDING = 4  # texels between charts as xatlas packs them (at least 3 once the atlas is fitted to the texture)


@dataclass
class Charts:
    """A mesh cut into charts and laid out in a texture.

    Attributes:
        source: (V',) int64 index of each chart vertex's vertex in the input mesh (seam vertices are repeated).
        faces: (F, 3) int64 chart vertex indices, the input faces in the same order.
        uv: (V', 2) float64 texture coordinates in [0, 1] (glTF convention, see the module docstring).
        size: (width, height) of the texture in texels.
    """

    source: np.ndarray
    faces: np.ndarray
    uv: np.ndarray
    size: tuple[int, int]


def chart_mesh(vertices: np.ndarray, faces: np.ndarray, size: int, texels_per_unit: float = 0.0) -> Charts:
    """xatlas's charts of a mesh packed into one texture at most size x size texels: with `texels_per_unit` (texels
    per world unit of the surface) a texture as large as that density needs, else (0) one of size x size.

    Charts grow in one pass (xatlas's `max_iterations` 0: its further passes, which move chart borders, took 6x the
    time on a 100,000-face head for the same number of charts). xatlas may pack them into a somewhat larger square
    than asked (up to 1.3x seen); the UVs are fractions of the atlas, so the texture is then made smaller in
    proportion, and the padding with it.

    Args:
        vertices: (V, 3) positions.
        faces: (F, 3) vertex indices.
        size: largest texture width and height in texels.
        texels_per_unit: texels per world unit (0: xatlas's, for a size x size texture).
    """
    atlas = xatlas.Atlas()
    atlas.add_mesh(vertices.astype(np.float32), faces.astype(np.uint32))
    chart = xatlas.ChartOptions()
    chart.max_iterations = 0
    pack = xatlas.PackOptions()
    pack.resolution, pack.padding, pack.bilinear = 0 if texels_per_unit else size, PADDING, True
    pack.texels_per_unit = texels_per_unit
    atlas.generate(chart, pack)
    source, chart_faces, uv = atlas[0]
    scale = min(1.0, size / max(atlas.width, atlas.height))
    fitted = (max(1, round(atlas.width * scale)), max(1, round(atlas.height * scale)))
    return Charts(source.astype(np.int64), chart_faces.astype(np.int64), uv.astype(np.float64), fitted)


def rasterize(uv: np.ndarray, faces: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The texels whose centers the faces cover in a texture, with each one's face and barycentric coordinates.

    Args:
        uv: (V', 2) texture coordinates in [0, 1] (glTF convention).
        faces: (F, 3) indices into uv.
        size: (width, height) of the texture.
    Returns:
        texels (T,) int64 row-major indices into the (height, width) texture, face (T,) int64 and barycentric
        (T, 3) float64 coordinates of the face's corners at the texel's center (a texel on an edge shared by two
        faces is listed once).
    """
    w, h = size
    corners = uv[faces] * (w, h)  # (F, 3, 2) in texel units: texel (r, c) centered at (c + 0.5, r + 0.5)
    lo = np.clip(np.floor(corners.min(1) - 0.5).astype(np.int64) + 1, 0, (w - 1, h - 1))  # first center inside
    hi = np.clip(np.floor(corners.max(1) - 0.5).astype(np.int64), -1, (w - 1, h - 1))
    span = np.maximum(hi - lo + 1, 0)
    count = span[:, 0] * span[:, 1]
    face = np.repeat(np.arange(len(faces)), count)
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)  # index within the face's box
    col, row = lo[face, 0] + k % span[face, 0], lo[face, 1] + k // span[face, 0]
    bary = barycentric(corners[face], np.stack([col + 0.5, row + 0.5], 1))
    inside = (bary >= -1e-9).all(1)
    texels = (row * w + col)[inside]
    texels, first = np.unique(texels, return_index=True)
    return texels, face[inside][first], bary[inside][first]


def barycentric(triangles: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(N, 3) barycentric coordinates of 2D points (N, 2) in triangles (N, 3, 2); degenerate triangles give -1s."""
    a, b, c = triangles[:, 0], triangles[:, 1], triangles[:, 2]
    ab, ac, ap = b - a, c - a, points - a
    det = ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0]
    ok = np.abs(det) > 1e-12
    safe = np.where(ok, det, 1.0)
    s = (ap[:, 0] * ac[:, 1] - ap[:, 1] * ac[:, 0]) / safe
    t = (ab[:, 0] * ap[:, 1] - ab[:, 1] * ap[:, 0]) / safe
    out = np.stack([1 - s - t, s, t], 1)
    out[~ok] = -1.0
    return out


def pad(image: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """The image (H, W, C) with every texel outside the charts (`filled` (H, W) bool false) given the color of the
    nearest chart texel (all of them, so that every mipmap level reads chart colors)."""
    if not filled.any():
        return image
    nearest = ndimage.distance_transform_edt(~filled, return_distances=False, return_indices=True)
    return image[nearest[0], nearest[1]]
