"""Toy real captures (unbounded 360°, forward-facing): their ground truth is right, and each format they are
written in loads back with the cameras they were rendered with, their images, near / far and sparse points."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.data.rays import image_rays
from voxnerf.errors import VoxnerfError
from voxnerf.scenes.backgrounds import Shell
from voxnerf.scenes.make_capture import render_capture_view

FORMATS = ("nerfstudio", "llff", "colmap")
# Small and fast: 10 views (views 0 and 8 held out), 16 x 12 pixels, 64 samples per ray, 400 sparse points.
SMALL = {"n_views": 10, "width": 16, "n_samples": 64, "n_points": 400}


@pytest.fixture(scope="module", params=list(toy_scenes.CAPTURES))
def rendered(request):
    """(capture name, in-memory scene, ground-truth depths) as `capture_scene` renders it."""
    scene, depths = toy_scenes.capture_scene(request.param, **SMALL)
    return request.param, scene, depths


@pytest.fixture(scope="module")
def written(rendered, tmp_path_factory):
    """Format -> (folder written by make_capture, scene loaded back from it), for every format in FORMATS."""
    name, _, _ = rendered
    out = {}
    for fmt in FORMATS:
        folder = toy_scenes.make_capture(name, tmp_path_factory.mktemp(f"{name}-{fmt}"), fmt, **SMALL)
        out[fmt] = folder, load_scene(folder)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_loads_back_with_the_rendered_cameras_images_and_splits(rendered, written, fmt):
    _, scene, _ = rendered
    _, loaded = written[fmt]
    assert loaded.format == fmt
    np.testing.assert_allclose(loaded.cameras.c2w, scene.cameras.c2w, atol=1e-6, rtol=0)
    np.testing.assert_allclose(loaded.cameras.intrinsics, scene.cameras.intrinsics, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(loaded.cameras.sizes, scene.cameras.sizes)
    assert not loaded.cameras.distortion.any()
    for got, want in zip(loaded.images, scene.images, strict=True):
        np.testing.assert_array_equal(got, want)
    assert loaded.background is None and loaded.masks is None
    np.testing.assert_array_equal(loaded.splits["test"], [0, 8])
    np.testing.assert_array_equal(loaded.splits["train"], [1, 2, 3, 4, 5, 6, 7, 9])


def test_llff_near_far_are_the_views_ground_truth_z_depth_bounds(rendered, written):
    _, scene, depths = rendered
    folder, loaded = written["llff"]
    table = np.load(folder / "poses_bounds.npy")
    for i, depth in enumerate(depths):
        _, dirs = image_rays(scene.cameras, i, dtype=torch.float64)
        z = depth.reshape(-1) * (dirs.numpy() @ scene.cameras.forward[i])
        np.testing.assert_allclose(table[i, 15:], [z.min(), z.max()], rtol=1e-12)
    assert loaded.near == table[:, 15].min() and loaded.far == table[:, 16].max()


def test_colmap_sparse_points_come_back_and_near_far_match_the_ground_truth_depths(rendered, written):
    _, scene, _ = rendered
    folder, loaded = written["colmap"]
    np.testing.assert_allclose(loaded.points, scene.points, atol=1e-9, rtol=0)
    assert 100 < len(loaded.points) <= SMALL["n_points"]
    assert [p.name for p in (folder / "sparse" / "0").glob("points3D.*")] == ["points3D.bin"]
    # The loader takes near / far from the z-depths of the points each image sees, anywhere in the image; the
    # ground-truth bounds are over pixel centers only, hence the margin.
    lo, hi = scene.extras["view_bounds"][:, 0].min(), scene.extras["view_bounds"][:, 1].max()
    assert 0.95 * lo <= loaded.near < loaded.far <= 1.05 * hi


def test_nerfstudio_folder_has_near_before_far_and_explicit_splits(written):
    folder, loaded = written["nerfstudio"]
    meta = json.loads((folder / "transforms.json").read_text())
    assert meta["test_filenames"] == ["images/frame_00001.png", "images/frame_00009.png"]
    assert 0 < loaded.near < loaded.far


def test_depth_files_and_groundtruth_describe_the_rendered_views(rendered, written):
    name, scene, depths = rendered
    folder, _ = written["colmap"]
    for i, depth in enumerate(depths):
        np.testing.assert_array_equal(np.load(folder / "depth" / f"view_{i:03d}.npy"), depth)
    truth = json.loads((folder / "groundtruth.json").read_text())
    assert truth["scene"] == name and truth["format"] == "colmap"
    assert truth["layout"] == toy_scenes.get_capture(name).layout
    np.testing.assert_array_equal(np.array(truth["cameras"]["c2w_opencv"]), scene.cameras.c2w)
    assert truth["splits"]["test"] == [0, 8] and truth["points"] == len(scene.points)


def test_images_are_opaque_and_the_background_is_a_pattern_not_a_flat_color(rendered):
    _, scene, _ = rendered
    for image in scene.images:
        assert image.shape == (12, 16, 3)
    pixels = np.concatenate([im.reshape(-1, 3) for im in scene.images]).astype(np.float64)
    assert pixels.std(axis=0).min() > 40


def test_sparse_points_lie_on_an_object_or_on_the_background(rendered):
    name, scene, _ = rendered
    capture = toy_scenes.get_capture(name)
    points = torch.from_numpy(scene.points)
    on_object = capture.objects.sdf(points).abs() < 0.03  # about one sample spacing (2 * 0.85 / 64)
    if isinstance(capture.background, Shell):
        on_background = (points.norm(dim=-1) - capture.background.radius).abs() < 1e-3
    else:
        on_background = (points[:, 1] - capture.background.point[1]).abs() < 1e-3
    assert bool((on_object | on_background).all())
    assert 0.25 < float(on_object.double().mean()) <= 0.5  # half, less where a tiny view has few object pixels


def test_background_depth_is_the_analytic_distance_to_the_background(rendered):
    name, scene, depths = rendered
    capture = toy_scenes.get_capture(name)
    _, depth, opacity = render_capture_view(capture, scene.cameras, 0, SMALL["n_samples"])
    np.testing.assert_array_equal(depth, depths[0])
    origins, dirs = image_rays(scene.cameras, 0, dtype=torch.float64)
    clear = opacity.reshape(-1) < 1e-6
    assert clear.sum() > 50
    expected = capture.background.hit(origins, dirs)[torch.from_numpy(clear)]
    np.testing.assert_allclose(depth.reshape(-1)[clear], expected.numpy(), rtol=1e-5)


def test_forward_cameras_face_one_way_and_unbounded_cameras_surround_the_objects():
    forward = toy_scenes.get_capture("forward").cameras(12, 16, seed=0)
    assert np.all(forward.forward @ np.array([0.0, 1.0, 0.0]) > np.cos(np.radians(20)))
    ring = toy_scenes.get_capture("unbounded").cameras(12, 16, seed=0)
    np.testing.assert_allclose(np.linalg.norm(ring.centers, axis=-1), 2.6)
    azimuth = np.sort(np.arctan2(ring.centers[:, 1], ring.centers[:, 0]))
    assert np.diff(np.concatenate([azimuth, azimuth[:1] + 2 * np.pi])).max() < np.radians(31)


def test_unknown_format_or_uneven_downscale_is_a_one_line_error(tmp_path):
    with pytest.raises(VoxnerfError, match="unknown scene format 'ply'"):
        toy_scenes.make_capture("forward", tmp_path / "a", "ply", **SMALL)
    with pytest.raises(VoxnerfError, match="downscale 3 does not divide 16x12"):
        toy_scenes.make_capture("forward", tmp_path / "b", "llff", downscales=(3,), **SMALL)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_downscaled_copies_load_with_scaled_intrinsics(tmp_path):
    folder = toy_scenes.make_capture("unbounded", tmp_path / "u", "llff", downscales=(2,), **SMALL)
    half = load_scene(folder, downscale=2)
    np.testing.assert_array_equal(half.cameras.sizes[0], [8, 6])
    full = load_scene(folder, with_images=False)
    np.testing.assert_allclose(half.cameras.intrinsics, full.cameras.intrinsics / 2, rtol=1e-12)
