"""UV atlases of meshes: charts by box projection, packed into one rectangle by xatlas.

Each face goes to the box side its normal faces most (+x, -x, +y, ...); the faces of one side that share vertices
form a chart, flattened by projecting it onto that side's plane (no face is stretched by more than sqrt(3), and
no face of a chart flips: its normals all point to the same side). xatlas packs the charts (`Atlas.add_uv_mesh`).
xatlas's own charting follows the normals' noise on a density mesh: on ethiopianHead_8's mesh decimated to 30,000
faces it cut 6,400 charts in 88 s (2 cores), against 4.6 s to pack the 8,600 box charts of its 360,000 faces.

A vertex on a chart's boundary belongs to several charts, so the atlas splits it: an atlas mesh has more vertices
than its geometry, each with one UV. UVs follow glTF's image convention: u to the right, v downward, (0, 0) the
texture's top-left corner, texel (row r, column c) centered at ((c + 0.5) / W, (r + 0.5) / H).

The texel density follows the photos: TEXELS_PER_PIXEL texels per photo pixel at the surface's typical distance
(`photo_texel_density`), so a texture holds what the photos resolve; an atlas larger than the largest allowed size
is scaled down to it. Texture sides are powers of two (WebGL 1 mipmaps no others), the atlas stretched to fill them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xatlas

from voxnerf.data.cameras import Cameras

PADDING = 2  # empty texels around each chart (filled by `texture.pad_seams`)
TEXELS_PER_PIXEL = 1.0  # texels per photo pixel at the surface's median distance
PLANES = np.array([[1, 2], [2, 0], [0, 1]])  # the two axes kept when projecting along x, y, z


@dataclass
class Atlas:
    """A mesh cut into charts and flattened.

    Attributes:
        source: (V',) int64 index of each atlas vertex's vertex in the input mesh.
        faces: (F, 3) int64 atlas vertex indices, the input faces in the same order.
        uv: (V', 2) float64 texture coordinates in [0, 1] (glTF convention, see the module docstring).
        size: (width, height) of the texture in texels.
    """

    source: np.ndarray
    faces: np.ndarray
    uv: np.ndarray
    size: tuple[int, int]


def photo_texel_density(cameras: Cameras, points: np.ndarray) -> float:
    """Texels per world unit: TEXELS_PER_PIXEL times the median over the cameras (world units) of focal / (median
    distance from the camera to the surface points (N, 3))."""
    per_view = [cameras.intrinsics[i, :2].mean() / np.median(np.linalg.norm(points - cameras.c2w[i][:, 3], axis=1))
                for i in range(len(cameras))]
    return TEXELS_PER_PIXEL * float(np.median(per_view))


def box_charts(vertices: np.ndarray, faces: np.ndarray,
               normals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The box-projection charts of a mesh (see the module docstring).

    Args:
        vertices: (V, 3) positions.
        faces: (F, 3) vertex indices.
        normals: (F, 3) face normals.
    Returns:
        source (V',) int64 vertex of each chart vertex, faces (F, 3) int64 into the chart vertices and uv (V', 2)
        float64 chart coordinates in the units of `vertices`.
    """
    axis = np.abs(normals).argmax(1)
    side = 2 * axis + (normals[np.arange(len(faces)), axis] > 0)
    keys, chart_faces = np.unique(faces.astype(np.int64) * 6 + side[:, None], return_inverse=True)
    source = keys // 6
    planes = PLANES[keys % 6 // 2]
    return source, chart_faces.reshape(-1, 3), np.take_along_axis(vertices[source], planes, 1)


def uv_atlas(vertices: np.ndarray, faces: np.ndarray, normals: np.ndarray, texels_per_unit: float,
             max_size: int) -> Atlas:
    """The UV atlas of a mesh at about `texels_per_unit` texels per unit of length, at most `max_size` texels a side.

    Args:
        vertices: (V, 3) positions.
        faces: (F, 3) vertex indices.
        normals: (F, 3) face normals.
        texels_per_unit: wanted texel density.
        max_size: largest texture width and height (a power of two); a larger atlas is scaled down to it.
    """
    source, chart_faces, chart_uv = box_charts(vertices, faces, normals)
    atlas = xatlas.Atlas()
    atlas.add_uv_mesh(np.ascontiguousarray(chart_uv, np.float32), np.ascontiguousarray(chart_faces, np.uint32))
    pack = xatlas.PackOptions()
    pack.padding, pack.bilinear, pack.texels_per_unit = PADDING, True, float(texels_per_unit)
    atlas.generate(pack_options=pack)
    chart_vertex, atlas_faces, uv = atlas[0]
    size = tuple(min(1 << int(np.ceil(np.log2(side))), max_size) for side in (atlas.width, atlas.height))
    lo, hi = uv.min(0), uv.max(0)  # xatlas's UVs of a packed UV mesh stick out of [0, 1] by up to its padding
    uv = (uv - lo) / np.maximum(hi - lo, 1e-12)
    return Atlas(source[chart_vertex.astype(np.int64)], atlas_faces.astype(np.int64), uv.astype(np.float64), size)
