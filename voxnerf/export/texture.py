"""Textured meshes: xatlas's UV charts of the mesh (`charts`), the texture baked from the training photos.

Each texel a face covers stands for its point of the face (`charts.rasterize`), with the interpolated vertex
normal; its color is that point's color from the photos, the same visibility-weighted median as vertex colors
(`photo.photo_colors`; the field's head-on color where no photo sees it). The texels around the charts take the
nearest chart texel's color (`charts.pad`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import open3d as o3d

from voxnerf.data.cameras import Cameras
from voxnerf.data.rays import project
from voxnerf.errors import VoxnerfError
from voxnerf.export.charts import chart_mesh, pad, rasterize
from voxnerf.export.output import TEXTURED_FORMATS
from voxnerf.export.photo import bilinear, mesh_depth_maps, surface_colors
from voxnerf.run.load import Run

MAX_TEXTURE = 4096  # largest texture width and height allowed (texels)
TEXTURE_SIZE = 2048  # the default largest texture width and height
TEXELS_PER_PIXEL = 2.0  # texels across the finest training pixel that frames the surface: finer ones add no detail
CHART_FILL = 0.5  # an assumed share of an atlas its charts fill: it only decides whether the photos' density would
#                   need the largest texture or more (below it, xatlas sizes the atlas itself)


def check_texture(out: Path, texture: bool, size: int) -> None:
    """VoxnerfError naming --mesh for a `texture` in a file that cannot hold one (not TEXTURED_FORMATS), or
    --texture-size outside 16..MAX_TEXTURE."""
    if texture and out.suffix.lower() not in TEXTURED_FORMATS:
        raise VoxnerfError(f"--mesh {out}: a texture needs {' or '.join(TEXTURED_FORMATS)} (.ply holds vertex "
                           f"colors)")
    if not 16 <= size <= MAX_TEXTURE:
        raise VoxnerfError(f"--texture-size {size}: expected 16 to {MAX_TEXTURE} texels")


def obj_uv(uv: np.ndarray) -> np.ndarray:
    """UVs (N, 2) flipped between glTF's convention (v downward, the charts') and OBJ's (v upward: open3d's
    `triangle_uvs`, trimesh's), either way."""
    return np.stack([uv[:, 0], 1 - uv[:, 1]], 1)


