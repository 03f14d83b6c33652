"""detect_layout tells object captures, forward-facing captures and unbounded 360° captures apart; `voxnerf info`
prints the layout and draws a top view of the cameras."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from typer.testing import CliRunner

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras
from voxnerf.data.layout import axis_spread, convergence_depth, detect_layout
from voxnerf.data.scene import Scene
from voxnerf.cli.main import app
from voxnerf.scenes.make import look_at

SMALL = {"n_views": 10, "width": 16, "n_samples": 32, "n_points": 100}


def scene_of(c2w: np.ndarray, fmt: str = "colmap", background=None, masks=None) -> Scene:
    """A Scene with cameras c2w (N, 3, 4) and nothing else that matters to the layout."""
    n = len(c2w)
    cameras = Cameras(c2w, np.tile([20.0, 20.0, 8.0, 6.0], (n, 1)), np.tile([16, 12], (n, 1)), np.zeros((n, 4)))
    return Scene(root=Path("synthetic"), format=fmt, image_paths=[Path(f"{i}.png") for i in range(n)], cameras=cameras,
                 splits={"train": np.arange(n)}, bbox=np.array([[-1.0] * 3, [1.0] * 3]), near=0.1, far=10.0,
                 background=background, masks=masks)


def around(n: int = 16, distance: float = 3.0, arc_degrees: float = 360.0) -> np.ndarray:
    """(n, 3, 4) cameras on a circle of `distance` 20 degrees above the origin over `arc_degrees`, looking at it."""
    azimuth = np.radians(np.linspace(0, arc_degrees, n, endpoint=arc_degrees < 360))
    elevation = np.radians(20.0)
    centers = distance * np.stack([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
                                   np.full(n, np.sin(elevation))], -1)
    return np.stack([look_at(c) for c in centers])


def grid_centers() -> np.ndarray:
    """(12, 3) camera centers on a 4 x 3 grid, 1.2 x 0.8 wide, in the plane y = -3."""
    x, z = np.meshgrid(np.linspace(-0.6, 0.6, 4), np.linspace(-0.4, 0.4, 3))
    return np.stack([x.ravel(), np.full(12, -3.0), z.ravel()], -1)


def grid(targets: np.ndarray) -> np.ndarray:
    """(12, 3, 4) cameras at `grid_centers`, camera k looking at targets[k] (12, 3)."""
    return np.stack([look_at(c, t) for c, t in zip(grid_centers(), targets)])


def test_cameras_all_around_with_opaque_images_are_an_unbounded_capture():
    assert detect_layout(scene_of(around())) == "unbounded"


def test_the_same_cameras_with_alpha_or_masks_are_an_object_capture():
    assert detect_layout(scene_of(around(), background=np.ones(3))) == "object"
    assert detect_layout(scene_of(around(), masks=[np.ones((12, 16), bool)] * 16)) == "object"


@pytest.mark.parametrize("fmt", ["blender", "neus"])
def test_the_same_cameras_in_an_object_format_are_an_object_capture(fmt):
    assert detect_layout(scene_of(around(), fmt=fmt)) == "object"


def test_parallel_cameras_on_a_plane_are_forward_facing():
    c2w = grid(grid_centers() + [0.0, 1.0, 0.0])
    assert convergence_depth(scene_of(c2w).cameras) == np.inf
    assert detect_layout(scene_of(c2w)) == "forward"


def test_a_hand_held_grid_aimed_at_a_point_ahead_is_forward_facing():
    c2w = grid(np.random.default_rng(0).uniform(-0.1, 0.1, (12, 3)))
    assert convergence_depth(scene_of(c2w).cameras) == pytest.approx(3.0, abs=0.2)
    assert detect_layout(scene_of(c2w)) == "forward"


def test_cameras_fanning_out_a_little_are_forward_facing():
    c2w = grid(grid_centers() * [4.0, -1.0, 4.0])
    assert detect_layout(scene_of(c2w)) == "forward"


def test_a_narrow_arc_close_around_an_object_is_not_forward_facing():
    c2w = around(8, distance=2.0, arc_degrees=60.0)
    assert axis_spread(scene_of(c2w).cameras) < 35
    assert detect_layout(scene_of(c2w)) == "unbounded"


def test_cameras_turning_in_place_are_unbounded():
    directions = around(12)[:, :, 3]
    c2w = np.stack([look_at(np.zeros(3) + 1e-3 * d, d) for d in directions])
    assert detect_layout(scene_of(c2w)) == "unbounded"


def test_up_is_the_level_cameras_vertical_over_half_a_circle_of_steep_views():
    """A phone walked half around an object, looking down on it from 60 degrees: the mean of the cameras' up
    directions leans toward the object, the direction every camera's x axis is level with is +z."""
    azimuth = np.radians(np.linspace(190, 350, 12))
    tilt = np.radians(60.0)
    centers = 3 * np.stack([np.cos(tilt) * np.cos(azimuth), np.cos(tilt) * np.sin(azimuth), np.full(12, np.sin(tilt))], -1)
    cameras = scene_of(np.stack([look_at(c) for c in centers])).cameras
    mean = -cameras.c2w[:, :, 1].mean(0)
    assert np.degrees(np.arccos(mean[2] / np.linalg.norm(mean))) > 40
    assert np.allclose(cameras.up, [0, 0, 1], atol=1e-9)


