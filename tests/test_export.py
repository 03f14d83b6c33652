"""Export and view, specified on toy scenes whose surfaces are known exactly.

Accuracy tests use a run built without training: a 64^3 grid whose density and color are set from the toy
scene's analytic field (so the only errors are the grid's and the export's). One test trains briefly and only
checks that every export runs on a real run folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import open3d as o3d
import pytest
import torch
import trimesh
from scipy.spatial import cKDTree

import voxnerf.scenes as vs
from voxnerf.cli.demo import export_step as demo_export_step
from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras, look_at
from voxnerf.data.rays import image_rays
from voxnerf.data.normalize import space_for
from voxnerf.errors import VoxnerfError
from voxnerf.export import export_mesh, export_pointcloud
from voxnerf.export import mesh as mesh_module
from voxnerf.export.charts import chart_mesh, pad, rasterize
from voxnerf.export.light import LIGHT_BLUR, decimate
from voxnerf.export.box import crop_box, parse_bbox
from voxnerf.export.depth import median_depth, opacity_crossing, spread_views
from voxnerf.export.iso import auto_iso, silhouette_density
from voxnerf.export.mesh import (CEILING, clean_mesh, default_samples, drop_hidden, field_mesh, lattice_block,
                                 march_blocks)
from voxnerf.export.query import LOG_EMPTY
from voxnerf.export.subject import cut_ground, find_ground, in_cylinder, subject_box
from voxnerf.export.output import write_mesh, y_up_rotation
from voxnerf.export.photo import field_colors, mesh_depth_maps, photo_colors, weighted_median
from voxnerf.export.texture import TEXELS_PER_PIXEL, finest_pixel, mesh_colors, texel_density
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyConfig
from voxnerf.run.checkpoint import CHECKPOINT, save_atomic
from voxnerf.run.config import config_to_dict, load_config
from voxnerf.run.load import Run, SceneRecord, load_run
from voxnerf.train.trainer import Trainer
from voxnerf.view.occupancy import cube_faces, voxel_mesh
from voxnerf.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
TOY = "two_objects"
RESOLUTION = 64
SURFACE_SAMPLES = 20_000


def one_level(resolution: int) -> list[dict]:
    return [{"until": 1.0, "resolution": resolution, "image_scale": 1.0}]


def analytic_run(scene_root: Path, toy: vs.ToyScene, out: Path, resolution: int = RESOLUTION,
                 thinned: float = 1.0) -> Path:
    """A run folder whose field reproduces the toy scene's density (times `thinned`) and color on a resolution^3
    grid.

    Raw density inverts the field's activation (softplus(raw + shift) * density_scale = sigma per unit-box
    length), in float64 so that it keeps falling linearly with distance outside the solid; the first three
    feature channels are the color's logit (the decoder's last layer starts at zero, so rgb =
    sigmoid(features[:3])). Cells whose most opaque point has alpha <= 1e-3 over one cell are marked empty, as
    training does.
    """
    scene = load_scene(scene_root, with_images=False)
    cfg = load_config(None, [{"levels": one_level(resolution)}])
    model = Model.build(cfg.field, resolution, space_for(scene, "box"))
    field, grid = model.field, model.field.grid
    x_world = (grid.bricks.slot_vertices().double() * grid.cell_size - 1) / scene.scale + torch.as_tensor(scene.center)
    sigma = thinned * toy.density(x_world) / scene.scale  # float64: raw stays linear in the SDF far outside, no clamp
    raw = torch.log(torch.expm1(sigma / cfg.field.density_scale).clamp_min(1e-300)) - field.activate.shift
    color = toy.color(x_world).float().clamp(1e-3, 1 - 1e-3)
    with torch.no_grad():
        grid.density.copy_(raw.float())
        grid.features[:, :3] = torch.logit(color)
    model.estimator.update(field.density_at, OccupancyConfig(threshold=1e-3, decay=0.0, min_fraction=0.0), 1.0)
    save_atomic({"config": config_to_dict(cfg), "model": model.state(), "step": 0,
                 "scene": SceneRecord.of(scene, model.space).to_dict()}, out / CHECKPOINT)
    return out


@pytest.fixture(scope="module")
def toy() -> vs.ToyScene:
    return vs.get(TOY)


@pytest.fixture(scope="module")
def scene_root(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return vs.make_scene(TOY, tmp_path_factory.mktemp("scene"), n_train=8, n_val=0, n_test=1, size=32, n_samples=128)


@pytest.fixture(scope="module")
def run_dir(scene_root, toy, tmp_path_factory) -> Path:
    return analytic_run(scene_root, toy, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def run(run_dir) -> Run:
    return load_run(run_dir)


@pytest.fixture(scope="module")
def voxel(run) -> float:
    """One cell of the grid in world units."""
    return run.model.estimator.cell_size / run.scale


def distance_to_surface(toy: vs.ToyScene, points: np.ndarray) -> np.ndarray:
    return toy.sdf(torch.as_tensor(points, dtype=torch.float64)).abs().numpy()


def chamfer_and_normals(mesh: o3d.geometry.TriangleMesh, toy: vs.ToyScene) -> tuple[float, float]:
    """Symmetric Chamfer distance (mean of both directions' mean nearest distance) between area samples of the
    mesh and of the true surface, and their normal consistency (mean cosine of nearest pairs, both ways)."""
    o3d.utility.random.seed(0)
    samples = mesh.sample_points_uniformly(SURFACE_SAMPLES, use_triangle_normal=True)
    p, n = np.asarray(samples.points), np.asarray(samples.normals)
    q, m = (t.numpy() for t in toy.sample_surface(SURFACE_SAMPLES, seed=0, dtype=torch.float64))
    d_pq, i_pq = cKDTree(q).query(p)
    d_qp, i_qp = cKDTree(p).query(q)
    chamfer = 0.5 * (d_pq.mean() + d_qp.mean())
    normals = 0.5 * ((n * m[i_pq]).sum(1).mean() + (m * n[i_qp]).sum(1).mean())
    return float(chamfer), float(normals)


# ---- mesh -----------------------------------------------------------------------------------------------------
def test_the_default_lattice_is_twice_the_grid_up_to_256_samples_and_never_below_the_grid():
    assert [default_samples(r) for r in (32, 64, 128, 256, 512)] == [64, 128, 256, 256, 512]


def test_density_mesh_is_within_a_voxel_of_the_true_surface(run, toy, voxel, tmp_path):
    mesh = export_mesh(run, tmp_path / "m.ply")
    chamfer, normals = chamfer_and_normals(o3d.io.read_triangle_mesh(str(tmp_path / "m.ply")), toy)
    assert chamfer <= voxel
    assert normals >= 0.9
    assert mesh.is_edge_manifold(allow_boundary_edges=False), "block meshes must weld into closed surfaces"


def test_auto_iso_keeps_the_toy_mesh_within_a_voxel_of_the_true_surface(run, toy, voxel, tmp_path):
    chosen = auto_iso(run, crop_box(run))
    assert chosen.iou >= 0.95 and chosen.rays > 1000
    mesh = export_mesh(run, tmp_path / "auto.ply", iso=chosen.iso)
    chamfer, normals = chamfer_and_normals(mesh, toy)
    assert chamfer <= voxel and normals >= 0.9 and mesh.is_edge_manifold(allow_boundary_edges=False)


def test_silhouette_density_keeps_the_default_when_it_separates_the_rays_best():
    max_sigma = np.array([9.0, 5.0, 2.0, 0.3, 0.1])
    surface = np.array([True, True, True, False, False])
    assert silhouette_density(max_sigma, surface, default=1.0) == (1.0, 1.0)


def test_silhouette_density_goes_below_the_weakest_surface_ray():
    """Soft surfaces: the default threshold would miss the rays whose peak density is 2, a hole in the mesh."""
    max_sigma = np.array([9.0, 5.0, 2.0, 0.5, 0.1])
    surface = np.array([True, True, True, False, False])
    s, iou = silhouette_density(max_sigma, surface, default=4.0)
    assert s == pytest.approx(1.0) and iou == 1.0  # the geometric middle of [0.5, 2)


def test_silhouette_density_trades_a_stray_ray_for_many_surface_rays():
    max_sigma = np.array([9.0, 3.0, 2.5, 2.0, 1.5, 0.2])
    surface = np.array([True, True, False, True, True, False])
    s, iou = silhouette_density(max_sigma, surface, default=4.0)
    assert 0.2 <= s < 1.5 and iou == pytest.approx(4 / 5)


def test_density_mesh_vertex_colors_are_the_surface_colors(run, toy, tmp_path):
    mesh = export_mesh(run, tmp_path / "m.ply")
    v = np.asarray(mesh.vertices)
    truth = toy.color(torch.as_tensor(v)).numpy()
    assert np.abs(np.asarray(mesh.vertex_colors) - truth).mean() < 0.05


def test_texture_colors_at_the_face_centers_are_the_surface_colors(run, toy, tmp_path):
    mesh = export_mesh(run, tmp_path / "m.glb", target_faces=5000)
    faces = np.arange(len(mesh.triangles))
    centers = np.asarray(mesh.vertices)[np.asarray(mesh.triangles)].mean(1)
    colors = mesh_colors(mesh, faces, np.full((len(faces), 2), 1 / 3))
    assert np.abs(colors - toy.color(torch.as_tensor(centers)).numpy()).mean() < 0.03


def test_vertex_colors_from_the_photos_are_the_surface_colors(run, toy, tmp_path):
    mesh = export_mesh(run, tmp_path / "m.ply", colors="photos")
    truth = toy.color(torch.as_tensor(np.asarray(mesh.vertices))).numpy()
    assert np.abs(np.asarray(mesh.vertex_colors) - truth).mean() < 0.03


def test_a_point_no_photo_sees_keeps_the_field_color_and_a_seen_one_takes_the_photos(run, toy):
    mesh = field_mesh(run, crop_box(run))
    ball = np.asarray(mesh.vertices)[np.argmax(np.asarray(mesh.vertices)[:, 2])]  # the top of the highest object
    inside = np.array([[-0.45, 0.0, 0.0]])  # the ball's center: every view sees its surface in front of it
    points, normals = np.concatenate([inside, ball[None]]), np.array([[0.0, 0.0, 1.0]] * 2)
    colors, views = photo_colors(run, points, normals, mesh_depth_maps(mesh, run.training_cameras()))
    assert views[0] == 0 and views[1] >= 1
    assert np.array_equal(colors[0], field_colors(run, inside, normals[:1])[0])
    truth = toy.color(torch.as_tensor(ball[None])).numpy()[0]
    assert np.abs(colors[1] - truth).max() < 0.1


def test_weighted_median_is_each_groups_value_at_half_its_weight():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 50, 2000)
    values, weights = rng.random((2000, 3)), rng.random(2000) + 0.01
    medians, has = weighted_median(groups, values, weights, 60)
    for g in range(60):
        mine = groups == g
        assert has[g] == mine.any()
        for c in range(3):
            order = np.argsort(values[mine, c])
            half = np.cumsum(weights[mine][order]) >= 0.5 * weights[mine].sum()
            expected = values[mine, c][order][np.argmax(half)] if mine.any() else 0.0
            assert medians[g, c] == pytest.approx(expected, abs=1e-6)


def test_weighted_median_ignores_a_bright_outlier_that_a_mean_would_keep():
    values = np.array([[0.2], [0.21], [0.19], [1.0]])
    medians, _ = weighted_median(np.zeros(4, np.int64), values, np.array([1.0, 1.0, 1.0, 2.0]), 1)
    assert medians[0, 0] == pytest.approx(0.21)


def test_smoothing_keeps_the_toy_mesh_within_a_voxel_of_the_true_surface(run, toy, voxel):
    plain = field_mesh(run, crop_box(run), smoothing=0)
    smooth = field_mesh(run, crop_box(run), smoothing=3)
    moved = np.linalg.norm(np.asarray(smooth.vertices) - np.asarray(plain.vertices), axis=1)
    assert 0 < moved.max() <= voxel
    assert distance_to_surface(toy, np.asarray(smooth.vertices)).max() <= voxel
    chamfer, normals = chamfer_and_normals(smooth, toy)
    assert chamfer <= chamfer_and_normals(plain, toy)[0] + 0.1 * voxel and normals >= 0.95


def glb_json(path: Path) -> dict:
    """The JSON chunk of a binary glTF (version 2)."""
    data = path.read_bytes()
    magic, version, _ = struct.unpack("<4sII", data[:12])
    assert (magic, version) == (b"glTF", 2)
    length, kind = struct.unpack("<II", data[12:20])
    assert kind == 0x4E4F534A  # "JSON"
    return json.loads(data[20:20 + length])


def glb_vec3(path: Path, attribute: str) -> np.ndarray:
    """(N, 3) float32 values of the first primitive's `attribute` in a binary glTF, as stored."""
    data = path.read_bytes()
    gltf = glb_json(path)
    binary = 20 + struct.unpack("<I", data[12:16])[0] + 8  # after the JSON chunk and the binary chunk's header
    accessor = gltf["accessors"][gltf["meshes"][0]["primitives"][0]["attributes"][attribute]]
    view = gltf["bufferViews"][accessor["bufferView"]]
    offset = binary + view.get("byteOffset", 0) + accessor.get("byteOffset", 0)
    return np.frombuffer(data, np.float32, 3 * accessor["count"], offset).reshape(-1, 3)


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_mesh_files_hold_the_mesh_in_world_units_with_y_up_in_obj_and_glb(run, tmp_path, suffix):
    """PLY keeps the world's axes; OBJ and GLB hold the same vertices turned so that the cameras' up is +y, as
    glTF and Blender's and three.js's importers expect (the toy's world has z up, its 8 cameras' mean up is 16
    degrees off it)."""
    mesh = export_mesh(run, tmp_path / f"m{suffix}", target_faces=2000, texture=False)
    assert 0 < len(mesh.triangles) <= 2000
    up = run.training_cameras().up
    back = trimesh.load(tmp_path / f"m{suffix}", force="mesh")
    assert len(back.faces) == len(mesh.triangles)
    world = np.asarray(mesh.vertices)
    expected = world if suffix == ".ply" else world @ y_up_rotation(up).T
    assert np.allclose(np.sort(back.vertices, axis=0), np.sort(expected, axis=0), atol=1e-5)
    lo, hi = world.min(0), world.max(0)
    assert lo[0] == pytest.approx(-0.75, abs=0.05) and hi[0] == pytest.approx(0.69, abs=0.05), "world units"


def test_y_up_rotation_turns_up_to_y_exactly_near_an_axis_and_shortest_elsewhere():
    for up in ([0, 0, 1], [0, 0, -1], [1, 0, 0], [0, -1, 0], [0, 1, 0], [0.05, 0.02, 1.0], [0.6, 0.0, 0.8], [-0.07, -0.94, -0.35]):
        up = np.asarray(up, float) / np.linalg.norm(up)
        r = y_up_rotation(up)
        assert np.allclose(r @ r.T, np.eye(3)) and np.linalg.det(r) == pytest.approx(1)
        snapped = np.abs(up).max() >= np.cos(np.radians(5))
        assert np.allclose(r @ up, [0, 1, 0], atol=1e-9 if not snapped else 0.1) and (r @ up)[1] > 0.99
        if snapped:
            assert np.allclose(np.abs(r), np.abs(r).round()), "an axis: a signed permutation"
        else:
            assert np.allclose(r @ np.cross(up, [0, 1, 0]), np.cross(up, [0, 1, 0])), "about their common normal"


def test_ply_holds_the_dense_vertex_colored_mesh_and_obj_and_glb_a_light_textured_one_by_default(run, tmp_path,
                                                                                                    monkeypatch):
    ply = export_mesh(run, tmp_path / "m.ply")
    assert ply.has_vertex_colors() and not ply.has_textures()
    assert o3d.io.read_triangle_mesh(str(tmp_path / "m.ply")).has_vertex_colors()
    monkeypatch.setattr("voxnerf.export.LIGHT_FACES", 3000)  # the toy's dense mesh is below the real budget
    for suffix in (".obj", ".glb"):
        mesh = export_mesh(run, tmp_path / f"m{suffix}")
        assert mesh.has_textures() and not mesh.has_vertex_colors() and mesh.has_triangle_uvs()
        assert 2700 <= len(mesh.triangles) <= 3000 < len(ply.triangles)
    assert export_mesh(run, tmp_path / "plain.glb", texture=False).has_vertex_colors()
    assert len(export_mesh(run, tmp_path / "dense.glb", target_faces=0).triangles) == len(ply.triangles)


def dihedral_degrees(mesh: o3d.geometry.TriangleMesh) -> float:
    """Mean angle in degrees between the normals of the two faces of each edge that two faces share (roughness)."""
    triangles = np.asarray(mesh.triangles)
    mesh.compute_triangle_normals()
    normals = np.asarray(mesh.triangle_normals)
    edges = np.sort(triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, inverse, counts = np.unique(edges, axis=0, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts[inverse.reshape(-1)] == 2)
    pairs = (shared[np.argsort(inverse.reshape(-1)[shared], kind="stable")] // 3).reshape(-1, 2)
    return float(np.degrees(np.arccos(np.clip((normals[pairs[:, 0]] * normals[pairs[:, 1]]).sum(1), -1, 1))).mean())


def test_a_light_mesh_of_a_noisy_density_is_smoother_than_its_dense_mesh_decimated_and_as_close(run_dir, toy, voxel,
                                                                                                 tmp_path):
    """The toy's density with noise at the scale of a cell (raw density + N(0, 1), as a trained one has): decimated
    to the same faces, the light mesh (the blurred density's) is much smoother than the dense mesh's, and its
    vertices are as close to the true surface (0.41 against 0.40 cells, median)."""
    noisy = load_run(run_dir)
    with torch.no_grad():
        density = noisy.model.field.grid.density
        density.add_(torch.randn(density.shape, generator=torch.Generator().manual_seed(0)))
    light = export_mesh(noisy, tmp_path / "light.ply", target_faces=3000, colors="field")
    plain = decimate(clean_mesh(drop_hidden(field_mesh(noisy, crop_box(noisy)), noisy.training_cameras())), 3000)
    assert len(light.triangles) <= 3000 and len(plain.triangles) <= 3000
    assert dihedral_degrees(light) < 0.7 * dihedral_degrees(plain), (dihedral_degrees(light), dihedral_degrees(plain))
    light_off, plain_off = (np.median(distance_to_surface(toy, np.asarray(m.vertices))) for m in (light, plain))
    assert light_off <= min(plain_off + 0.05 * voxel, 0.5 * voxel), (light_off / voxel, plain_off / voxel)


def test_the_blur_keeps_a_slab_three_quarters_of_a_cell_thin_and_a_thick_ones_face_in_place(monkeypatch):
    """`lattice_block` on slabs across x of sigma 1000x the iso value's (4 samples a cell), blurred by LIGHT_BLUR
    cells after clipping at CEILING times the iso value's: a slab of 3/4 of a cell still reaches the iso value
    (one of 1/4 does not), and a thick slab's face crosses it within a tenth of a cell of where it is."""
    samples, level, per_cell = 256, 10.0, 4
    h = 2 / samples
    slabs = {"thin": (-0.5, 3), "thinner": (-0.25, 1), "thick": (0.0, 80)}  # first x, width in samples

    def log_density(model, x):
        inside = np.zeros(len(x), bool)
        for lo, width in slabs.values():
            inside |= (x[:, 0] > lo - h / 2) & (x[:, 0] < lo + (width - 0.5) * h)
        return np.where(inside, np.log(1000 * level), LOG_EMPTY).astype(np.float32)

    monkeypatch.setattr(mesh_module, "log_density", log_density)
    start, stop = np.array([48, 0, 0]), np.array([160, 4, 4])
    volume = lattice_block(None, start, stop, samples, LIGHT_BLUR * per_cell, CEILING * level)
    x = -1 + np.arange(start[0], stop[0] + 1) * h
    profile = volume[:, 2, 2] - level  # sigma above the iso value's
    near = lambda lo, width: (x > lo - 3 * h) & (x < lo + (width + 2) * h)
    assert profile[near(*slabs["thin"])].max() > 0
    assert profile[near(*slabs["thinner"])].max() < 0
    i = np.flatnonzero((profile[:-1] < 0) & (profile[1:] >= 0) & (x[:-1] > -0.1))[0]
    crossing = x[i] + h * profile[i] / (profile[i] - profile[i + 1])  # marching cubes' linear interpolation
    assert abs(crossing - (slabs["thick"][0] - h / 2)) < 0.1 * per_cell * h


@pytest.mark.parametrize("suffix", [".obj", ".glb"])
def test_textured_files_load_with_uvs_in_the_unit_square_and_the_baked_texture(run, tmp_path, suffix):
    mesh = export_mesh(run, tmp_path / f"m{suffix}", texture=True, texture_size=64, target_faces=2000)
    if suffix == ".obj":
        assert (tmp_path / "m.mtl").read_text().count("map_Kd m.png") == 1
        assert iio.imread(tmp_path / "m.png").shape[:2] == np.asarray(mesh.textures[0]).shape[:2]
    back = trimesh.load(tmp_path / f"m{suffix}", force="mesh", process=False)
    uv = back.visual.uv
    assert len(uv) == len(back.vertices) and uv.min() >= 0 and uv.max() <= 1
    image = np.asarray(back.visual.material.baseColorTexture if suffix == ".glb" else back.visual.material.image)
    assert image.shape[:2] == (64, 64) or max(image.shape[:2]) <= 64
    texture = np.asarray(mesh.textures[0])[::-1]  # open3d keeps the rows bottom up
    assert np.array_equal(image[..., :3], texture), "the file holds the baked texture, losslessly"
    # trimesh reads OBJ's and GLB's conventions into its own: each vertex's texel is the baked one
    h, w = texture.shape[:2]
    cols = np.clip((uv[:, 0] * w).astype(int), 0, w - 1)
    rows = np.clip(((1 - uv[:, 1]) * h).astype(int), 0, h - 1)
    ours = np.zeros((len(mesh.vertices), 2))
    ours[np.asarray(mesh.triangles).reshape(-1)] = np.asarray(mesh.triangle_uvs)
    assert np.array_equal(cols, np.clip((ours[:, 0] * w).astype(int), 0, w - 1))
    assert np.array_equal(rows, np.clip(((1 - ours[:, 1]) * h).astype(int), 0, h - 1))
    # open3d reads the same UVs (its convention is OBJ's) and the texture
    read = o3d.io.read_triangle_mesh(str(tmp_path / f"m{suffix}"), enable_post_processing=False)
    assert np.abs(np.asarray(read.triangle_uvs) - np.asarray(mesh.triangle_uvs)).max() < 1e-6
    assert any(np.array_equal(np.asarray(t)[::-1, :, :3], texture) for t in read.textures if np.asarray(t).ndim == 3)


def test_a_ply_texture_is_refused_in_one_line(run, tmp_path):
    with pytest.raises(VoxnerfError, match="a texture needs .obj or .glb"):
        export_mesh(run, tmp_path / "m.ply", texture=True)


def test_an_empty_textured_mesh_is_refused_in_one_line(run, tmp_path):
    corner = run.to_world(np.array([[0.9] * 3, [0.95] * 3]))  # a corner of the grid, far from both objects
    with pytest.raises(VoxnerfError, match="the mesh is empty"):
        export_mesh(run, tmp_path / "m.glb", texture=True, bbox=corner)
    assert not (tmp_path / "m.glb").exists()


def test_texture_keeps_the_colors_that_a_coarse_meshs_vertex_colors_blur(tmp_path):
    """A cube whose faces differ in color, meshed with about 200 faces and colored by the field: vertex colors
    blend each triangle's corners across the cube's edges, the texture gives every point of a face its own color
    (compared with the toy's true color where each pixel ray meets the mesh)."""
    root = vs.make_scene("box", tmp_path / "scene", n_train=12, n_val=0, n_test=1, size=64, n_samples=64)
    box = vs.get("box")
    cube = load_run(analytic_run(root, box, tmp_path / "run", resolution=32))
    scene = cube.scene()
    origins, dirs = (t.numpy() for t in image_rays(scene.cameras, scene.split_indices("test")[0]))
    psnr = {}
    for name in ("vertex.ply", "texture.glb"):
        mesh = export_mesh(cube, tmp_path / name, target_faces=200, colors="field", texture=name.endswith(".glb"))
        caster = o3d.t.geometry.RaycastingScene()
        caster.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
        hits = caster.cast_rays(o3d.core.Tensor(np.concatenate([origins, dirs], 1).astype(np.float32)))
        hit = np.isfinite(hits["t_hit"].numpy())
        color = mesh_colors(mesh, hits["primitive_ids"].numpy()[hit], hits["primitive_uvs"].numpy()[hit])
        truth = box.color(torch.as_tensor(origins[hit] + hits["t_hit"].numpy()[hit, None] * dirs[hit])).numpy()
        psnr[name] = -10 * np.log10(((color - truth) ** 2).mean())
    assert psnr["texture.glb"] >= psnr["vertex.ply"] + 0.5, psnr  # 22.6 against 21.9 dB


def test_texels_span_half_the_finest_photo_pixel_on_the_surface_up_to_the_largest_texture():
    """A 1 x 1 square 4 units in front of one camera of focal length 100 and another twice as far: a pixel there
    spans 0.04 in the nearer photo, so two texels a pixel give 50 texels a unit; a texture that would need the
    largest size or more is left at that size (0)."""
    far = np.array([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, -8.0]])
    c2w = np.stack([np.array([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, -4.0]]), far])
    cameras = Cameras(c2w, np.tile([100.0, 100, 50, 50], (2, 1)), np.tile([100, 100], (2, 1)), np.zeros((2, 4)))
    vertices = np.array([[-0.5, -0.5, 0], [0.5, -0.5, 0], [0.5, 0.5, 0], [-0.5, 0.5, 0]])
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    assert finest_pixel(cameras, vertices.mean(0, keepdims=True)) == pytest.approx([0.04])
    assert texel_density(vertices, faces, cameras, 2048) == pytest.approx(TEXELS_PER_PIXEL / 0.04, rel=0.01)
    assert texel_density(vertices, faces, cameras, 64) == 0.0  # 50 texels a unit / sqrt(CHART_FILL) > 64


def test_rasterize_finds_each_texel_center_inside_the_faces_once_with_its_barycentrics():
    """Two triangles that split a square of UV space: every texel center inside the square is found once, in the
    face that holds it, and its barycentric coordinates give back its center; none outside."""
    uv = np.array([[0.1, 0.2], [0.7, 0.2], [0.7, 0.8], [0.1, 0.8]])
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    size = (20, 10)
    texels, face, bary = rasterize(uv, faces, size)
    rows, cols = np.divmod(texels, size[0])
    center = np.stack([(cols + 0.5) / size[0], (rows + 0.5) / size[1]], 1)
    expected = [(r, c) for r in range(10) for c in range(20)
                if 0.1 <= (c + 0.5) / 20 <= 0.7 and 0.2 <= (r + 0.5) / 10 <= 0.8]
    assert sorted(zip(rows.tolist(), cols.tolist())) == expected
    assert np.allclose((uv[faces[face]] * bary[..., None]).sum(1), center)
    below = center[:, 0] - 0.1 > center[:, 1] - 0.2  # under the diagonal from (0.1, 0.2) to (0.7, 0.8)
    assert np.array_equal(face[below], np.zeros(below.sum())) and (bary >= -1e-9).all()


def test_charts_keep_every_face_with_its_corners_and_no_two_faces_share_uv_space(run):
    """xatlas's charts of the toy's light mesh: the same faces on the same corners; random points well inside each
    face, looked up in a fine texture, land on texels rasterized for that face (no chart folds over another)."""
    mesh = decimate(clean_mesh(field_mesh(run, crop_box(run))), 2000)
    vertices, faces = np.asarray(mesh.vertices), np.asarray(mesh.triangles)
    charts = chart_mesh(vertices, faces, 2048)
    assert np.array_equal(vertices[charts.source][charts.faces], vertices[faces])
    assert charts.uv.min() >= 0 and charts.uv.max() <= 1 and max(charts.size) <= 2048
    texels, face, _ = rasterize(charts.uv, charts.faces, charts.size)
    w, h = charts.size
    owner = np.full(w * h, -1)
    owner[texels] = face
    weights = np.random.default_rng(0).dirichlet(np.full(3, 8.0), len(faces))  # well inside each face
    at = (charts.uv[charts.faces] * weights[..., None]).sum(1) * (w, h)
    found = owner[np.floor(at[:, 1]).astype(int) * w + np.floor(at[:, 0]).astype(int)]
    assert (found == np.arange(len(faces))).mean() > 0.98


def test_padding_gives_each_empty_texel_the_nearest_chart_texels_color():
    image = np.zeros((4, 6, 3))
    filled = np.zeros((4, 6), bool)
    image[1, 1], image[2, 4] = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)
    filled[1, 1] = filled[2, 4] = True
    padded = pad(image, filled)
    assert np.array_equal(padded[0, 0], (1, 0, 0)) and np.array_equal(padded[3, 5], (0, 0, 1))
    assert np.array_equal(padded[1, 1], image[1, 1]) and (padded.sum(-1) == 1).all()