def surface_samples(vertices: np.ndarray, normals: np.ndarray, corners: np.ndarray,
                    bary: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points (T, 3) and unit normals (T, 3) of faces, given each one's corner vertices (T, 3) and barycentric
    coordinates (T, 3), from the mesh's vertices (V, 3) and vertex normals (V, 3)."""
    points = (vertices[corners] * bary[..., None]).sum(1)
    point_normals = (normals[corners] * bary[..., None]).sum(1)
    return points, point_normals / np.maximum(np.linalg.norm(point_normals, axis=1, keepdims=True), 1e-12)


def finest_pixel(cameras: Cameras, points: np.ndarray) -> np.ndarray:
    """(N,) the smallest world span of a pixel at each world point (N, 3) among the cameras that frame it (its
    distance over the focal length), inf where none does (visibility is not checked)."""
    best = np.full(len(points), np.inf)
    for i in range(len(cameras)):
        uv, distance, in_front = project(cameras, i, points)
        width, height = cameras.sizes[i]
        framed = in_front & (uv >= 0).all(1) & (uv[:, 0] < width) & (uv[:, 1] < height)
        best = np.where(framed, np.minimum(best, distance / cameras.intrinsics[i, :2].mean()), best)
    return best


def texel_density(vertices: np.ndarray, faces: np.ndarray, cameras: Cameras, size: int) -> float:
    """Texels per world unit for a texture whose texels span 1 / TEXELS_PER_PIXEL of the finest training pixel
    that frames the surface (the area-weighted median over the faces), or 0 where that needs a texture of `size`
    or more (then the charts fill size x size texels).

    Args:
        vertices: (V, 3) world positions; faces: (F, 3) vertex indices.
        cameras: the training cameras (pixel units of the photos the texture is baked from).
        size: the largest texture width and height.
    """
    corners = vertices[faces]
    area = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    pixel = finest_pixel(cameras, corners.mean(1))
    framed = np.isfinite(pixel) & (area > 0)
    if not framed.any():
        return 0.0
    order = np.argsort(pixel[framed])
    weight = np.cumsum(area[framed][order])
    median = pixel[framed][order][np.searchsorted(weight, weight[-1] / 2)]
    density = TEXELS_PER_PIXEL / median
    side = np.sqrt(area.sum() / CHART_FILL) * density
    return float(density) if side < size else 0.0


def textured_mesh(run: Run, mesh: o3d.geometry.TriangleMesh, colors: str = "photos", size: int = TEXTURE_SIZE,
                  progress: bool = False) -> o3d.geometry.TriangleMesh:
    """A world mesh with UV charts and a texture baked from the run's training photos (see the module docstring).

    Args:
        run: the loaded run (its scene folder must still hold the training photos).
        mesh: world mesh with vertex normals.
        colors: "photos" or "field", as for vertex colors (`photo.surface_colors`).
        size: the largest texture width and height: the texture is as large as the photos' finest pixels on the
            surface need (`texel_density`), up to size x size (xatlas may pack a little larger; it is then scaled).
        progress: show a bar over the views.
    Returns:
        A new open3d mesh whose vertices are the charts' (seam vertices repeated), with vertex normals,
        `triangle_uvs` (3F, 2) and one texture (H, W, 3) uint8 as open3d reads them from an OBJ or GLB: UVs with v
        upward (`obj_uv`) and the image's rows bottom up (row 0 at v = 0); no vertex colors.
    """
    vertices, faces = np.asarray(mesh.vertices), np.asarray(mesh.triangles)
    normals = np.asarray(mesh.vertex_normals)
    cameras = run.training_cameras()
    density = texel_density(vertices, faces, cameras, size) if colors == "photos" else 0.0
    charts = chart_mesh(vertices, faces, size, density)
    w, h = charts.size
    texels, face, bary = rasterize(charts.uv, charts.faces, charts.size)
    points, point_normals = surface_samples(vertices, normals, faces[face], bary)
    image, filled = np.zeros((h * w, 3), np.float32), np.zeros(h * w, bool)
    image[texels] = surface_colors(run, points, point_normals, mesh_depth_maps(mesh, cameras), colors,
                                   progress)
    filled[texels] = True
    image = pad(image.reshape(h, w, 3), filled.reshape(h, w))
    out = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(vertices[charts.source]),
                                    o3d.utility.Vector3iVector(charts.faces))
    out.vertex_normals = o3d.utility.Vector3dVector(normals[charts.source])
    out.triangle_uvs = o3d.utility.Vector2dVector(obj_uv(charts.uv[charts.faces].reshape(-1, 2)))
    out.triangle_material_ids = o3d.utility.IntVector(np.zeros(len(faces), np.int32))
    bottom_up = (np.clip(image[::-1], 0, 1) * 255).round().astype(np.uint8)  # open3d's rows (see `textured_mesh`)
    out.textures = [o3d.geometry.Image(np.ascontiguousarray(bottom_up))]
    return out


def mesh_colors(mesh: o3d.geometry.TriangleMesh, faces: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Colors (N, 3) float64 of a mesh at points given by their faces (N,) and barycentric coordinates (N, 2) of
    the faces' second and third vertices (open3d ray casting's `primitive_uvs`): the texture's, bilinear at the
    interpolated UV, when the mesh has one, else the interpolated vertex colors."""
    weights = np.stack([1 - uv.sum(1), uv[:, 0], uv[:, 1]], 1)[..., None]
    if mesh.has_textures():
        image = np.asarray(mesh.textures[0]).astype(np.float64) / 255
        at = (np.asarray(mesh.triangle_uvs).reshape(-1, 3, 2)[faces] * weights).sum(1)  # bottom-up rows: v * H
        return bilinear(image, at * (image.shape[1], image.shape[0]))
    return (np.asarray(mesh.vertex_colors)[np.asarray(mesh.triangles)[faces]] * weights).sum(1)
