"""Image size and format from the command line: `--downscale N` reads a format's smaller copies where it has
them and resizes on load where it does not (intrinsics scaled alike); LLFF captures' masks are found in any
letter case; `--format` reads a folder that two formats could claim as the one named."""

from __future__ import annotations

import dataclasses

import imageio.v3 as iio
import numpy as np
import pytest

from voxnerf.data import load_scene
from voxnerf.data.formats import detect_format, write_scene
from voxnerf.errors import VoxnerfError


def test_downscale_without_copies_resizes_on_load_and_scales_the_intrinsics(pinhole_scene, tmp_path):
    root = write_scene(dataclasses.replace(pinhole_scene, masks=None), "blender", tmp_path / "b")
    full, half = load_scene(root), load_scene(root, downscale=2)
    assert half.downscale == 2 and half.cameras.sizes.tolist() == (full.cameras.sizes // 2).tolist()
    np.testing.assert_allclose(half.cameras.intrinsics, full.cameras.intrinsics / 2)
    image, small = full.images[0].astype(np.float64), half.images[0].astype(np.float64)
    h, w = small.shape[:2]
    box_mean = image[:2 * h, :2 * w].reshape(h, 2, w, 2, -1).mean((1, 3))
    assert np.abs(small - box_mean).max() <= 0.5 + 1e-9  # each pixel the rounded mean of the 2x2 it covers


def test_downscale_reads_the_formats_own_copies_where_present(pinhole_scene, tmp_path):
    root = write_scene(dataclasses.replace(pinhole_scene, masks=None), "llff", tmp_path / "l", downscales=(2,))
    marked = np.full_like(iio.imread(next((root / "images_2").iterdir())), 7)
    first = sorted((root / "images_2").iterdir())[0]
    iio.imwrite(first, marked)
    scene = load_scene(root, downscale=2)
    assert np.array_equal(scene.images[0], marked)  # the copy on disk, not a resize of images/


def test_llff_masks_are_found_whatever_their_extension_case(pinhole_scene, tmp_path):
    scene = dataclasses.replace(pinhole_scene, images=[im[..., :3] for im in pinhole_scene.images], masks=None)
    root = write_scene(scene, "llff", tmp_path / "m")
    (root / "masks").mkdir()
    for k, path in enumerate(sorted((root / "images").iterdir())):
        path.rename(path.with_suffix(".JPG" if k % 2 else path.suffix))  # images: .JPG and .png
    for k, mask in enumerate(pinhole_scene.masks):
        name = sorted((root / "images").iterdir())[k].stem + (".jpg" if k % 2 else ".PNG")
        iio.imwrite(root / "masks" / name, mask.astype(np.uint8) * 255, extension=".png")
    loaded = load_scene(root)
    assert loaded.has_masks
    for k, mask in enumerate(pinhole_scene.masks):
        assert np.array_equal(loaded.masks[k], mask)
    half = load_scene(root, downscale=2)  # no masks_2/: the full-size masks are resized with the images
    assert half.masks[0].shape == tuple(half.cameras.sizes[0][::-1])


def test_format_names_the_reader_and_an_unknown_one_is_refused(make_scene, tmp_path):
    scene = make_scene(intrinsics=(26.0, 26.0, 12.0, 10.0), distortion=(0.0, 0.0, 0.0, 0.0))
    root = write_scene(scene, "neus", tmp_path / "dtu")
    llff_root = write_scene(scene, "llff", tmp_path / "llff")
    (root / "poses_bounds.npy").write_bytes((llff_root / "poses_bounds.npy").read_bytes())
    assert detect_format(root).NAME == "llff"  # both files: detection prefers LLFF
    as_neus = load_scene(root, format="neus")
    assert as_neus.format == "neus" and as_neus.has_masks
    with pytest.raises(VoxnerfError, match="unknown scene format"):
        load_scene(root, format="dtu")