def test_up_of_a_sweep_whose_x_axes_are_parallel_is_its_mean_up_even_rolled():
    """A forward sweep's x axes leave up free about them: up is then the cameras' own up, rolled with them."""
    c2w = grid(np.tile([0.0, 0.0, 0.0], (12, 1)) + grid_centers() * [1, 0, 1])  # parallel: each looks straight ahead
    roll = np.radians(10.0)
    turn = np.array([[np.cos(roll), -np.sin(roll), 0], [np.sin(roll), np.cos(roll), 0], [0, 0, 1]])  # about z (forward)
    c2w[:, :, :3] = c2w[:, :, :3] @ turn
    cameras = scene_of(c2w).cameras
    rolled_up = -c2w[0, :, 1]
    assert np.degrees(np.arccos(rolled_up[2])) == pytest.approx(10.0)
    assert np.allclose(cameras.up, rolled_up, atol=1e-9)


@pytest.mark.parametrize("name, fmt", [("unbounded", "colmap"), ("unbounded", "nerfstudio"), ("forward", "llff"),
                                       ("forward", "colmap")])
def test_toy_captures_are_detected_as_what_they_stand_for(tmp_path, name, fmt):
    folder = toy_scenes.make_capture(name, tmp_path / name, fmt, **SMALL)
    assert detect_layout(load_scene(folder, with_images=False)) == name


def test_the_toy_sphere_in_the_blender_format_is_an_object(tmp_path):
    folder = toy_scenes.make_scene("sphere", tmp_path / "sphere", n_train=6, n_val=0, n_test=0, size=8, n_samples=16)
    assert detect_layout(load_scene(folder, with_images=False)) == "object"


def test_info_prints_the_layout_and_draws_a_top_view_png(tmp_path):
    folder = toy_scenes.make_capture("forward", tmp_path / "forward", "colmap", **SMALL)
    plot = tmp_path / "plots" / "top.png"
    result = CliRunner().invoke(app, ["info", str(folder), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "layout      forward" in result.output and str(plot) in result.output
    image = iio.imread(plot)[..., :3].reshape(-1, 3).astype(int)
    drawn = np.any(image < 200, axis=1)
    assert 0.01 < drawn.mean() < 0.5
    blue = (image[:, 2] > 150) & (image[:, 0] < 100)
    orange = (image[:, 0] > 200) & (image[:, 1] > 100) & (image[:, 1] < 180) & (image[:, 2] < 80)
    green = (image[:, 1] > 120) & (image[:, 0] < 100) & (image[:, 2] < 100)
    assert blue.sum() > 100 and orange.sum() > 100 and green.sum() > 100


def test_info_refuses_a_plot_file_it_cannot_write(tmp_path):
    folder = toy_scenes.make_capture("forward", tmp_path / "forward", "llff", **SMALL)
    result = CliRunner().invoke(app, ["info", str(folder), "--plot", str(tmp_path / "top.txt")])
    assert result.exit_code != 0 and "--plot" in str(result.exception)
    assert not (tmp_path / "top.txt").exists()
