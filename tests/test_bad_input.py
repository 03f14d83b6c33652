"""Bad scene folders: load_scene raises SceneError naming the file and the problem; `voxnerf info` prints one line."""

from __future__ import annotations

import json
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import imageio.v3 as iio
import numpy as np
import pytest

from voxnerf.data import load_scene
from voxnerf.data.writers import write_scene
from voxnerf.errors import SceneError

SOURCES = {"blender": "pinhole_scene", "llff": "pinhole_scene", "neus": "undistorted_scene"}


@dataclass
class Case:
    """A scene of `fmt` written then broken by `breaks(root)`; the error must name `culprit` and match `problem`.

    `cli` marks the cases also run through `voxnerf info`, one per kind of bad input: the command starts a
    Python process (about a second, most of it importing torch), so running every case would make this file slow.
    """

    name: str
    fmt: str | None
    breaks: Callable[[Path], object]
    culprit: str
    problem: str
    options: dict | None = None
    cli: bool = False


def delete(relative: str):
    return lambda root: (root / relative).unlink()


def corrupt(relative: str):
    return lambda root: (root / relative).write_bytes(b"\x89PNG\r\n this is not an image")


def resize(relative: str, size=(30, 20)):
    return lambda root: iio.imwrite(root / relative, np.zeros((size[1], size[0], 3), np.uint8))


def overwrite(relative: str, text: str):
    return lambda root: (root / relative).write_text(text)


def edit_json(relative: str, change: Callable[[dict], object]):
    def run(root: Path):
        meta = json.loads((root / relative).read_text())
        change(meta)
        (root / relative).write_text(json.dumps(meta))

    return run


def edit_npz(change: Callable[[dict], object]):
    def run(root: Path):
        arrays = dict(np.load(root / "cameras_sphere.npz"))
        change(arrays)
        np.savez(root / "cameras_sphere.npz", **arrays)

    return run


def edit_llff_table(change: Callable[[np.ndarray], np.ndarray]):
    return lambda root: np.save(root / "poses_bounds.npy", change(np.load(root / "poses_bounds.npy")))


def patch_bytes(relative: str, offset: int, data: bytes):
    def run(root: Path):
        content = bytearray((root / relative).read_bytes())
        content[offset:offset + len(data)] = data
        (root / relative).write_bytes(bytes(content))

    return run


def truncate(relative: str):
    return lambda root: (root / relative).write_bytes((root / relative).read_bytes()[:100])


def nan_pose(meta: dict):
    meta["frames"][0]["transform_matrix"][0][3] = float("nan")


def set_nan(arrays: dict):
    arrays["world_mat_2"][0, 1] = np.nan


def with_nan(table: np.ndarray) -> np.ndarray:
    table[2, 3] = np.nan
    return table


def near_after_far(table: np.ndarray) -> np.ndarray:
    table[1, 15:] = [5.0, 1.0]
    return table


def edit_text(relative: str, change: Callable[[str], str]):
    return lambda root: (root / relative).write_text(change((root / relative).read_text()))


def replace_once(old: str, new: str) -> Callable[[str], str]:
    return lambda text: text.replace(old, new, 1)


def nan_first_quaternion(images_txt: str) -> str:
    """images.txt with the qw of its first image (id 1, after the comments) made NaN."""
    return re.sub(r"^1 \S+", "1 nan", images_txt, count=1, flags=re.MULTILINE)


def nothing(root: Path):
    return None


