"""Toy scenes: their ground truth is exact, their reference renders are right, their folders load."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.data.cameras import focal_from_fov
from voxnerf.data.rays import image_rays
from voxnerf.errors import VoxnerfError
from voxnerf.cli.main import app
from voxnerf.scenes.colors import FACE_PALETTE

SPHERE_RADIUS = toy_scenes.get("sphere").parts[0].shape.radius


@pytest.fixture(scope="module")
def sphere_folder(tmp_path_factory):
    return toy_scenes.make_scene("sphere", tmp_path_factory.mktemp("sphere"), n_train=3, n_val=1, n_test=2, size=16, n_samples=128)


@pytest.fixture(scope="module")
def box_folder(tmp_path_factory):
    return toy_scenes.make_scene("box", tmp_path_factory.mktemp("box"), n_train=12, n_val=0, n_test=0, size=24, n_samples=256)


def ray_sphere_entry(origins: torch.Tensor, dirs: torch.Tensor, radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Distance to where each ray enters the origin-centered sphere, and each ray's closest approach to the center."""
    b = (origins * dirs).sum(-1)
    closest = (origins - b[:, None] * dirs).norm(dim=-1)
    return -b - torch.sqrt((radius**2 - closest**2).clamp(min=0)), closest


def test_reference_renderer_matches_closed_form_for_uniform_fog():
    sigma, length, color = 1.5, 2.0, torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64)

    def fog(x, d):
        return torch.full((len(x),), sigma, dtype=x.dtype), color.expand(len(x), 3)

    origins, dirs = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    out = toy_scenes.render_rays(fog, origins, dirs, 0.0, length, n_samples=1000, background=torch.ones(3, dtype=torch.float64))
    opacity = 1 - math.exp(-sigma * length)
    depth = (1 - math.exp(-sigma * length) * (1 + sigma * length)) / sigma
    assert out.opacity.item() == pytest.approx(opacity, abs=1e-9)
    assert out.depth.item() == pytest.approx(depth, abs=1e-5)
    assert torch.allclose(out.rgb[0], color * opacity + (1 - opacity), atol=1e-9)


def test_reference_depth_of_sphere_matches_ray_sphere_intersection():
    scene = toy_scenes.get("sphere")
    cameras = toy_scenes.orbit_cameras(1, 32, seed=3)
    origins, dirs = image_rays(cameras, 0)
    near, far = toy_scenes.CAMERA_DISTANCE - 1, toy_scenes.CAMERA_DISTANCE + 1
    out = toy_scenes.render_rays(scene.field, origins, dirs, near, far, n_samples=1024)
    entry, closest = ray_sphere_entry(origins, dirs, SPHERE_RADIUS)
    hit, miss = closest < 0.5 * SPHERE_RADIUS, closest > SPHERE_RADIUS + 0.1
    assert hit.sum() > 20 and miss.sum() > 50
    assert torch.all(out.opacity[hit] > 0.999)
    assert torch.all(out.opacity[miss] < 1e-3)
    assert torch.all((out.depth[hit] / out.opacity[hit] - entry[hit]).abs() < 0.01)


def test_sphere_view_is_opaque_at_the_center_and_transparent_in_the_corners():
    scene = toy_scenes.get("sphere")
    rgba, depth = toy_scenes.render_view(scene, toy_scenes.orbit_cameras(1, 16, seed=0), 0, n_samples=256)
    assert rgba.shape == (16, 16, 4) and depth.shape == (16, 16)
    assert rgba[7:9, 7:9, 3].min() > 0.999
    assert rgba[[0, 0, -1, -1], [0, -1, 0, -1], 3].max() < 1e-3
    assert np.all(np.isinf(depth[[0, 0, -1, -1], [0, -1, 0, -1]]))
    assert abs(depth[8, 8] - (toy_scenes.CAMERA_DISTANCE - SPHERE_RADIUS)) < 0.01


def test_sphere_occupancy_is_exactly_the_cells_the_ball_touches():
    resolution = 32
    cell = 2 / resolution
    occupied = toy_scenes.get("sphere").occupancy(resolution)
    lo = -1 + cell * torch.arange(resolution, dtype=torch.float64)
    corner = torch.stack(torch.meshgrid(lo, lo, lo, indexing="ij"), -1)
    nearest_point = torch.maximum(corner, (corner + cell).clamp(max=0))
    gap = nearest_point.norm(dim=-1) - SPHERE_RADIUS
    assert torch.all(occupied[gap <= 0])
    assert not torch.any(occupied[gap > 0.11 * cell])
    assert occupied.sum() == pytest.approx(4 / 3 * math.pi * SPHERE_RADIUS**3 / cell**3, rel=0.3)


def test_two_objects_leave_the_space_between_them_empty():
    resolution = 32
    occupied = toy_scenes.get("two_objects").occupancy(resolution)
    x_lo = -1 + 2 / resolution * torch.arange(resolution)
    between = (x_lo >= -0.15) & (x_lo + 2 / resolution <= 0.21)
    assert between.sum() >= 4
    assert not occupied[between].any()
    assert occupied[x_lo < -0.15].any() and occupied[x_lo > 0.21].any()


def test_thin_torus_occupancy_is_a_ring_with_a_hole():
    occupied = toy_scenes.get("torus").occupancy(32)
    assert not occupied[14:18, 14:18, :].any()
    assert occupied[16 + 9, 16, 15:17].all() and occupied[16 - 10, 16, 15:17].all()
    assert not occupied[:, :, :14].any() and not occupied[:, :, 18:].any()


