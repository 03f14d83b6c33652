"""Every format: a scene written by voxnerf.data.formats.write_scene loads back with the same cameras, images and
splits."""

from __future__ import annotations

import dataclasses
import json

import imageio.v3 as iio
import numpy as np
import pytest
import torch

from voxnerf.data import load_scene
from voxnerf.data.formats import colmap, detect_format, neus, write_scene
from voxnerf.data.normalize import space_for
from voxnerf.data.rays import image_rays
from voxnerf.data.scene import SPLITS, split_every_nth

TOL = 1e-5
# (format, writer options, source fixture): each format gets the most general scene it can hold.
ROUND_TRIPS = [
    ("blender", {}, "pinhole_scene"),
    ("nerfstudio", {}, "general_scene"),
    ("nerfstudio", {"split_lists": True}, "general_scene"),
    ("llff", {}, "pinhole_scene"),
    ("colmap", {"binary": True}, "general_scene"),
    ("colmap", {"binary": False}, "general_scene"),
    ("neus", {}, "undistorted_scene"),
]
ROUND_TRIP_IDS = ["blender", "nerfstudio", "nerfstudio-split-lists", "llff", "colmap-bin", "colmap-txt", "neus"]


def written_order(fmt: str, scene) -> np.ndarray:
    """The original index of each image as the loader returns them (Blender regroups them by split file)."""
    if fmt == "blender":
        return np.concatenate([scene.splits[s] for s in SPLITS])
    return np.arange(len(scene.cameras))


def assert_same_cameras(loaded, original) -> None:
    np.testing.assert_allclose(loaded.c2w, original.c2w, atol=TOL, rtol=0)
    np.testing.assert_allclose(loaded.intrinsics, original.intrinsics, atol=TOL, rtol=0)
    np.testing.assert_allclose(loaded.distortion, original.distortion, atol=TOL, rtol=0)
    np.testing.assert_array_equal(loaded.sizes, original.sizes)


@pytest.fixture(params=range(len(ROUND_TRIPS)), ids=ROUND_TRIP_IDS)
def round_trip(request, tmp_path):
    """(format, writer options, original scene, scene loaded back from what the writer wrote)."""
    fmt, options, source = ROUND_TRIPS[request.param]
    scene = request.getfixturevalue(source)
    return fmt, options, scene, load_scene(write_scene(scene, fmt, tmp_path, **options))


def test_written_scene_loads_back_with_its_format_cameras_and_images(round_trip):
    fmt, _, scene, loaded = round_trip
    order = written_order(fmt, scene)
    assert loaded.format == fmt
    assert_same_cameras(loaded.cameras, scene.cameras.subset(order))
    assert len(loaded.images) == len(order)
    for image, i in zip(loaded.images, order):
        np.testing.assert_array_equal(image, scene.images[i])


def test_rays_of_loaded_cameras_match_the_original_rays(round_trip):
    fmt, _, scene, loaded = round_trip
    for j, i in list(enumerate(written_order(fmt, scene)))[::5]:
        for got, want in zip(image_rays(loaded.cameras, j, torch.float64), image_rays(scene.cameras, i, torch.float64)):
            torch.testing.assert_close(got, want, atol=TOL, rtol=0)


def test_splits_follow_the_format(round_trip):
    fmt, options, scene, loaded = round_trip
    if fmt == "blender":
        starts = np.cumsum([0] + [len(scene.splits[s]) for s in SPLITS])
        expected = {s: np.arange(starts[k], starts[k + 1]) for k, s in enumerate(SPLITS)}
    elif options.get("split_lists"):
        expected = scene.splits
    else:
        expected = split_every_nth(len(scene.cameras))
    assert set(loaded.splits) == set(expected)
    for split, index in expected.items():
        np.testing.assert_array_equal(loaded.splits[split], index)


def test_detection_names_the_written_format(round_trip, tmp_path):
    fmt, _, _, loaded = round_trip
    assert detect_format(loaded.root).NAME == fmt