def gltf_validator() -> tuple[list[str], dict] | None:
    """The command that validates a glTF file (node, tests/gltf_validate.js and the npm package gltf-validator in
    .tools/node_modules, where `.ci/run` installs it) and its environment, or None when one is missing."""
    modules = REPO / ".tools" / "node_modules"
    node = shutil.which("node")
    if node is None or not (modules / "gltf-validator").is_dir():
        return None
    return [node, str(REPO / "tests" / "gltf_validate.js")], os.environ | {"NODE_PATH": str(modules)}


def validate_gltf(path: Path) -> dict:
    """The Khronos glTF Validator's report on `path` (skips the test when node or the validator is missing)."""
    found = gltf_validator()
    if found is None:
        pytest.skip("the Khronos glTF Validator needs node and `npm install --prefix .tools gltf-validator`")
    command, env = found
    r = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_default_light_textured_glb_passes_the_khronos_gltf_validator(run, tmp_path):
    export_mesh(run, tmp_path / "m.glb")
    report = validate_gltf(tmp_path / "m.glb")
    assert report["issues"]["numErrors"] == 0 and report["issues"]["numWarnings"] == 0, report["issues"]
    assert report["info"]["hasTextures"] and report["info"]["resources"][0]["storage"] == "glb"
    image = next(r for r in report["info"]["resources"] if r["pointer"] == "/images/0")
    assert image["mimeType"] == "image/png" and image["storage"] == "buffer-view"