@pytest.mark.parametrize("name", list(toy_scenes.SCENES))
def test_surface_samples_lie_on_the_surface_with_normals_matching_autograd(name):
    scene = toy_scenes.get(name)
    points, normals = scene.sample_surface(2000, seed=1)
    assert points.shape == normals.shape == (2000, 3)
    assert scene.sdf(points).abs().max() < 1e-4
    assert torch.allclose(normals.norm(dim=-1), torch.ones(2000), atol=1e-5)
    assert (normals * scene.normal(points)).sum(-1).min() > 0.999
    assert points.norm(dim=-1).max() <= toy_scenes.SCENE_RADIUS
    assert torch.equal(points, scene.sample_surface(2000, seed=1)[0])


@pytest.mark.parametrize("name", list(toy_scenes.SCENES))
def test_sdf_is_the_distance_to_the_surface_outside(name):
    scene = toy_scenes.get(name)
    points, normals = scene.sample_surface(1000, seed=2, dtype=torch.float64)
    h = torch.linspace(1e-3, 0.05, 1000, dtype=torch.float64)
    assert torch.allclose(scene.sdf(points + h[:, None] * normals), h, atol=1e-9)


def test_density_is_full_inside_half_on_the_surface_and_vanishes_outside():
    scene = toy_scenes.get("sphere")
    x = torch.tensor([[0.0, 0.0, 0.0], [SPHERE_RADIUS, 0.0, 0.0], [0.0, SPHERE_RADIUS + 0.1, 0.0]])
    sigma = scene.density(x)
    assert sigma[0] == pytest.approx(toy_scenes.DENSITY_SCALE)
    assert sigma[1] == pytest.approx(toy_scenes.DENSITY_SCALE / 2)
    assert sigma[2] < 1e-3


def test_surface_samples_are_uniform_by_area():
    torus = toy_scenes.get("torus").parts[0].shape
    points, normals = toy_scenes.get("torus").sample_surface(20000, seed=0)
    outer_half = (normals[:, :2] * points[:, :2]).sum(-1) > 0
    expected = (math.pi * torus.major + 2 * torus.minor) / (2 * math.pi * torus.major)
    assert outer_half.float().mean().item() == pytest.approx(expected, abs=0.015)


def test_unknown_scene_names_the_known_ones():
    with pytest.raises(VoxnerfError, match="sphere, box, torus, two_objects"):
        toy_scenes.get("teapot")


def test_written_folder_loads_with_its_counts_size_focal_and_poses(sphere_folder):
    scene = load_scene(sphere_folder)
    assert {k: len(v) for k, v in scene.splits.items()} == {"train": 3, "val": 1, "test": 2}
    assert all(im.shape == (16, 16, 4) for im in scene.images)
    assert scene.cameras.intrinsics[:, 0] == pytest.approx(focal_from_fov(toy_scenes.CAMERA_ANGLE_X, 16))
    assert np.allclose(scene.cameras.c2w, toy_scenes.orbit_cameras(6, 16, seed=0).c2w)
    assert np.all(scene.bbox[0] <= -toy_scenes.SCENE_RADIUS) and np.all(scene.bbox[1] >= toy_scenes.SCENE_RADIUS)
    train, test = scene.cameras.centers[scene.splits["train"]], scene.cameras.centers[scene.splits["test"]]
    assert np.linalg.norm(train[:, None] - test[None], axis=-1).min() > 1e-3
    assert np.load(sphere_folder / "test" / "r_1_depth.npy").shape == (16, 16)
    truth = json.loads((sphere_folder / "groundtruth.json").read_text())
    assert truth["scene"] == "sphere" and truth["density"]["scale"] == toy_scenes.DENSITY_SCALE


def test_box_pixels_show_the_color_of_the_face_their_ray_hits(box_folder):
    loaded, box = load_scene(box_folder), toy_scenes.get("box")
    faces_seen, matches = set(), []
    for k, path in enumerate(loaded.image_paths):
        origins, dirs = image_rays(loaded.cameras, k)
        depth = torch.from_numpy(np.load(str(path)[: -len(".png")] + "_depth.npy").reshape(-1))
        rgba = torch.from_numpy(loaded.images[k].reshape(-1, 4).astype(np.float32) / 255)
        solid = (rgba[:, 3] > 0.99) & torch.isfinite(depth)
        hits = origins[solid] + depth[solid, None] * dirs[solid]
        assert box.sdf(hits).abs().quantile(0.95) < 0.02
        face = box.parts[0].shape.face(hits)
        faces_seen |= set(face.tolist())
        matches.append(((rgba[solid, :3] - torch.tensor(FACE_PALETTE)[face]).abs().amax(-1) < 0.05).float())
    assert torch.cat(matches).mean() > 0.95
    assert faces_seen == set(range(6))


def test_scene_list_prints_every_name_with_a_description():
    result = CliRunner().invoke(app, ["scene", "list"])
    assert result.exit_code == 0
    for name, scene in toy_scenes.SCENES.items():
        assert f"{name}  " in result.stdout and scene.description in result.stdout


def test_scene_make_writes_a_loadable_folder_and_prints_it(tmp_path):
    out = tmp_path / "torus"
    args = ["scene", "make", "torus", str(out), "--size", "8", "--views", "2", "--held-out", "1", "--samples", "64"]
    result = subprocess.run([sys.executable, "-m", "voxnerf", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert len(load_scene(out, with_images=False).image_paths) == 4


def test_scene_make_with_an_unknown_name_fails_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "voxnerf", "scene", "make", "teapot", str(tmp_path / "x")], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == ["voxnerf: error: unknown toy scene 'teapot' (known: sphere, box, torus, two_objects, unbounded, textured, forward)"]
    assert not (tmp_path / "x").exists()