def test_loading_without_images_measures_the_same_cameras(round_trip):
    fmt, _, scene, loaded = round_trip
    light = load_scene(loaded.root, with_images=False)
    assert light.images is None and light.masks is None
    assert_same_cameras(light.cameras, loaded.cameras)
    np.testing.assert_allclose(light.bbox, loaded.bbox)


def test_masks_load_back_where_the_format_has_them(general_scene, undistorted_scene, tmp_path):
    for fmt, scene in (("nerfstudio", general_scene), ("neus", undistorted_scene)):
        loaded = load_scene(write_scene(scene, fmt, tmp_path / fmt))
        assert len(loaded.masks) == len(scene.masks)
        for got, want in zip(loaded.masks, scene.masks):
            np.testing.assert_array_equal(got, want)
        assert len(load_scene(loaded.root, with_images=False).extras["mask_paths"]) == len(scene.masks)


def test_rgba_images_get_a_white_background_and_opaque_ones_none(pinhole_scene, general_scene, tmp_path):
    rgba = load_scene(write_scene(pinhole_scene, "llff", tmp_path / "rgba"), with_images=False)
    rgb = load_scene(write_scene(general_scene, "colmap", tmp_path / "rgb"), with_images=False)
    assert rgba.background.tolist() == [1, 1, 1] and rgb.background is None


def test_colmap_keeps_the_sparse_points_and_bounds_them_robustly(general_scene, tmp_path):
    loaded = load_scene(write_scene(general_scene, "colmap", tmp_path))
    np.testing.assert_allclose(loaded.points, general_scene.points, atol=TOL, rtol=0)
    np.testing.assert_allclose(loaded.bbox, np.percentile(general_scene.points, [1, 99], axis=0))
    depths = np.linalg.norm(general_scene.points[:, None] - general_scene.cameras.centers[None], axis=-1)
    assert depths.min() - 1.0 < loaded.near < loaded.far < depths.max() + 1.0


def test_colmap_without_points_bounds_the_scene_from_the_cameras(make_scene, tmp_path):
    loaded = load_scene(write_scene(make_scene(points=False), "colmap", tmp_path))
    assert loaded.points is None
    assert np.all(loaded.bbox[0] < [0.1, -0.2, 0.3]) and np.all([0.1, -0.2, 0.3] < loaded.bbox[1])


@pytest.mark.parametrize("model, intrinsics, distortion", [
    ("SIMPLE_PINHOLE", (30.0, 30.0, 11.3, 10.7), (0.0, 0.0, 0.0, 0.0)),
    ("PINHOLE", (30.0, 28.0, 11.3, 10.7), (0.0, 0.0, 0.0, 0.0)),
    ("SIMPLE_RADIAL", (30.0, 30.0, 11.3, 10.7), (0.05, 0.0, 0.0, 0.0)),
    ("RADIAL", (30.0, 30.0, 11.3, 10.7), (0.05, -0.01, 0.0, 0.0)),
    ("OPENCV", (30.0, 30.0, 11.3, 10.7), (0.05, -0.01, 0.002, 0.0)),
])
@pytest.mark.parametrize("binary", [True, False], ids=["bin", "txt"])
def test_each_colmap_camera_model_maps_onto_fx_fy_cx_cy_k1_k2_p1_p2(
    make_scene, tmp_path, model, intrinsics, distortion, binary
):
    scene = make_scene(n=3, intrinsics=intrinsics, distortion=distortion, points=False)
    loaded = load_scene(write_scene(scene, "colmap", tmp_path, binary=binary))
    assert_same_cameras(loaded.cameras, scene.cameras)
    cameras = colmap.read_model(tmp_path / "sparse" / "0").cameras
    assert [c[0] for c in cameras.values()] == [model]


def test_colmap_model_directly_in_sparse_is_found(general_scene, tmp_path):
    write_scene(general_scene, "colmap", tmp_path)
    (tmp_path / "sparse" / "0").rename(tmp_path / "model")
    (tmp_path / "sparse").rmdir()
    (tmp_path / "model").rename(tmp_path / "sparse")
    assert_same_cameras(load_scene(tmp_path, with_images=False).cameras, general_scene.cameras)