THREE = REPO / ".tools" / "node_modules" / "three"


@pytest.mark.skipif(shutil.which("chromium") is None or not THREE.is_dir(),
                    reason="three.js's loaders run in headless Chromium (Debian: apt-get install chromium) and need "
                           "`npm install --prefix .tools three`")
def test_three_js_reads_the_textured_glb_and_obj_and_the_vertex_colored_glb(run, tmp_path):
    """three.js's GLTFLoader, OBJLoader and MTLLoader in headless Chromium, as a web page would load the files."""
    from playwright.sync_api import sync_playwright

    textured = export_mesh(run, tmp_path / "m.glb", texture=True, texture_size=256)
    export_mesh(run, tmp_path / "m.obj", texture=True, texture_size=256)
    export_mesh(run, tmp_path / "v.glb", target_faces=2000, texture=False)
    roots = {"three": THREE, "files": tmp_path, "page": REPO / "tests"}

    def serve(route):
        root, _, rest = route.request.url.split("/", 3)[3].partition("/")
        route.fulfill(path=str(roots[root] / rest))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.route("http://voxnerf.test/**", serve)
        page.goto("http://voxnerf.test/page/three_import.html")
        page.wait_for_function("window.result !== undefined", timeout=60_000)
        result = page.evaluate("window.result")
        browser.close()
    assert "error" not in result, result
    h, w = np.asarray(textured.textures[0]).shape[:2]
    faces = len(textured.triangles)
    assert result["glb"] == [{"vertices": len(textured.vertices), "uv": True, "color": False, "map": [w, h]}]
    assert result["obj"] == [{"vertices": 3 * faces, "uv": True, "color": False, "map": [w, h]}]  # unindexed
    assert len(result["colored"]) == 1 and result["colored"][0]["color"] and not result["colored"][0]["uv"]


