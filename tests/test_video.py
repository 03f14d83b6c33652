"""Orbit cameras for `voxnerf render`, and the depth picture."""

from __future__ import annotations

import numpy as np

from voxnerf.normalize import mean_pose
from voxnerf.video import depth_image, orbit_cameras, sweep_cameras


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