TXT = {"binary": False}
CASES = [
    # a missing image
    Case("blender-missing-image", "blender", delete("train/r_0.png"), "r_0", "image not found", cli=True),
    Case("nerfstudio-missing-image", "nerfstudio", delete("images/frame_00002.png"), "frame_00002", "image not found"),
    Case("llff-missing-image", "llff", delete("images/image_003.png"), "images", "holds 11 images but poses_bounds.npy has 12 poses"),
    Case("colmap-missing-image", "colmap", delete("images/image_003.png"), "image_003.png", "image not found"),
    Case("neus-missing-image", "neus", delete("image/003.png"), "mask", "holds 12 masks for 11 images"),
    # an unreadable image
    Case("blender-corrupt-image", "blender", corrupt("train/r_2.png"), "r_2.png", "unreadable image"),
    Case("nerfstudio-corrupt-image", "nerfstudio", corrupt("images/frame_00004.png"), "frame_00004.png", "unreadable image", cli=True),
    Case("nerfstudio-corrupt-mask", "nerfstudio", corrupt("masks/frame_00004.png"), "masks/frame_00004.png", "unreadable"),
    Case("llff-corrupt-image", "llff", corrupt("images/image_005.png"), "image_005.png", "unreadable image"),
    Case("colmap-corrupt-image", "colmap", corrupt("images/image_001.png"), "image_001.png", "unreadable image"),
    Case("neus-corrupt-image", "neus", corrupt("image/007.png"), "007.png", "unreadable image"),
    # malformed JSON
    Case("blender-malformed-json", "blender", overwrite("transforms_val.json", '{"frames": ['), "transforms_val.json", "malformed JSON", cli=True),
    Case("nerfstudio-malformed-json", "nerfstudio", overwrite("transforms.json", "{'fl_x': 1}"), "transforms.json", "malformed JSON"),
    # a pose with NaN
    Case("blender-nan-pose", "blender", edit_json("transforms_train.json", nan_pose), "transforms_train.json", "frames.0.*NaN"),
    Case("nerfstudio-nan-pose", "nerfstudio", edit_json("transforms.json", nan_pose), "transforms.json", "frames.0.*NaN"),
    Case("llff-nan-pose", "llff", edit_llff_table(with_nan), "poses_bounds.npy", "row 2: pose or bounds contain NaN", cli=True),
    Case("colmap-txt-nan-pose", "colmap", edit_text("sparse/0/images.txt", nan_first_quaternion), "images.txt", "image_000.png.*NaN", TXT),
    Case("colmap-bin-nan-pose", "colmap", patch_bytes("sparse/0/images.bin", 12, struct.pack("<d", np.nan)), "images.bin", "NaN"),
    Case("neus-nan-pose", "neus", edit_npz(set_nan), "cameras_sphere.npz", "world_mat_2' contains NaN"),
    # images of mixed sizes within one camera
    Case("blender-mixed-sizes", "blender", resize("train/r_1.png"), "r_1.png", "mixed sizes"),
    Case("nerfstudio-mixed-sizes", "nerfstudio", resize("images/frame_00003.png"), "frame_00003.png", "30x20 but its camera expects 24x20", cli=True),
    Case("llff-mixed-sizes", "llff", resize("images/image_002.png"), "image_002.png", "30x20 but its camera expects 24x20"),
    Case("colmap-mixed-sizes", "colmap", resize("images/image_002.png"), "image_002.png", "30x20 but its camera expects 24x20"),
    Case("neus-mixed-sizes", "neus", resize("image/004.png"), "004.png", "mixed sizes"),
    Case("nerfstudio-mask-size", "nerfstudio", resize("masks/frame_00003.png"), "frame_00003.png", "mask is 30x20 but its image is 24x20"),
    # folders that hold no scene
    Case("empty-folder", None, nothing, "", "folder is empty", cli=True),
    Case("unknown-format", None, overwrite("notes.txt", "hello"), "", "no known scene format", cli=True),
    Case("nonexistent-folder", None, lambda root: root.rmdir(), "", "no such folder", cli=True),
    # format-specific
    Case("nerfstudio-fisheye", "nerfstudio", edit_json("transforms.json", lambda m: m.update(camera_model="OPENCV_FISHEYE")),
         "transforms.json", "camera model 'OPENCV_FISHEYE'.*not supported"),
    Case("nerfstudio-no-pose", "nerfstudio", edit_json("transforms.json", lambda m: m["frames"][5].pop("transform_matrix")),
         "transforms.json", "missing key 'transform_matrix' in frames.5"),
    Case("nerfstudio-no-focal", "nerfstudio", edit_json("transforms.json", lambda m: m.pop("fl_x")),
         "transforms.json", "missing key 'fl_x' .or 'camera_angle_x'"),
    Case("nerfstudio-unknown-split-file", "nerfstudio", edit_json("transforms.json", lambda m: m["test_filenames"].append("images/x.png")),
         "transforms.json", "'test_filenames' names 'images/x.png'", {"split_lists": True}),
    Case("colmap-txt-unsupported-model", "colmap", edit_text("sparse/0/cameras.txt", replace_once("OPENCV", "FULL_OPENCV")),
         "cameras.txt", "camera model FULL_OPENCV is not supported", TXT),
    Case("colmap-bin-unsupported-model", "colmap", patch_bytes("sparse/0/cameras.bin", 12, struct.pack("<i", 5)),
         "cameras.bin", "camera model OPENCV_FISHEYE is not supported"),
    Case("colmap-txt-wrong-parameter-count", "colmap", edit_text("sparse/0/cameras.txt", replace_once("OPENCV", "PINHOLE")),
         "cameras.txt", "line 4: PINHOLE takes 4 parameters, got 8", TXT),
    Case("colmap-truncated-bin", "colmap", truncate("sparse/0/images.bin"), "images.bin", "truncated"),
    Case("colmap-missing-images-file", "colmap", delete("sparse/0/images.bin"), "images.bin", "file not found"),
    Case("llff-wrong-shape", "llff", edit_llff_table(lambda t: t[:, :15]), "poses_bounds.npy", "expected an N x 17 array"),
    Case("llff-near-after-far", "llff", edit_llff_table(near_after_far), "poses_bounds.npy", "row 1: bounds must satisfy"),
    Case("llff-not-numpy", "llff", overwrite("poses_bounds.npy", "poses"), "poses_bounds.npy", "not a readable .npy/.npz file"),
    Case("neus-truncated-npz", "neus", truncate("cameras_sphere.npz"), "cameras_sphere.npz", "not a readable .npy/.npz file"),
    Case("neus-missing-world-mat", "neus", edit_npz(lambda a: a.pop("world_mat_3")), "cameras_sphere.npz", "missing array 'world_mat_3'"),
    Case("neus-two-normalizations", "neus", edit_npz(lambda a: a["scale_mat_5"].__setitem__((0, 3), 9.0)),
         "cameras_sphere.npz", "'scale_mat_5' differs"),
    Case("neus-no-images-folder", "neus", lambda root: (root / "image").rename(root / "pictures"), "image", "folder not found"),
]