def test_a_glb_holds_unit_normals_where_a_vertexs_faces_vanish_or_cancel(tmp_path):
    """A vertex of a degenerate face and one between two opposite faces have no normal of their own; glTF
    requires unit normals of every vertex."""
    square = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0]])
    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(square),
                                     o3d.utility.Vector3iVector(np.array([[0, 1, 2], [0, 2, 1], [3, 4, 5]])))
    mesh.compute_vertex_normals()
    mesh.paint_uniform_color([0.5, 0.5, 0.5])
    assert (np.linalg.norm(np.asarray(mesh.vertex_normals), axis=1) < 0.5).sum() >= 3
    write_mesh(mesh, tmp_path / "m.glb")
    normals = glb_vec3(tmp_path / "m.glb", "NORMAL")  # as stored (trimesh recomputes them on loading)
    assert len(normals) == 6 and np.allclose(np.linalg.norm(normals, axis=1), 1.0, atol=1e-6)


def test_glb_indices_above_65535_vertices_are_unsigned_int_and_valid(tmp_path):
    sphere = o3d.geometry.TriangleMesh.create_sphere(1.0, resolution=200)
    sphere.compute_vertex_normals()
    sphere.paint_uniform_color([0.8, 0.4, 0.1])
    assert len(sphere.vertices) > 65535
    write_mesh(sphere, tmp_path / "big.glb")
    gltf = glb_json(tmp_path / "big.glb")
    indices = gltf["accessors"][gltf["meshes"][0]["primitives"][0]["indices"]]
    assert indices["componentType"] == 5125 and indices["max"] == [len(sphere.vertices) - 1]  # UNSIGNED_INT
    assert "uri" not in gltf["buffers"][0], "the buffer is the GLB's binary chunk, not a data URI"
    report = validate_gltf(tmp_path / "big.glb")
    assert report["issues"]["numErrors"] == 0, report["issues"]


