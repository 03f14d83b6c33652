"""Writing exports, checking the output path first, and the one-paragraph summary printed after.

PLY (meshes with vertex colors, point clouds) is written by open3d; OBJ and GLB by trimesh: OBJ with its MTL and
PNG beside it when the mesh is textured, GLB as one binary file with 32-bit indices and the texture embedded as a
PNG (open3d's GLB writer stores indices above 65,535 as 16-bit and the buffer as a base64 data URI, which glTF
viewers refuse). A textured mesh is an open3d mesh with `triangle_uvs` in OBJ's convention (v upward, as open3d
reads them) and one texture whose rows are bottom up (ditto); trimesh keeps OBJ's convention and flips v for GLB.

OBJ and GLB files are turned so that the cameras' up direction is +y: glTF's up, and what Blender's and three.js's
importers expect of both (a capture with z up, such as NeRF-Synthetic's, would otherwise lie on its side). PLY
keeps the world's axes, the frame of the cameras' poses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import open3d as o3d
import trimesh
from PIL import Image

from voxnerf.errors import VoxnerfError

MESH_FORMATS = (".ply", ".obj", ".glb")
POINTCLOUD_FORMATS = (".ply",)
TEXTURED_FORMATS = (".obj", ".glb")
Y_UP_FORMATS = (".obj", ".glb")  # written with the cameras' up as +y (see the module docstring)
WHITE, BLACK = (255, 255, 255, 255), (0, 0, 0, 255)
SNAP_DEGREES = 5.0  # an up direction this close to an axis is taken as the axis (synthetic scenes' axes)


def check_output(path: str | Path, formats: tuple[str, ...], option: str) -> Path:
    """The output file `path` if its suffix is one of `formats` and no file stands where its folder goes (the
    folder is made when the export is written), else VoxnerfError."""
    path = Path(path)
    if path.suffix.lower() not in formats:
        raise VoxnerfError(f"{option} {path}: unsupported format (use {', '.join(formats)})")
    blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise VoxnerfError(f"{option} {path}: {blocked} is a file, not a folder")
    return path


def make_folder(path: Path) -> None:
    """Create the folder of the output file `path` (and its parents) when missing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VoxnerfError(f"{path}: cannot create its folder ({e.strerror})") from None


def vertex_uvs(mesh: o3d.geometry.TriangleMesh) -> np.ndarray:
    """(V, 2) per-vertex UVs of a textured mesh whose `triangle_uvs` (3F, 2) give each vertex one UV (a charted
    mesh, see `texture.textured_mesh`)."""
    uv = np.zeros((len(mesh.vertices), 2))
    uv[np.asarray(mesh.triangles).reshape(-1)] = np.asarray(mesh.triangle_uvs)
    return uv


def texture_material(image: np.ndarray, name: str, pbr: bool) -> trimesh.visual.material.Material:
    """A material showing the texture `image` (H, W, 3) uint8 as it is: for glTF (`pbr`) a base color texture, not
    metallic, fully rough (glTF's default metallic factor is 1); for OBJ a white diffuse without specular (MTL's Kd
    multiplies map_Kd)."""
    if pbr:
        return trimesh.visual.material.PBRMaterial(name=name, baseColorTexture=Image.fromarray(image),
                                                   metallicFactor=0.0, roughnessFactor=1.0)
    return trimesh.visual.material.SimpleMaterial(name=name, image=Image.fromarray(image), ambient=WHITE,
                                                  diffuse=WHITE, specular=BLACK)


def y_up_rotation(up: np.ndarray) -> np.ndarray:
    """(3, 3) rotation taking the unit direction `up` (3,) to +y, the shortest one; `up` within SNAP_DEGREES of a
    signed axis is taken as that axis (z up: x kept, z -> y, y -> -z)."""
    nearest = np.abs(up).argmax()
    axis = np.zeros(3)
    axis[nearest] = np.sign(up[nearest])
    u = axis if up @ axis >= np.cos(np.radians(SNAP_DEGREES)) else up / np.linalg.norm(up)
    c = float(u[1])
    if c < -1 + 1e-9:
        return np.diag([1.0, -1.0, -1.0])  # upside down: half a turn about x
    v = np.cross(u, [0.0, 1.0, 0.0])
    k = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + k + k @ k / (1 + c)