def test_quaternions_round_trip_every_rotation_including_half_turns():
    rng = np.random.default_rng(1)
    rotations = [np.linalg.qr(rng.normal(size=(3, 3)))[0] for _ in range(20)]
    half_turns = [np.diag(d) for d in ([1, -1, -1], [-1, 1, -1], [-1, -1, 1])]
    rotations = [r * np.sign(np.linalg.det(r)) for r in rotations] + half_turns
    for r in rotations + [np.eye(3)]:
        np.testing.assert_allclose(colmap.quaternion_to_rotation(colmap.rotation_to_quaternion(r)), r, atol=1e-12)


def test_neus_projection_decomposes_into_intrinsics_and_pose_for_any_scale_sign():
    k = np.array([[30.0, 0.0, 11.3], [0.0, 28.0, 10.7], [0.0, 0.0, 1.0]])
    rotation = np.linalg.qr(np.random.default_rng(2).normal(size=(3, 3)))[0]
    rotation *= np.sign(np.linalg.det(rotation))
    center = np.array([1.0, -2.0, 3.0])
    p = k @ np.concatenate([rotation, -rotation @ center[:, None]], 1)
    for scale in (1.0, -3.0, 0.01):
        k_got, c2w = neus.decompose_projection(scale * p, None, "world_mat_0")
        np.testing.assert_allclose(k_got, k, atol=1e-9)
        np.testing.assert_allclose(c2w, np.concatenate([rotation.T, center[:, None]], 1), atol=1e-9)


def test_neus_box_is_the_cube_around_the_scale_mat_sphere_so_the_unit_box_is_normalized_space(undistorted_scene, tmp_path):
    loaded = load_scene(write_scene(undistorted_scene, "neus", tmp_path))
    radius = np.sqrt(3)  # the scene's box is the cube TARGET +- 1; the written sphere passes through its corners
    np.testing.assert_allclose(loaded.bbox, undistorted_scene.center + np.array([[-radius], [radius]]))
    scale_mat = loaded.extras["scale_mat"]
    normalized = (np.linalg.inv(scale_mat) @ np.append(loaded.cameras.centers[0], 1.0))[:3]
    np.testing.assert_allclose(space_for(loaded, "box").world_to_unit(loaded.cameras.centers[0]), normalized)


def test_nerfstudio_per_frame_intrinsics_override_the_shared_ones(make_scene, tmp_path):
    scene = make_scene()
    scene.cameras.intrinsics[3] = (25.0, 27.0, 12.5, 9.5)
    scene.cameras.distortion[5] = (0.1, 0.0, 0.0, 0.01)
    loaded = load_scene(write_scene(scene, "nerfstudio", tmp_path))
    meta = json.loads((tmp_path / "transforms.json").read_text())
    assert "fl_x" not in meta and meta["frames"][3]["fl_x"] == 25.0
    assert_same_cameras(loaded.cameras, scene.cameras)


def test_nerfstudio_reads_instant_ngp_field_of_view_and_extensionless_paths(pinhole_scene, tmp_path):
    write_scene(pinhole_scene, "nerfstudio", tmp_path)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    fx, (w, h) = pinhole_scene.cameras.intrinsics[0, 0], pinhole_scene.cameras.sizes[0]
    for key in ("fl_x", "fl_y", "cx", "cy", "w", "h", "camera_model"):
        del meta[key]
    meta["camera_angle_x"] = 2 * np.arctan(0.5 * w / fx)
    meta["camera_angle_y"] = 2 * np.arctan(0.5 * h / fx)
    for frame in meta["frames"]:
        frame["file_path"] = frame["file_path"].removesuffix(".png")
        del frame["mask_path"]
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert_same_cameras(load_scene(tmp_path, with_images=False).cameras, pinhole_scene.cameras)