def test_marching_cubes_samples_only_blocks_with_occupied_cells(run, monkeypatch):
    evaluated = []
    real_query = mesh_module.log_density

    def counting(field, x):
        evaluated.append(len(x))
        return real_query(field, x)

    monkeypatch.setattr(mesh_module, "log_density", counting)
    samples = 128
    march_blocks(run.model, np.array([[-1.0] * 3, [1.0] * 3]), samples)
    assert 0 < sum(evaluated) < 0.5 * samples**3
    assert max(evaluated) <= (mesh_module.BLOCK + 1) ** 3


def test_bbox_crops_the_mesh(run, tmp_path):
    box = parse_bbox("0,-1,-1,1,1,1")
    mesh = export_mesh(run, tmp_path / "right.ply", bbox=box)
    v = np.asarray(mesh.vertices)
    assert v[:, 0].min() >= -1e-6 and v[:, 0].max() > 0.6


def test_small_components_are_dropped(run, tmp_path):
    both = export_mesh(run, tmp_path / "both.ply", min_component=0.0)
    biggest = export_mesh(run, tmp_path / "one.ply", min_component=0.9)
    assert len(both.cluster_connected_triangles()[1]) == 2
    assert len(biggest.cluster_connected_triangles()[1]) == 1


def test_tsdf_mesh_lies_near_the_surface(run, toy, voxel, tmp_path):
    mesh = export_mesh(run, tmp_path / "t.ply", method="tsdf")
    assert distance_to_surface(toy, np.asarray(mesh.vertices)).mean() <= voxel