def unit_normals(normals: np.ndarray) -> np.ndarray:
    """Vertex normals (V, 3) scaled to unit length; one of zero length (a vertex whose faces' normals cancel or
    vanish, as a decimated mesh's few degenerate faces do) becomes +z: glTF requires unit normals."""
    length = np.linalg.norm(normals, axis=1, keepdims=True)
    return np.where(length > 1e-12, normals / np.maximum(length, 1e-12), [0.0, 0.0, 1.0])


def to_trimesh(mesh: o3d.geometry.TriangleMesh, name: str, pbr: bool, rotation: np.ndarray) -> trimesh.Trimesh:
    """The trimesh of an open3d mesh turned by `rotation` (3, 3): its texture (`texture_material` called `name`)
    when it has one, else its vertex colors; vertex normals kept (`unit_normals`)."""
    if mesh.has_textures():
        material = texture_material(np.asarray(mesh.textures[0])[::-1], name, pbr)  # open3d keeps rows bottom up
        visual = trimesh.visual.TextureVisuals(uv=vertex_uvs(mesh), material=material)
    else:
        colors = np.asarray(mesh.vertex_colors) if mesh.has_vertex_colors() else None
        visual = trimesh.visual.ColorVisuals(vertex_colors=None if colors is None else (colors * 255).round())
    normals = unit_normals(np.asarray(mesh.vertex_normals)) @ rotation.T if mesh.has_vertex_normals() else None
    return trimesh.Trimesh(np.asarray(mesh.vertices) @ rotation.T, np.asarray(mesh.triangles), visual=visual,
                           vertex_normals=normals, process=False)


def write_obj(mesh: trimesh.Trimesh, path: Path) -> None:
    """Write an OBJ and, for a textured mesh, PATH.mtl and its PNG beside it."""
    text, files = trimesh.exchange.obj.export_obj(mesh, include_normals=True, return_texture=True,
                                                  mtl_name=path.with_suffix(".mtl").name)
    path.write_text(text)
    for name, data in files.items():
        (path.parent / name).write_bytes(data)


def write_mesh(mesh: o3d.geometry.TriangleMesh, path: Path, up: np.ndarray | None = None) -> None:
    """Write a world mesh by its suffix (see the module docstring), or raise VoxnerfError.

    Args:
        mesh: the mesh, in world coordinates.
        path: the file (.ply, .obj or .glb).
        up: (3,) the world's up direction (`Cameras.up`), turned to +y in .obj and .glb files; None keeps the
            world's axes in every format.
    """
    if len(mesh.triangles) == 0:
        raise VoxnerfError(f"{path}: the mesh is empty (nothing reached the iso value inside the box; try --iso "
                           f"auto, a lower --iso or another --bbox)")
    make_folder(path)
    if path.suffix.lower() == ".ply":
        if not o3d.io.write_triangle_mesh(str(path), mesh, write_vertex_normals=True, write_vertex_colors=True):
            raise VoxnerfError(f"{path}: open3d could not write the mesh")
        return
    rotation = np.eye(3) if up is None else y_up_rotation(up)
    if path.suffix.lower() == ".obj":
        write_obj(to_trimesh(mesh, path.stem, False, rotation), path)
    else:
        path.write_bytes(trimesh.exchange.gltf.export_glb(to_trimesh(mesh, path.stem, True, rotation)))


def write_pointcloud(pcd: o3d.geometry.PointCloud, path: Path) -> None:
    """Write a point cloud (colors and normals included) as binary PLY, or raise VoxnerfError."""
    if len(pcd.points) == 0:
        raise VoxnerfError(f"{path}: the point cloud is empty (no surface found inside the box)")
    make_folder(path)
    if not o3d.io.write_point_cloud(str(path), pcd):
        raise VoxnerfError(f"{path}: open3d could not write the point cloud")


def summary(path: Path, geometry) -> str:
    """Lines naming the written file, its vertex/face or point counts and its world bounding box."""
    points = np.asarray(geometry.vertices if isinstance(geometry, o3d.geometry.TriangleMesh) else geometry.points)
    if isinstance(geometry, o3d.geometry.TriangleMesh):
        counts = f"{len(points)} vertices, {len(geometry.triangles)} faces"
        if geometry.has_textures():
            h, w = np.asarray(geometry.textures[0]).shape[:2]
            counts += f", a {w}x{h} texture"
    else:
        counts = f"{len(points)} points"
    lo, hi = points.min(0), points.max(0)
    box = f"({lo[0]:.3f}, {lo[1]:.3f}, {lo[2]:.3f}) to ({hi[0]:.3f}, {hi[1]:.3f}, {hi[2]:.3f})"
    return f"wrote {path}\n  {counts}\n  world bounds {box}"