def test_nerfstudio_aabb_scale_sizes_the_box_as_instant_ngp_does(general_scene, tmp_path):
    loaded = load_scene(write_scene(general_scene, "nerfstudio", tmp_path, aabb_scale=2), with_images=False)
    np.testing.assert_allclose(loaded.bbox[1] - loaded.bbox[0], 2 / 0.33)
    assert np.linalg.norm(loaded.center - [0.1, -0.2, 0.3]) < 0.1


def test_llff_is_detected_before_the_colmap_model_it_ships_with(pinhole_scene, tmp_path):
    write_scene(pinhole_scene, "colmap", tmp_path)
    write_scene(pinhole_scene, "llff", tmp_path)
    assert load_scene(tmp_path, with_images=False).format == "llff"


def test_llff_near_far_come_from_the_bounds_and_the_box_holds_the_frustums(pinhole_scene, tmp_path):
    loaded = load_scene(write_scene(pinhole_scene, "llff", tmp_path), with_images=False)
    assert (loaded.near, loaded.far) == (pinhole_scene.near, pinhole_scene.far)
    far_centers = loaded.cameras.centers + pinhole_scene.far * loaded.cameras.forward
    assert np.all(loaded.bbox[0] <= far_centers) and np.all(far_centers <= loaded.bbox[1])



def test_llff_and_colmap_cameras_carry_each_views_own_near_bound(pinhole_scene, undistorted_scene, tmp_path):
    """LLFF: the table's near column; COLMAP: the 0.1th percentile of the depths of the points each image sees."""
    n = len(pinhole_scene.cameras)
    bounds = np.stack([np.linspace(1.0, 2.0, n), np.full(n, 9.0)], 1)
    scene = dataclasses.replace(pinhole_scene, extras={**pinhole_scene.extras, "view_bounds": bounds})
    llff = load_scene(write_scene(scene, "llff", tmp_path / "llff"), with_images=False)
    np.testing.assert_allclose(llff.cameras.near, bounds[:, 0])
    np.testing.assert_allclose(llff.cameras.subset(llff.split_indices("test")).near, bounds[::8, 0])
    cams = load_scene(write_scene(undistorted_scene, "colmap", tmp_path / "colmap"), with_images=False).cameras
    for i in range(n):
        local = (undistorted_scene.points - cams.centers[i]) @ cams.c2w[i, :, :3]
        fx, fy, cx, cy = cams.intrinsics[i]
        z = np.maximum(local[:, 2], 1e-9)
        uv = local[:, :2] / z[:, None] * [fx, fy] + [cx, cy]
        seen = (local[:, 2] > 0) & np.all((uv >= 0) & (uv < cams.sizes[i]), axis=1)
        assert cams.near[i] == pytest.approx(np.percentile(z[seen], 0.1), rel=1e-4)
    assert np.ptp(cams.near) > 0.1  # the views' own bounds, not one number

DOWNSCALED_FORMATS = [("llff", "pinhole_scene"), ("colmap", "general_scene"), ("nerfstudio", "general_scene")]