def test_tsdf_of_a_few_views_renders_only_those_and_still_lies_near_the_surface(run, toy, voxel, tmp_path,
                                                                                 monkeypatch):
    rendered = []
    render_view = type(run).render_view
    monkeypatch.setattr(type(run), "render_view", lambda self, cameras, i: rendered.append(i) or render_view(
        self, cameras, i))
    mesh = export_mesh(run, tmp_path / "t.ply", method="tsdf", views=4)
    assert rendered == spread_views(len(run.training_cameras()), 4).tolist() and len(rendered) == 4
    assert distance_to_surface(toy, np.asarray(mesh.vertices)).mean() <= voxel


def test_opacity_crossing_is_where_the_ray_has_stopped_half_its_light():
    step = 0.1
    t = np.tile((np.arange(10) + 0.5) * step, (2, 1))
    sigma = np.zeros((2, 10))
    sigma[0, 4:] = np.log(2) / 0.2  # from 0.4 on, half the light is stopped after 0.2 more
    depth = opacity_crossing(t, sigma, step)
    assert depth[0] == pytest.approx(0.6) and np.isnan(depth[1])


def test_tsdf_depth_is_the_median_depth_which_the_expected_depth_overshoots_on_soft_surfaces(
        scene_root, toy, voxel, tmp_path):
    """Why TSDF meshes of trained runs shrank: the expected depth of a soft surface lies behind it. On a ball whose
    density rises over ~1.5 voxels and stops half the light ~3 voxels in, `median_depth` finds the ln 2 crossing
    of the optical depth (integrated here from the analytic density); the expected depth lies deeper."""
    soft = dataclasses.replace(toy, density_scale=np.log(2) / (3 * voxel), density_eps=1.5 * voxel)
    run = load_run(analytic_run(scene_root, soft, tmp_path))
    origin, direction = np.array([[-0.45, 0.0, 3.0]]), np.array([[0.0, 0.0, -1.0]])  # through the ball's center
    t = np.arange(0, 6, voxel / 64)
    sigma = soft.density(torch.as_tensor(origin + t[:, None] * direction)).numpy()
    optical = np.cumsum(sigma) * voxel / 64
    weights = np.exp(-optical) * sigma
    truth_median = t[np.searchsorted(optical, np.log(2))]
    truth_expected = (weights * t).sum() / weights.sum()
    assert truth_expected - truth_median > 0.25 * voxel
    assert median_depth(run, origin, direction)[0] == pytest.approx(truth_median, abs=0.5 * voxel)


# ---- point cloud ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["grid", "depth"])
def test_pointcloud_points_lie_within_a_voxel_of_the_surface(run, toy, voxel, tmp_path, source):
    pcd = export_pointcloud(run, tmp_path / "p.ply", source=source, count=5000)
    back = o3d.io.read_point_cloud(str(tmp_path / "p.ply"))
    p = np.asarray(back.points)
    assert len(p) > 500 and back.has_colors() and back.has_normals()
    assert np.mean(distance_to_surface(toy, p) <= voxel) >= 0.95
    truth = toy.normal(torch.as_tensor(p)).numpy()
    assert np.mean((np.asarray(back.normals) * truth).sum(1)) >= 0.9
    assert np.abs(np.asarray(pcd.colors) - toy.color(torch.as_tensor(p)).numpy()).mean() < 0.1


def test_depth_points_of_a_few_views_lie_on_the_surface_with_its_colors(run, toy, voxel, tmp_path):
    pcd = export_pointcloud(run, tmp_path / "p.ply", source="depth", count=5000, views=8)
    p = np.asarray(pcd.points)
    assert len(p) > 500 and np.mean(distance_to_surface(toy, p) <= voxel) >= 0.95
    assert np.abs(np.asarray(pcd.colors) - toy.color(torch.as_tensor(p)).numpy()).mean() < 0.1


# ---- view -----------------------------------------------------------------------------------------------------
def test_cube_faces_keep_only_the_outer_faces_facing_out():
    quads, owner = cube_faces(np.array([[0, 0, 0], [1, 0, 0]]))
    assert len(quads) == 10 and sorted(np.bincount(owner)) == [5, 5]
    normals = np.cross(quads[:, 1] - quads[:, 0], quads[:, 2] - quads[:, 0])
    outward = quads.mean(1) - np.array([1.0, 0.5, 0.5])
    assert np.all((normals * outward).sum(1) > 0)


def test_voxel_view_shows_cells_or_coarser_bricks_in_world_units(run):
    cells = voxel_mesh(run, "density", "cells")
    bricks = voxel_mesh(run, "rgb", "bricks")
    assert 0 < len(bricks.triangles) < len(cells.triangles)
    assert np.all(cells.get_min_bound() <= [-0.75, -0.3, -0.3]) and np.all(cells.get_max_bound() >= [0.69, 0.3, 0.3])
    assert np.all(bricks.get_min_bound() <= cells.get_min_bound() + 1e-9)


