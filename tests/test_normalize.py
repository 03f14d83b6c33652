"""Camera normalization on the toy captures: each layout gets its preset and space, and the space puts every
camera, every view frustum and every sparse point where that space expects them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras, look_at
from voxnerf.data.footprint import resolved_depth
from voxnerf.data.normalize import CAMERA_MARGIN, DISPARITY, NEAR_MARGIN, contract_space, space_for
from voxnerf.data.rays import image_rays
from voxnerf.train.presets import preset_for

SMALL = {"n_views": 16, "width": 24, "n_samples": 32, "n_points": 600}
OBJECT_RADIUS = 1.0  # world: every object of the toy captures lies inside this ball, the backgrounds beyond 5


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """(capture, format) -> the scene loaded back from the folder make_capture wrote."""
    out = {}
    for name, fmt in (("unbounded", "colmap"), ("forward", "colmap"), ("forward", "llff"), ("unbounded", "nerfstudio")):
        folder = toy_scenes.make_capture(name, tmp_path_factory.mktemp(f"{name}-{fmt}"), fmt, **SMALL)
        out[name, fmt] = load_scene(folder)
    return out


@pytest.mark.parametrize("key, preset, kind", [(("unbounded", "colmap"), "360", "contract"),
                                               (("unbounded", "nerfstudio"), "360", "contract"),
                                               (("forward", "colmap"), "llff", "ndc"),
                                               (("forward", "llff"), "llff", "ndc")])
def test_each_capture_gets_the_preset_and_space_of_its_layout(captures, key, preset, kind):
    from voxnerf.run.config import load_config
    from voxnerf.train.presets import preset_path

    name, _, _ = preset_for(captures[key])
    assert name == preset
    assert load_config(preset_path(name)).space == kind


@pytest.mark.parametrize("key, narrower", [(("forward", "llff"), True), (("unbounded", "colmap"), False)])
def test_a_cpu_without_native_bf16_trains_a_narrower_color_mlp_where_the_rule_kept_it(captures, key, narrower,
                                                                                       tmp_path, monkeypatch):
    """On a CPU whose `precision: auto` is fp32, configs/cpu-fp32.yaml goes over configs/cpu.yaml for the presets
    whose rows it raised (forward-facing, not unbounded: a color MLP half as wide), the note names it, and nothing
    else differs from the sizing on a CPU with native bf16."""
    from voxnerf.run.config import config_to_dict
    from voxnerf.train import presets
    from voxnerf.train.presets import build_config, default_config

    configs = {}
    for native in (True, False):
        said = []
        monkeypatch.setattr(presets, "cpu_has_fast_bf16", lambda: native)
        path, overlays = default_config(captures[key], tmp_path, False, torch.device("cpu"), said.append)
        configs[native] = config_to_dict(build_config(path, [], None, None, None, overlays))
        fp32_overlay = not native and narrower
        assert [p.name for p in overlays] == ["cpu.yaml", *(["cpu-fp32.yaml"] if fp32_overlay else [])]
        assert ("cpu-fp32.yaml" in said[0]) == fp32_overlay and all(p.is_file() for p in overlays)
    assert configs[False]["field"]["hidden"] == (32 if narrower else 64) and configs[True]["field"]["hidden"] == 64
    configs[False]["field"]["hidden"] = 64
    assert configs[False] == configs[True]


@pytest.mark.parametrize("inner", [0.5, 0.25])
def test_contracted_space_holds_where_rays_start_and_objects_inside_and_the_background_in_the_shell(captures, inner):
    scene = captures["unbounded", "colmap"]
    space = space_for(scene, "contract", inner)
    assert space.inner_scale == inner
    starts = scene.cameras.centers + NEAR_MARGIN * scene.near * scene.cameras.forward
    assert np.abs(space.world_to_unit(starts)).max() == pytest.approx(1 / CAMERA_MARGIN)
    assert space.near == pytest.approx(NEAR_MARGIN * scene.near * space.scale)
    radius = np.linalg.norm(scene.points, axis=-1)
    grid = space.to_grid(torch.as_tensor(space.world_to_unit(scene.points))).abs().amax(-1).numpy()
    inner = space.inner_scale
    assert np.all(grid[radius < OBJECT_RADIUS] < inner)  # objects: the inner box, the grid's middle
    far = grid[radius > 5]
    assert len(far) > 50 and np.all((far > inner) & (far < 1.0))  # the far shell: in the grid's outer shell
    assert space.far * (1 / space.scale) > 15  # rays march past the shell (world radius 15)


def ring_of_cameras(n: int, focal: float) -> Cameras:
    """n cameras evenly around the origin, looking at it: the first 2 units away, the others 4; each view's own near
    bound is 0.8 of its distance, so the scene's (the smallest) is 1.6."""
    angle = 2 * np.pi * np.arange(n) / n
    radius = np.where(np.arange(n) == 0, 2.0, 4.0)
    eyes = np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros(n)], 1)
    c2w = np.stack([look_at(eye, np.zeros(3), np.array([0.0, 0.0, 1.0])) for eye in eyes])
    return Cameras(c2w, np.tile([focal, focal, 50.0, 50.0], (n, 1)), np.tile([100, 100], (n, 1)), np.zeros((n, 4)),
                   near=0.8 * radius)