@pytest.mark.parametrize("fmt, source", DOWNSCALED_FORMATS)
@pytest.mark.parametrize("downscale", [2, 4])
def test_downscale_reads_the_images_d_folder_and_scales_the_intrinsics(request, tmp_path, fmt, source, downscale):
    scene = request.getfixturevalue(source)
    loaded = load_scene(write_scene(scene, fmt, tmp_path, downscales=(2, 4)), downscale=downscale)
    assert {p.parent.name for p in loaded.image_paths} == {f"images_{downscale}"}
    np.testing.assert_array_equal(loaded.cameras.sizes, scene.cameras.sizes // downscale)
    np.testing.assert_allclose(loaded.cameras.intrinsics, scene.cameras.intrinsics / downscale, atol=TOL)
    np.testing.assert_allclose(loaded.cameras.c2w, scene.cameras.c2w, atol=TOL)
    assert loaded.images[0].shape[:2] == tuple(scene.cameras.sizes[0, ::-1] // downscale)


@pytest.mark.parametrize("fmt, source", [("llff", "pinhole_scene"), ("colmap", "general_scene")])
def test_a_downscale_without_its_folder_resizes_the_full_images(request, tmp_path, fmt, source):
    scene = request.getfixturevalue(source)
    write_scene(scene, fmt, tmp_path, downscales=(2,))
    loaded = load_scene(tmp_path, downscale=4)  # images_2/ only: images/ resized by 4 on access
    assert loaded.downscale == 4
    assert loaded.images[0].shape[:2] == tuple(np.round(scene.cameras.sizes[0, ::-1] / 4).astype(int))


def test_real_lego_has_the_published_splits_size_and_focal(nerf_synthetic):
    lego = nerf_synthetic / "lego"
    if not lego.is_dir():
        pytest.skip(f"{lego} is absent")
    scene = load_scene(lego, with_images=False)
    assert scene.format == "blender"
    assert {k: len(v) for k, v in scene.splits.items()} == {"train": 100, "val": 100, "test": 200}
    assert {tuple(s) for s in scene.cameras.sizes.tolist()} == {(800, 800)}
    np.testing.assert_allclose(scene.cameras.intrinsics[:, :2], 1111.1, atol=0.05)


def write_images(folder, names, size=(24, 20)):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        iio.imwrite(folder / name, np.zeros((size[1], size[0], 3), np.uint8))


def test_llff_down_right_back_axes_become_opencv_right_down_forward(tmp_path):
    down_right_back = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # columns: down, right, back
    pose = np.concatenate([down_right_back, [[1.0], [2.0], [3.0]], [[20.0], [24.0], [30.0]]], 1)
    row = np.concatenate([pose.reshape(1, 15), [[1.0, 10.0]]], 1)
    np.save(tmp_path / "poses_bounds.npy", np.concatenate([row, row]))  # a scene needs a training view too
    write_images(tmp_path / "images", ["a.png", "b.png"])
    cameras = load_scene(tmp_path, with_images=False).cameras
    np.testing.assert_allclose(cameras.c2w[0], [[1, 0, 0, 1], [0, 1, 0, 2], [0, 0, 1, 3]])
    np.testing.assert_allclose(cameras.intrinsics[0], [30, 30, 12, 10])


def test_colmap_world_to_camera_quaternion_is_inverted_to_camera_to_world(tmp_path):
    sparse = tmp_path / "sparse" / "0"
    sparse.mkdir(parents=True)
    (sparse / "cameras.txt").write_text("# comment\n1 PINHOLE 24 20 30 28 11 9\n")
    half = np.sqrt(0.5)  # a quarter turn about z: world x is seen along camera y
    (sparse / "images.txt").write_text("".join(f"{i} {half} 0 0 {half} 1 2 3 1 {name}\n\n"
                                               for i, name in ((1, "a.png"), (2, "b.png"))))
    (sparse / "points3D.txt").write_text("")
    write_images(tmp_path / "images", ["a.png", "b.png"])
    cameras = load_scene(tmp_path, with_images=False).cameras
    rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    expected = np.concatenate([rotation.T, -rotation.T @ [[1], [2], [3]]], 1)
    np.testing.assert_allclose(cameras.c2w[0], expected, atol=1e-12)
    np.testing.assert_allclose(cameras.intrinsics[0], [30, 28, 11, 9])


def test_nerfstudio_opengl_identity_is_a_camera_looking_down_world_minus_z(tmp_path):
    frames = [{"file_path": name, "transform_matrix": np.eye(4).tolist()} for name in ("a.png", "b.png")]
    (tmp_path / "transforms.json").write_text(json.dumps({"fl_x": 30, "w": 24, "h": 20, "frames": frames}))
    write_images(tmp_path, ["a.png", "b.png"])
    cameras = load_scene(tmp_path, with_images=False).cameras
    np.testing.assert_allclose(cameras.c2w[0], np.diag([1.0, -1.0, -1.0, 1.0])[:3])
    np.testing.assert_allclose(cameras.intrinsics[0], [30, 30, 12, 10])
