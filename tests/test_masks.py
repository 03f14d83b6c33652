"""Masks: a scene with foreground masks trains with the mask as alpha (random background behind it), is scored on
a white background, and gets the object-masked preset; `voxnerf info --check-masks` finds the view whose mask
disagrees with the others."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from typer.testing import CliRunner

from voxnerf.data.formats import write_scene
from voxnerf.data.mask_check import mask_agreement
from voxnerf.data.space import Space
from voxnerf.train.ray_sampler import RaySampler
from voxnerf.train.presets import preset_for
from voxnerf.cli.main import app


def test_masked_pixels_are_replaced_by_the_random_background(general_scene):
    scene = general_scene
    sampler = RaySampler(scene, scene.split_indices("train"), torch.device("cpu"), Space())
    batch = sampler.sample(4096, 1.0, torch.Generator().manual_seed(0))
    images, _ = sampler.at_scale(1.0)
    alpha = images[..., 3].reshape(-1)
    assert set(alpha.unique().tolist()) == {0, 255}  # the masks became the alpha channel
    background = (batch["target"] - batch["background"]).abs().amax(-1) < 1e-6
    assert 0.3 < background.float().mean() < 0.7  # about half of each random mask is background
    assert torch.equal(batch["alpha"] == 0, background)  # each ray's alpha, for the silhouette loss
    assert scene.has_alpha and np.array_equal(scene.render_background, np.ones(3))


def test_rgba_keeps_the_image_and_takes_alpha_from_the_mask(general_scene):
    rgba = general_scene.rgba(0)
    np.testing.assert_array_equal(rgba[..., :3], general_scene.images[0])
    np.testing.assert_array_equal(rgba[..., 3] > 0, general_scene.masks[0])


def test_masked_opaque_scene_gets_the_object_masked_preset(general_scene, make_scene):
    assert preset_for(general_scene)[0] == "object-masked"
    rgba_scene = dataclasses.replace(make_scene(channels=4, masks=False), background=np.ones(3))
    assert preset_for(rgba_scene)[0] == "blender"


def sphere_masks(cameras, center: np.ndarray, radius: float, *more: tuple[np.ndarray, float]) -> list[np.ndarray]:
    """Each camera's (H, W) mask of the pixels whose ray passes within `radius` of `center`, or within the radius of
    any further (center, radius) in `more` (pinhole)."""
    masks = []
    for c2w, (fx, fy, cx, cy), (w, h) in zip(cameras.c2w, cameras.intrinsics, cameras.sizes):
        v, u = np.mgrid[0:h, 0:w] + 0.5
        dirs = np.stack([(u - cx) / fx, (v - cy) / fy, np.ones_like(u)], -1) @ c2w[:, :3].T
        dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
        masks.append(np.any([np.linalg.norm(np.cross(c - c2w[:, 3], dirs), axis=-1) < r
                             for c, r in [(center, radius), *more]], 0))
    return masks


def test_the_box_of_a_masked_capture_is_the_visual_hull_of_its_masks(make_scene):
    from voxnerf.data.hull import bounds_from_masks

    scene = make_scene(n=24, size=(96, 80), intrinsics=(110.0, 110.0, 48.0, 40.0), distortion=(0.0,) * 4)
    center, radius = np.array([0.3, -0.1, 0.2]), 0.4
    loose = np.stack([center - 2.5, center + 2.5])
    box = bounds_from_masks(scene.cameras, sphere_masks(scene.cameras, center, radius), loose)
    step = 5.0 / 47
    np.testing.assert_allclose(box, np.stack([center - radius, center + radius]), atol=2 * step)


def test_the_box_holds_a_thin_part_and_a_part_few_photos_frame(make_scene):
    """A body with a thin arm holding a "torch" above it, far thinner than a lattice step over the loose box, and a
    "pedestal" below that the zoomed-in photos (two thirds of them) leave out of frame: the box holds both
    (statueOfLiberty_2's raised arm and pedestal were outside it when one lattice over the frustums' depth range
    decided, and points had to be seen by half the cameras)."""
    from voxnerf.data.hull import bounds_from_masks

    scene = make_scene(n=36, size=(96, 80), intrinsics=(110.0, 110.0, 48.0, 40.0), distortion=(0.0,) * 4)
    zoomed = np.arange(36) % 3 != 0
    intrinsics = scene.cameras.intrinsics.copy()
    intrinsics[zoomed, :2] *= 3.0
    cameras = dataclasses.replace(scene.cameras, intrinsics=intrinsics)
    center = np.asarray(scene.bbox).mean(0)
    torch_, pedestal = center + [0.0, 0.0, 0.75], center - [0.0, 0.0, 1.6]
    arm = [(center + [0.0, 0.0, z], 0.05) for z in np.arange(0.4, 0.75, 0.04)]
    masks = sphere_masks(cameras, center, 0.4, *arm, (torch_, 0.06), (pedestal, 0.3))
    framed = [m.any() for m in sphere_masks(cameras, pedestal, 0.3)]
    assert np.mean(framed) < 0.5  # the pedestal is in fewer than half the photos
    loose = np.stack([center - 6.0, center + 6.0])  # lattice steps of 0.26: wider than the torch
    box = bounds_from_masks(cameras, masks, loose)
    assert box[1, 2] >= torch_[2] + 0.06 - 0.05  # the torch's top
    assert box[0, 2] <= pedestal[2] - 0.3 + 0.05  # the pedestal's bottom
    np.testing.assert_allclose(box[:, :2], np.stack([center[:2] - 0.4, center[:2] + 0.4]), atol=0.1)


def test_a_point_of_the_hull_is_seen_by_three_views_however_few_the_cameras(make_scene):
    """Nine cameras: a tenth of them is less than one view, so a point that one camera alone sees inside its mask
    (far out along its silhouette's cone) was in the hull, and the box grew to the whole loose box."""
    from voxnerf.data.hull import bounds_from_masks

    scene = make_scene(n=9, size=(96, 80), intrinsics=(110.0, 110.0, 48.0, 40.0), distortion=(0.0,) * 4)
    center, radius = np.asarray(scene.bbox).mean(0), 0.4
    loose = np.stack([center - 2.5, center + 2.5])
    box = bounds_from_masks(scene.cameras, sphere_masks(scene.cameras, center, radius), loose)
    np.testing.assert_allclose(box, np.stack([center - radius, center + radius]), atol=0.1)


def sphere_capture(make_scene, shifted: int | None = None):
    """A 16-view capture of a sphere with exact masks; view `shifted`'s mask moved 6 px to the right (its pose or
    mask is off)."""
    scene = make_scene(n=16, size=(96, 80), intrinsics=(110.0, 110.0, 48.0, 40.0), distortion=(0.0,) * 4)
    masks = sphere_masks(scene.cameras, scene.bbox.mean(0) + 0.1, 0.5)
    if shifted is not None:
        masks[shifted] = np.roll(masks[shifted], 6, axis=1)
    return dataclasses.replace(scene, masks=masks)


def test_the_mask_check_singles_out_the_view_whose_mask_disagrees_with_the_poses(make_scene):
    exact = mask_agreement(sphere_capture(make_scene), tolerance=1.0, pixels=64, samples=128)
    assert max(v.disagreeing for v in exact) < 0.05 and max(v.gap_p90 for v in exact) < 1.0

    shifted = mask_agreement(sphere_capture(make_scene, shifted=5), tolerance=1.0, pixels=64, samples=128)
    assert shifted[5].disagreeing > 0.3 and shifted[5].gap_p90 > 3.0
    assert max(v.disagreeing for v in shifted if v.view != 5) < 0.05  # one wrong mask does not cut the others' hull


def test_info_check_masks_names_the_view_that_disagrees(make_scene, tmp_path):
    scene = sphere_capture(make_scene, shifted=5)
    folder = write_scene(scene, "neus", tmp_path / "masked")
    result = CliRunner().invoke(app, ["info", str(folder), "--check-masks"])
    assert result.exit_code == 0, result.output
    check = next(line for line in result.output.splitlines() if line.startswith("mask check"))
    assert "1 of 16 views disagree" in check and "005.png" in check

    unmasked = write_scene(dataclasses.replace(scene, masks=None), "neus", tmp_path / "unmasked")
    result = CliRunner().invoke(app, ["info", str(unmasked), "--check-masks"])
    assert result.exit_code != 0 and "has none" in str(result.exception)