def write_broken(request, root: Path, case: Case) -> Path:
    """Write the case's format into `root` (made here) and break it."""
    root.mkdir(parents=True)
    if case.fmt is not None:
        scene = request.getfixturevalue(SOURCES.get(case.fmt, "general_scene"))
        write_scene(scene, case.fmt, root, **(case.options or {}))
    case.breaks(root)
    return root


def cli_complaint(result, case: Case) -> str | None:
    """What is wrong with how `voxnerf info` reported the case, or None when it reported it well."""
    lines = result.stderr.strip().splitlines()
    if result.returncode == 0:
        return "exited with status 0"
    if "Traceback" in result.stderr or len(lines) != 1 or not lines[0].startswith("voxnerf: error:"):
        return f"stderr is not one 'voxnerf: error:' line: {result.stderr!r}"
    if case.culprit not in lines[0]:
        return f"the message does not name {case.culprit!r}: {lines[0]!r}"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_load_scene_names_the_file_and_the_problem(request, tmp_path, case):
    root = write_broken(request, tmp_path / "scene", case)
    with pytest.raises(SceneError, match=case.problem) as error:
        load_scene(root)
    assert case.culprit in str(error.value.path)
    assert str(error.value).startswith(str(error.value.path))


def test_voxnerf_info_prints_one_error_line_and_fails_for_each_kind_of_bad_input(request, tmp_path, voxnerf_cli):
    cases = [c for c in CASES if c.cli]
    roots = [write_broken(request, tmp_path / c.name, c) for c in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda root: voxnerf_cli("info", root), roots))
    complaints = [f"{c.name}: {cli_complaint(r, c)}" for c, r in zip(cases, results) if cli_complaint(r, c)]
    assert not complaints, "\n".join(complaints)


def test_writers_refuse_cameras_the_format_cannot_hold(general_scene, tmp_path):
    for fmt, problem in (("blender", "focal lengths"), ("llff", "focal lengths"), ("neus", "distortion")):
        with pytest.raises(ValueError, match=problem):
            write_scene(general_scene, fmt, tmp_path / fmt)
