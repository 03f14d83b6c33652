"""Camera paths for `voxnerf render` (orbit, sweep, spiral, interpolation, camera-path files), the depth picture."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voxnerf.data.normalize import mean_pose
from voxnerf.errors import SceneError
from voxnerf.view.path_file import load_camera_path, save_camera_path
from voxnerf.view.paths import interpolate_cameras, orbit_cameras, resized, spiral_cameras, sweep_cameras
from voxnerf.view.video import depth_image


def test_orbit_circles_the_center_at_the_cameras_distance_and_elevation_looking_at_it(make_scene):
    scene = make_scene(n=16)  # cameras 4 units from TARGET, above it (+z up)
    center = scene.bbox.mean(axis=0)
    orbit = orbit_cameras(scene.cameras, center, 12)
    offsets = orbit.centers - center
    distances = np.linalg.norm(offsets, axis=-1)
    assert np.allclose(distances, np.linalg.norm(scene.cameras.centers - center, axis=-1).mean())
    assert np.allclose(orbit.forward, -offsets / distances[:, None])
    heights = offsets @ np.array([0.0, 0.0, 1.0])
    assert heights.min() > 0 and np.ptp(heights) < 0.2 * distances[0]  # one ring above the object
    assert np.allclose(orbit.intrinsics, scene.cameras.intrinsics[0]) and (orbit.sizes == scene.cameras.sizes[0]).all()


def test_depth_picture_is_bright_near_dark_far_and_black_where_nothing_was_hit():
    depth = np.array([[1.0, 2.0, 3.0, 9.0]])
    opacity = np.array([[1.0, 1.0, 1.0, 0.1]])
    picture = depth_image(depth, opacity)
    assert picture.dtype == np.uint8
    assert picture[0, 0] > picture[0, 1] > picture[0, 2] > 0 and picture[0, 3] == 0


def test_sweep_stays_in_the_mean_image_plane_looking_the_mean_way():
    from test_space import forward_cameras

    cams = forward_cameras()
    center, rotation = mean_pose(cams)
    sweep = sweep_cameras(cams, 12)
    np.testing.assert_allclose(sweep.c2w[:, :, :3], np.broadcast_to(rotation, (12, 3, 3)))
    offsets = sweep.centers - center
    np.testing.assert_allclose(offsets @ rotation[:, 2], 0, atol=1e-12)  # no move along the view
    radius = np.linalg.norm(offsets, axis=-1)
    np.testing.assert_allclose(radius, radius[0])
    spread = np.linalg.norm((cams.centers - center) @ rotation[:, :2], axis=-1).mean()
    assert radius[0] == np.float64(spread)


def test_spiral_goes_between_the_lowest_and_highest_camera_around_the_center(make_scene):
    scene = make_scene(n=16)
    center = scene.bbox.mean(axis=0)
    spiral = spiral_cameras(scene.cameras, center, 40, faces_forward=False)
    up = np.array([0.0, 0.0, 1.0])
    sine = lambda c: (c.centers - center) @ up / np.linalg.norm(c.centers - center, axis=-1)  # noqa: E731
    assert sine(spiral).max() == pytest.approx(sine(scene.cameras).max(), abs=0.02)
    assert sine(spiral).min() == pytest.approx(sine(scene.cameras).min(), abs=0.02)
    assert np.allclose(spiral.forward, -(spiral.centers - center) / np.linalg.norm(spiral.centers - center, axis=-1,
                                                                                    keepdims=True))


def test_interpolated_path_passes_through_the_cameras_in_order_without_jumps(make_scene):
    cams = make_scene(n=6).cameras
    path = interpolate_cameras(cams, 101)
    np.testing.assert_allclose(path.c2w[0], cams.c2w[0], atol=1e-9)
    np.testing.assert_allclose(path.c2w[-1], cams.c2w[-1], atol=1e-9)
    for camera in cams.centers:  # every training camera lies on the path (within one step of it)
        assert np.linalg.norm(path.centers - camera, axis=-1).min() < np.linalg.norm(np.diff(path.centers, axis=0),
                                                                                     axis=-1).max()
    steps = np.linalg.norm(np.diff(path.centers, axis=0), axis=-1)
    ratios = steps[1:] / steps[:-1]
    assert ratios.min() > 0.75 and ratios.max() < 1.33  # the speed changes smoothly from frame to frame
    np.testing.assert_allclose(np.linalg.det(path.c2w[:, :, :3]), 1.0)


def test_a_camera_path_file_round_trips_and_follows_nerfstudio_conventions(make_scene, tmp_path):
    cams = resized(make_scene(n=5).cameras, 64, 48)
    save_camera_path(tmp_path / "p.json", cams, fps=12.0)
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["render_width"] == 64 and data["render_height"] == 48 and data["seconds"] == pytest.approx(5 / 12)
    gl = np.array(data["camera_path"][0]["camera_to_world"]).reshape(4, 4)
    np.testing.assert_allclose(gl[:3, 2], -cams.forward[0])  # OpenGL cameras look down their -z
    fov = np.radians(data["camera_path"][0]["fov"])
    assert 24 / np.tan(fov / 2) == pytest.approx(cams.intrinsics[0, 1])
    loaded, fps = load_camera_path(tmp_path / "p.json")
    assert fps == 12.0
    np.testing.assert_allclose(loaded.c2w, cams.c2w, atol=1e-12)
    np.testing.assert_allclose(loaded.intrinsics[:, 1], cams.intrinsics[:, 1])
    np.testing.assert_allclose(loaded.intrinsics[:, 2:], [[32, 24]] * 5)


def test_a_nerfstudio_identity_pose_looks_down_world_minus_z(tmp_path):
    meta = {"camera_type": "perspective", "render_width": 40, "render_height": 30, "fps": 24, "seconds": 1,
            "camera_path": [{"camera_to_world": np.eye(4).reshape(-1).tolist(), "fov": 90, "aspect": 4 / 3}]}
    (tmp_path / "p.json").write_text(json.dumps(meta))
    cameras, _ = load_camera_path(tmp_path / "p.json")
    np.testing.assert_allclose(cameras.forward[0], [0, 0, -1])
    assert cameras.intrinsics[0, 1] == pytest.approx(15.0)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(camera_type="fisheye"), "camera_type 'fisheye' is not supported"),
    (lambda m: m.update(camera_path=[]), "'camera_path' holds no cameras"),
    (lambda m: m["camera_path"][0].update(camera_to_world=[1, 2, 3]), "camera_path.0.*not 16 numbers"),
    (lambda m: m["camera_path"][0].pop("fov"), "missing key 'fov' in camera_path.0"),
    (lambda m: m.pop("render_width"), "missing key 'render_width'"),
])
def test_a_bad_camera_path_file_is_named_with_its_problem(tmp_path, change, message):
    meta = {"camera_type": "perspective", "render_width": 40, "render_height": 30, "fps": 24,
            "camera_path": [{"camera_to_world": np.eye(4).reshape(-1).tolist(), "fov": 50}]}
    change(meta)
    (tmp_path / "p.json").write_text(json.dumps(meta))
    with pytest.raises(SceneError, match=message) as error:
        load_camera_path(tmp_path / "p.json")
    assert "p.json" in str(error.value)


def test_a_smooth_path_turns_a_camera_in_place_evenly_and_interpolates_its_values():
    from scipy.spatial.transform import Rotation

    from voxnerf.view.paths import smooth_path

    turns = Rotation.from_euler("y", [[0.0], [90.0]], degrees=True).as_matrix()
    c2w = np.concatenate([turns, np.zeros((2, 3, 1))], -1)  # one point, two headings
    poses, fovs = smooth_path(c2w, 5, np.array([40.0, 60.0]))
    angles = np.degrees((Rotation.from_matrix(poses[:, :, :3]) * Rotation.from_matrix(turns[0]).inv()).magnitude())
    assert np.allclose(angles, [0, 22.5, 45, 67.5, 90], atol=0.5)  # no jump: the turn takes the whole path
    assert np.allclose(poses[:, :, 3], 0) and np.allclose(fovs, [40, 45, 50, 55, 60])