# ---- CLI ------------------------------------------------------------------------------------------------------
def cli(*args, drop_env: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `python -m voxnerf ARGS` on one torch thread, without the environment variables `drop_env`."""
    env = {k: v for k, v in os.environ.items() if k not in drop_env} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "voxnerf", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env=env)


def test_export_cli_writes_files_into_new_folders_at_the_automatic_iso_value_by_default(run_dir, tmp_path):
    mesh, points = tmp_path / "new" / "m.ply", tmp_path / "new" / "deeper" / "p.ply"
    r = cli("export", run_dir, "--mesh", mesh, "--pointcloud", points, "--num-points", "3000", "--device", "cpu",
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert mesh.stat().st_size > 0 and points.stat().st_size > 0
    assert re.search(r"iso auto: [0-9.]+ \(silhouette IoU (0\.9[5-9]|1\.0)", r.stdout), r.stdout
    for text in (f"wrote {mesh}", "vertices", "faces", "points", "world bounds"):
        assert text in r.stdout


def test_a_run_no_iso_value_matches_is_refused_by_the_automatic_iso_and_nothing_is_written(scene_root, toy,
                                                                                          tmp_path):
    fog = analytic_run(scene_root, toy, tmp_path / "fog", thinned=1e-4)
    r = cli("export", fog, "--mesh", tmp_path / "m.ply", "--device", "cpu")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("voxnerf: error: --iso auto: no iso value")
    assert "best IoU 0.000 < 0.5" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.ply").exists()


def test_the_demo_refuses_a_run_too_short_to_mesh_with_what_to_run_instead(scene_root, toy, tmp_path):
    fog = analytic_run(scene_root, toy, tmp_path / "fog", thinned=1e-4)
    with pytest.raises(VoxnerfError, match="no iso value") as refused:
        demo_export_step(fog, 20.0)
    assert "longer than 20 s (voxnerf demo --max-time 60)" in str(refused.value)
    assert f"voxnerf export {fog} --mesh mesh.ply --iso 0.5" in str(refused.value)
    assert not (fog / "mesh.ply").exists() and not (fog / "points.ply").exists()


def test_view_screenshot_shows_the_object_on_a_headless_machine(run_dir, tmp_path):
    out = tmp_path / "view.png"
    r = cli("view", run_dir, "--screenshot", out, "--width", "160", "--height", "120", "--device", "cpu",
            drop_env=("DISPLAY", "WAYLAND_DISPLAY"))
    assert r.returncode == 0, r.stderr
    image = iio.imread(out)[..., :3].astype(int)
    assert image.shape == (120, 160, 3)
    differs = np.abs(image - 255).sum(-1) > 30
    assert differs[50:70, 70:90].mean() > 0.5, "the object is at the center"
    assert not differs[:5, :5].any(), "the corner is background"


@pytest.mark.parametrize("args, message", [
    (["export", "missing_run", "--mesh", "m.ply"], "missing_run"),
    (["export", "{run}", "--mesh", "m.stl"], "unsupported format"),
    (["export", "{run}", "--pointcloud", "README.md/p.ply"], "README.md is a file, not a folder"),
    (["export", "{run}", "--mesh", "m.ply", "--bbox", "1,2,3"], "--bbox"),
    (["export", "{run}"], "nothing to do"),
    (["export", "{run}", "--mesh", "m.ply", "--views", "4"], "--views"),
    (["export", "{run}", "--mesh", "m.ply", "--texture"], "a texture needs .obj or .glb"),
    (["export", "{run}", "--mesh", "m.glb", "--texture-size", "8192"], "--texture-size 8192"),
    (["view", "{run}", "--screenshot", "v.jpg"], ".png"),
])
def test_bad_input_gives_a_one_line_error(run_dir, monkeypatch, capsys, args, message):
    monkeypatch.setattr(sys, "argv", ["voxnerf", *(a.format(run=run_dir) for a in args)])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("voxnerf: error:") and message in err


def test_crop_box_outside_the_volume_is_an_error(run):
    with pytest.raises(VoxnerfError, match="misses"):
        crop_box(run, np.array([[5.0, 5, 5], [6, 6, 6]]))


# ---- a trained run --------------------------------------------------------------------------------------------
def test_every_export_runs_on_a_briefly_trained_run(scene_root, tmp_path):
    cfg = load_config(None, [{
        "levels": one_level(16), "max_steps": 80, "log_every": 40,
        "optim": {"lr_grid": 0.3, "min_rays": 256, "max_rays": 512, "target_samples": 8192},
        "occupancy": {"warmup_steps": 20, "update_every": 8},
    }])
    Trainer(load_scene(scene_root), cfg, tmp_path / "run", torch.device("cpu"), quiet=True).train()
    trained = load_run(tmp_path / "run")
    assert len(export_mesh(trained, tmp_path / "m.ply", iso=0.3).triangles) > 0
    assert len(export_mesh(trained, tmp_path / "t.ply", method="tsdf", min_component=0.0).triangles) > 0
    light = export_mesh(trained, tmp_path / "t.glb", method="tsdf", min_component=0.0, target_faces=500)
    assert 0 < len(light.triangles) <= 500 and light.has_textures()
    for source in ("grid", "depth"):
        assert len(export_pointcloud(trained, tmp_path / f"{source}.ply", source=source, count=1000).points) > 0


# ---- the subject of an unbounded run ---------------------------------------------------------------------------
def plane_and_ball(height: float) -> o3d.geometry.TriangleMesh:
    """A 4 x 4 plane of 40 x 40 squares at z = `height` and a ball of radius 0.3 at the origin, one mesh."""
    u = np.linspace(-2, 2, 41)
    x, y = np.meshgrid(u, u, indexing="ij")
    vertices = np.stack([x.ravel(), y.ravel(), np.full(x.size, height)], -1)
    quads = np.arange(41 * 41).reshape(41, 41)[:-1, :-1].ravel()
    faces = np.concatenate([np.stack([quads, quads + 41, quads + 1], -1), np.stack([quads + 1, quads + 41, quads + 42], -1)])
    plane = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(vertices), o3d.utility.Vector3iVector(faces))
    return plane + o3d.geometry.TriangleMesh.create_sphere(0.3, 20)


def half_ring_looking_down(pitch: float) -> Cameras:
    """16 cameras on half a circle of radius 3 around the origin (y < 0), each looking at it from `pitch` degrees
    above the horizontal (+z up), as a phone walked half around an object looking down on it."""
    azimuth = np.linspace(np.pi * 1.05, np.pi * 1.95, 16)
    tilt = np.radians(pitch)
    eyes = 3 * np.stack([np.cos(tilt) * np.cos(azimuth), np.cos(tilt) * np.sin(azimuth), np.full(16, np.sin(tilt))], -1)
    c2w = np.stack([look_at(eye, np.zeros(3), np.array([0.0, 0.0, 1.0])) for eye in eyes])
    return Cameras(c2w, np.tile([50.0, 50.0, 32.0, 32.0], (16, 1)), np.tile([64, 64], (16, 1)), np.zeros((16, 4)))


def ground_cut(mesh: o3d.geometry.TriangleMesh, cameras: Cameras) -> o3d.geometry.TriangleMesh:
    ground = find_ground(mesh, cameras, voxel=0.05)
    return mesh if ground is None else cut_ground(mesh, ground, voxel=0.05)


def test_the_ground_below_the_cameras_focus_is_cut_and_the_ball_on_it_kept():
    cameras = vs.get_capture("unbounded").cameras(12, 16, seed=0)  # a ring around the origin, above z = 0, +z up
    mesh = ground_cut(plane_and_ball(-0.5), cameras)  # the ball 0.2 above it: past the 2-voxel seam
    points = np.asarray(mesh.vertices)
    assert len(points) == len(o3d.geometry.TriangleMesh.create_sphere(0.3, 20).vertices)
    assert np.allclose(np.linalg.norm(points, axis=1), 0.3)


def test_the_ground_is_found_under_steep_views_from_half_a_circle():
    """Cameras 60 degrees above the horizon over half a circle: the mean of their up directions leans 48 degrees
    toward the subject, yet each camera's up lies 60 degrees from the ground's normal."""
    cameras = half_ring_looking_down(60.0)
    mean_up = -cameras.c2w[:, :, 1].mean(0)
    assert np.degrees(np.arccos(mean_up[2] / np.linalg.norm(mean_up))) > 40
    ground = find_ground(plane_and_ball(-0.5), cameras, voxel=0.05)
    assert ground is not None and np.allclose(ground, [0, 0, 1, 0.5], atol=1e-3)
    assert len(cut_ground(plane_and_ball(-0.5), ground, voxel=0.05).vertices) == len(
        o3d.geometry.TriangleMesh.create_sphere(0.3, 20).vertices)


def test_a_wall_behind_the_subject_of_half_a_circle_is_not_taken_for_the_ground():
    """The plane of `plane_and_ball` stood up at y = 0.5 behind the ball, seen from the half circle's side (y < 0):
    every camera stands in front of it and its up direction turns away from the wall's normal."""
    wall = plane_and_ball(-0.5).rotate(o3d.geometry.get_rotation_matrix_from_xyz([np.pi / 2, 0, 0]), np.zeros(3))
    assert np.allclose(np.asarray(wall.vertices)[:1681, 1], 0.5)
    assert find_ground(wall, half_ring_looking_down(30.0), voxel=0.05) is None


def test_a_plane_above_the_cameras_focus_is_not_taken_for_the_ground():
    cameras = vs.get_capture("unbounded").cameras(12, 16, seed=0)
    assert find_ground(plane_and_ball(0.5), cameras, voxel=0.05) is None


def test_the_subject_box_holds_what_upright_portrait_views_all_frame_above_and_below_their_sphere():
    """16 level cameras on a ring of radius 3 with portrait images (48 x 96 pixels, focal 50): the sphere every one
    sees whole has the narrow width's radius (3 * sin(atan(24 / 50)) = 1.30); every camera also frames the points
    1.6 above and below the focus, which the box holds, and the box's height is more than its width."""
    azimuth = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    eyes = 3 * np.stack([np.cos(azimuth), np.sin(azimuth), np.zeros(16)], -1)
    cameras = Cameras(np.stack([look_at(eye, np.zeros(3), np.array([0.0, 0.0, 1.0])) for eye in eyes]),
                      np.tile([50.0, 50.0, 24.0, 48.0], (16, 1)), np.tile([48, 96], (16, 1)), np.zeros((16, 4)))
    box = subject_box(cameras)
    size = box[1] - box[0]
    assert box[0, 2] < -1.6 and box[1, 2] > 1.6 and size[2] > 1.5 * size[:2].max(), box
    assert np.all(size[:2] < 2 * 1.4), "no wider than the ring's views allow"


def test_pieces_of_ground_the_cut_leaves_go_and_so_does_what_lies_off_the_subjects_cylinder():
    """The ground under a ball on the ring's cameras: a flat patch 0.2 above the plane (4 voxels of 0.05: the
    floor bent under a reflection) goes with it; a second ball 1.5 from the vertical through the focus (the
    sphere every camera sees whole, the cylinder's radius, is 1.19 here) goes too; the ball at the focus stays."""
    cameras = vs.get_capture("unbounded").cameras(12, 16, seed=0)  # a ring around the origin, above z = 0, +z up
    patch = o3d.geometry.TriangleMesh.create_box(0.3, 0.3, 0.01).translate([1.0, 0.0, -0.3])
    aside = o3d.geometry.TriangleMesh.create_sphere(0.2, 10).translate([1.5, 0.0, 0.0])
    mesh = in_cylinder(plane_and_ball(-0.5) + patch + aside, cameras)
    ground = find_ground(mesh, cameras, voxel=0.05)
    assert ground is not None and np.allclose(ground, [0, 0, 1, 0.5], atol=1e-3)
    points = np.asarray(cut_ground(mesh, ground, voxel=0.05).vertices)
    assert len(points) == len(o3d.geometry.TriangleMesh.create_sphere(0.3, 20).vertices)
    assert np.allclose(np.linalg.norm(points, axis=1), 0.3)


def test_a_plain_mesh_export_of_an_unbounded_run_is_its_subject_not_the_room(tmp_path):
    """The toy 360 capture (a ball on a box at the origin, cameras on a ring at 2.6, a tiled shell at 15) trained
    briefly in a contracted space: a plain export (no method, no box) fuses a few views and keeps what lies around
    the cameras' focus."""
    folder = vs.make_capture("unbounded", tmp_path / "scene", "colmap", n_views=24, width=48, n_samples=64,
                             n_points=600)
    cfg = load_config(None, [{
        "space": "contract", "levels": [{"until": 1.0, "resolution": 64, "image_scale": 1.0}], "max_steps": 300,
        "log_every": 100, "optim": {"min_rays": 512, "max_rays": 1024},
        "occupancy": {"warmup_steps": 50, "update_every": 16},
    }])
    Trainer(load_scene(folder), cfg, tmp_path / "run", torch.device("cpu"), quiet=True).train()
    trained = load_run(tmp_path / "run")
    subject = export_mesh(trained, tmp_path / "subject.ply")
    points = np.asarray(subject.vertices)
    box = subject_box(trained.training_cameras())
    assert len(points) > 100 and np.all((points >= box[0] - 1e-6) & (points <= box[1] + 1e-6))
    truth = vs.get_capture("unbounded").objects
    distance = truth.sdf(torch.as_tensor(points, dtype=torch.float32)).abs().numpy()
    assert np.median(distance) < 0.1, "the subject's mesh lies on the ball and the box (the rest: a brief run's haze)"