def test_the_resolved_depth_step_is_a_pixels_footprint_over_the_angle_to_the_nearest_view():
    cameras = ring_of_cameras(36, 500.0)
    # median depth 4 over the focal length: 0.008 a pixel; neighbours 10 degrees apart
    assert resolved_depth(cameras, np.zeros(3)) == pytest.approx(4 / 500 / np.radians(10))
    assert resolved_depth(cameras, np.zeros(3), 2.0) == pytest.approx(2 * 4 / 500 / np.radians(10))  # 2 px disparity
    assert resolved_depth(cameras.subset(np.array([1])), np.zeros(3)) == np.inf


@pytest.mark.parametrize("focal, box", [(5000.0, "own starts"), (2000.0, "own starts"), (800.0, "resolved"),
                                        (400.0, "every start")])
def test_the_contracted_box_shrinks_to_each_views_own_start_no_finer_than_the_views_resolve(focal, box):
    """The box holds every ray start at the scene's near bound (Mip-NeRF 360's box around the starts) unless the
    views have their own bounds: then it shrinks to hold those later starts, but its inner cells at the finest
    resolution never get finer than the depth step the views resolve (one that shifts DISPARITY pixels between
    neighbouring views: at 400 px focal length one pixel's step would still let the box shrink). Where the box of
    the own starts leaves its cells coarser than that step, the box takes a larger share of the grid, up to half."""
    cameras, inner, resolution = ring_of_cameras(36, focal), 0.25, 256
    space = contract_space(cameras, 1.6, inner, resolution)
    every_start = contract_space(cameras, 1.6, inner)
    own_starts = cameras.centers + NEAR_MARGIN * cameras.near[:, None] * cameras.forward
    reach = np.abs(space.world_to_unit(own_starts)).max()
    cell = 2 / (space.scale * space.inner_scale * resolution)  # world units
    step = resolved_depth(cameras, np.zeros(3), DISPARITY)
    if box == "own starts":
        assert reach == pytest.approx(1 / CAMERA_MARGIN) and inner < space.inner_scale <= 0.5
        assert cell == pytest.approx(step) if space.inner_scale < 0.5 else cell > step
    elif box == "resolved":
        assert reach < 1 / CAMERA_MARGIN and space.scale > every_start.scale  # between the two boxes
        assert cell == pytest.approx(step)
    else:
        assert space.scale == every_start.scale
        assert 2 / (every_start.scale * inner * resolution) < step  # capped: never a larger box than every start's
    if box != "own starts":
        assert space.inner_scale == inner  # cells at the step, or finer: the share stays
    assert space.near == pytest.approx(NEAR_MARGIN * 1.6 * space.scale)  # views without a bound start at the scene's


@pytest.mark.parametrize("fmt", ["colmap", "llff"])
def test_ndc_space_holds_every_sparse_point_and_every_training_pixel_ray(captures, fmt):
    scene = captures["forward", fmt]
    space = space_for(scene, "ndc")
    if scene.points is not None:
        g = space.to_grid(torch.as_tensor(space.world_to_unit(scene.points)))
        assert g.abs().amax() < 1.0  # every point inside the grid, in front of the near plane
    train = scene.split_indices("train")
    for i in train:
        origins, dirs = image_rays(scene.cameras, int(i), dtype=torch.float64)
        rays = space.march_rays(torch.as_tensor(space.world_to_unit(origins.numpy())), dirs)
        start, d = rays.origins, rays.dirs
        end = start + d * (2 / d[:, 2:3])
        assert torch.cat([start, end])[:, :2].abs().max() <= 1 + 1e-9


def test_ndc_near_plane_comes_from_the_data(captures):
    scene = captures["forward", "llff"]
    space = space_for(scene, "ndc")
    assert 1 / space.scale == pytest.approx(0.9 * scene.near)
    assert scene.near < 2.6 and scene.far > 5.5  # z-depths: objects from 2.4, the wall about 6 away


def test_box_space_holds_the_object_and_leaves_the_cameras_outside(tmp_path):
    root = toy_scenes.make_scene("sphere", tmp_path / "sphere", n_train=8, n_val=0, n_test=1, size=8, n_samples=16)
    scene = load_scene(root, with_images=False)
    space = space_for(scene, "box")
    assert np.all(np.abs(space.world_to_unit(scene.cameras.centers)).max(-1) > 1)
    surface = 0.6 * np.eye(3)  # the ball's radius is 0.6
    assert np.abs(space.world_to_unit(np.concatenate([surface, -surface]))).max() < 1
