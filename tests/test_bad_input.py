"""Bad scene folders: load_scene raises SceneError naming the file and the problem; `voxnerf info` prints one line."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import imageio.v3 as iio
import numpy as np
import pytest
import torch

from voxnerf.data import load_scene
from voxnerf.data.formats import write_scene
from voxnerf.data.scene import Scene
from voxnerf.errors import SceneError
from voxnerf.cli.main import main

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


def complaint(code: int, stderr: str, culprit: str, problem: str = "") -> str | None:
    """What is wrong with how a command reported bad input (exit status `code`, `stderr`), or None when it exited
    with status 2 and one 'voxnerf: error:' line naming `culprit` and matching `problem`."""
    lines = stderr.strip().splitlines()
    if code != 2:
        return f"exited with status {code}"
    if "Traceback" in stderr or len(lines) != 1 or not lines[0].startswith("voxnerf: error:"):
        return f"stderr is not one 'voxnerf: error:' line: {stderr!r}"
    if culprit not in lines[0] or not re.search(problem, lines[0]):
        return f"the message does not name {culprit!r} and {problem!r}: {lines[0]!r}"
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
    found = [(c.name, complaint(r.returncode, r.stderr, c.culprit)) for c, r in zip(cases, results)]
    complaints = [f"{name}: {problem}" for name, problem in found if problem]
    assert not complaints, "\n".join(complaints)


def test_writers_refuse_cameras_the_format_cannot_hold(general_scene, tmp_path):
    for fmt, problem in (("blender", "focal lengths"), ("llff", "focal lengths"), ("neus", "distortion")):
        with pytest.raises(ValueError, match=problem):
            write_scene(general_scene, fmt, tmp_path / fmt)


# ---- issue 16: every malformed input the careless-user session found, per format, through `info` and `train` ----
ROTATION = [(r, c) for r in range(3) for c in range(3)]
LLFF_ROTATION = [5 * r + c for r, c in ROTATION]  # a poses_bounds row is [R | t | hwf] flattened row-major


def scale_rotation(factor: float, frame: int = 0):
    """Multiply frame `frame`'s rotation in a transforms JSON by `factor` (0: all-zero rotation)."""
    def change(meta: dict):
        matrix = meta["frames"][frame]["transform_matrix"]
        for r, c in ROTATION:
            matrix[r][c] *= factor

    return change


def scale_llff_rotation(factor: float):
    def change(table: np.ndarray) -> np.ndarray:
        table[0, LLFF_ROTATION] *= factor
        return table

    return change


def colmap_focal(text: str):
    """cameras.txt with the first camera's first focal parameter replaced by `text`."""
    return edit_text("sparse/0/cameras.txt", lambda t: re.sub(r"^(\d+ \S+ \d+ \d+) \S+", rf"\g<1> {text}", t,
                                                             count=1, flags=re.MULTILINE))


def keep_train_only(root: Path):
    for split in ("val", "test"):
        (root / f"transforms_{split}.json").unlink()


def set_key(relative: str, key: str, value):
    return edit_json(relative, lambda meta: meta.update({key: value}))


def set_frame_key(relative: str, key: str, value):
    return edit_json(relative, lambda meta: meta["frames"][0].update({key: value}))


def zero_world_mat(arrays: dict):
    arrays["world_mat_0"] = np.zeros((4, 4))


BLENDER_TRAIN = "transforms_train.json"
NO_TRAIN = "no training views"
LOADED = [  # (case, scene loads but `train` refuses it)
    Case("blender-no-test-view", "blender", keep_train_only, "", "no test or val views"),
    Case("nerfstudio-no-test-view", "nerfstudio", edit_json("transforms.json", lambda m: m.update(
        test_filenames=[], val_filenames=[])), "", "no test or val views", {"split_lists": True}),
]
SCENE_CASES = [
    Case("blender-fov-string", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", "wide"), BLENDER_TRAIN,
         "'camera_angle_x' is not a number"),
    Case("blender-fov-list", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", [0.7]), BLENDER_TRAIN,
         "'camera_angle_x' is not a number"),
    Case("blender-fov-null", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", None), BLENDER_TRAIN,
         "'camera_angle_x' is not a number"),
    Case("blender-fov-nan", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", float("nan")), BLENDER_TRAIN,
         "'camera_angle_x' is nan"),
    Case("blender-fov-zero", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", 0), BLENDER_TRAIN,
         "'camera_angle_x' is 0: a field of view in radians must lie in .0, pi."),
    Case("blender-fov-negative", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", -0.7), BLENDER_TRAIN,
         "'camera_angle_x' is -0.7"),
    Case("blender-fov-above-pi", "blender", set_key(BLENDER_TRAIN, "camera_angle_x", 3.5), BLENDER_TRAIN,
         "'camera_angle_x' is 3.5"),
    Case("blender-file-path-number", "blender", set_frame_key(BLENDER_TRAIN, "file_path", 7), BLENDER_TRAIN,
         "'file_path' in frames.0. is not a file name: 7"),
    Case("blender-zero-rotation", "blender", edit_json(BLENDER_TRAIN, scale_rotation(0)), BLENDER_TRAIN,
         "camera of r_0.png: the pose's rotation is not a rotation"),
    Case("blender-skewed-rotation", "blender", edit_json(BLENDER_TRAIN, scale_rotation(1.5)), BLENDER_TRAIN,
         "camera of r_0.png: the pose's rotation is not a rotation"),
    Case("nerfstudio-file-path-number", "nerfstudio", set_frame_key("transforms.json", "file_path", 3),
         "transforms.json", "'file_path' in frames.0. is not a file name: 3"),
    Case("nerfstudio-zero-focal", "nerfstudio", set_key("transforms.json", "fl_x", 0), "transforms.json",
         "focal length .* is not positive"),
    Case("nerfstudio-fov-above-pi", "nerfstudio", edit_json("transforms.json", lambda m: m.update(
        camera_angle_x=4.0) or m.pop("fl_x")), "transforms.json", "'camera_angle_x' for frames.0. is 4: a field of view"),
    Case("nerfstudio-skewed-rotation", "nerfstudio", edit_json("transforms.json", scale_rotation(0.5)),
         "transforms.json", r"camera of frame_\d+.png: the pose's rotation is not a rotation"),
    Case("nerfstudio-one-image", "nerfstudio", nothing, "transforms.json", NO_TRAIN, {"views": 1}),
    Case("nerfstudio-empty-train-list", "nerfstudio", edit_json("transforms.json", lambda m: m.update(
        train_filenames=[])), "transforms.json", NO_TRAIN, {"split_lists": True}),
    Case("llff-skewed-rotation", "llff", edit_llff_table(scale_llff_rotation(2.0)), "poses_bounds.npy",
         "camera of image_000.png: the pose's rotation is not a rotation"),
    Case("llff-zero-rotation", "llff", edit_llff_table(scale_llff_rotation(0.0)), "poses_bounds.npy",
         "the pose's rotation is not a rotation"),
    Case("llff-one-image", "llff", nothing, "poses_bounds.npy", NO_TRAIN, {"views": 1}),
    Case("colmap-txt-zero-focal", "colmap", colmap_focal("0"), "", "camera of image_000.png: focal length .0, "
         "28. must be positive and finite", {"binary": False}),
    Case("colmap-txt-nan-focal", "colmap", colmap_focal("nan"), "", "focal length .nan", {"binary": False}),
    Case("colmap-txt-negative-focal", "colmap", colmap_focal("-30"), "", "focal length .-30", {"binary": False}),
    Case("colmap-bin-zero-focal", "colmap", patch_bytes("sparse/0/cameras.bin", 32, struct.pack("<d", 0.0)), "",
         "camera of image_000.png: focal length .0,"),
    Case("colmap-one-image", "colmap", nothing, "", NO_TRAIN, {"views": 1}),
    Case("neus-singular-matrix", "neus", edit_npz(zero_world_mat), "cameras_sphere.npz",
         "'world_mat_0' is a degenerate projection"),
    Case("neus-one-image", "neus", nothing, "cameras_sphere.npz", NO_TRAIN, {"views": 1}),
]


def first_view(scene: Scene) -> Scene:
    """`scene` cut down to its first image (a one-image capture)."""
    one = [0]
    return dataclasses.replace(scene, image_paths=scene.image_paths[:1], cameras=scene.cameras.subset(one),
                               splits={"train": np.array(one)}, images=scene.images[:1],
                               masks=None if scene.masks is None else scene.masks[:1])


def write_case(request, root: Path, case: Case) -> Path:
    """`write_broken`, from the source scene cut to `views` images when the case's options say so."""
    options = dict(case.options or {})
    if options.pop("views", None) == 1:
        root.mkdir(parents=True)
        write_scene(first_view(request.getfixturevalue(SOURCES.get(case.fmt, "general_scene"))), case.fmt, root,
                    **options)
        case.breaks(root)
        return root
    return write_broken(request, root, dataclasses.replace(case, options=options))


@pytest.fixture
def cli_in_process(monkeypatch, capsys):
    """`voxnerf ARGS...` run in this process (no interpreter start-up, ~2 s a command): (exit status, stderr)."""

    def run(*args) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["voxnerf", *map(str, args)])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main()
        return exited.value.code, capsys.readouterr().err

    return run


@pytest.mark.parametrize("case", SCENE_CASES, ids=[c.name for c in SCENE_CASES])
def test_info_and_train_refuse_a_malformed_scene_in_one_line(request, tmp_path, case, cli_in_process):
    root = write_case(request, tmp_path / "scene", case)
    with pytest.raises(SceneError, match=case.problem) as error:
        load_scene(root)
    assert case.culprit in str(error.value.path)
    for command in (["info", root], ["train", root, "--out", tmp_path / "run", "--device", "cpu"]):
        problem = complaint(*cli_in_process(*command), case.culprit, case.problem)
        assert problem is None, f"voxnerf {command[0]}: {problem}"
    assert not (tmp_path / "run").exists(), "a refused train must write nothing"


@pytest.mark.parametrize("case", LOADED, ids=[c.name for c in LOADED])
def test_train_refuses_a_scene_without_test_views_before_training(request, tmp_path, case, cli_in_process):
    root = write_case(request, tmp_path / "scene", case)
    assert cli_in_process("info", root)[0] == 0
    problem = complaint(*cli_in_process("train", root, "--out", tmp_path / "run"), str(root), case.problem)
    assert problem is None, problem
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fmt, breaks", [
    ("blender", edit_json(BLENDER_TRAIN, scale_rotation(1.01))),
    ("nerfstudio", edit_json("transforms.json", scale_rotation(0.99, frame=3))),
    ("llff", edit_llff_table(scale_llff_rotation(1.01))),
], ids=["blender", "nerfstudio", "llff"])
def test_a_rotation_a_little_off_is_repaired_with_a_warning(request, tmp_path, fmt, breaks, cli_in_process):
    root = write_broken(request, tmp_path / "scene", Case(fmt, fmt, breaks, "", ""))
    rotations = load_scene(root, with_images=False).cameras.c2w[:, :, :3]
    np.testing.assert_allclose(np.einsum("nji,njk->nik", rotations, rotations), np.broadcast_to(np.eye(3), (
        len(rotations), 3, 3)), atol=1e-9)
    code, stderr = cli_in_process("info", root)
    assert code == 0
    assert re.fullmatch(r"voxnerf: warning: \S+: 1 camera rotation\(s\) were not orthonormal .*replaced by the "
                        r"nearest rotation\n", stderr), stderr


FOREIGN = "foreign.pt"
OLDER = "older.pt"  # the first checkpoint format's keys (a field's grid beside the run's), no release wrote it
OPTION_CASES = [  # (name, train options, what the line must name, problem); {run} is a run folder, {tmp} tmp_path
    ("set-malformed-yaml", ["--set", "optim.lr_grid=[1"], "--set optim.lr_grid=[1", "malformed YAML"),
    ("set-checkpoint-every-zero", ["--set", "checkpoint_every=0"], "checkpoint_every = 0", "expected >= 1"),
    ("set-log-every-zero", ["--set", "log_every=0"], "log_every = 0", "expected >= 1"),
    ("set-step-ratio-zero", ["--set", "render.step_ratio=0"], "render.step_ratio = 0", r"expected in \(0, 4\]"),
    ("set-min-rays-zero", ["--set", "optim.min_rays=0"], "optim.min_rays = 0", "expected >= 1"),
    ("set-lr-nan", ["--set", "optim.lr_grid=.nan"], "optim.lr_grid = nan", "expected a finite number"),
    ("set-lr-negative", ["--set", "optim.lr_decoder=-0.001"], "optim.lr_decoder = -0.001", "expected > 0"),
    ("set-level-resolution-zero", ["--set", "levels=[{until: 1.0, resolution: 0, image_scale: 1.0}]"],
     "levels[0].resolution = 0", "expected in"),
    ("set-level-resolution-33", ["--set", "levels=[{until: 1.0, resolution: 33, image_scale: 1.0}]"],
     "levels[0].resolution 33", "multiple of 8"),
    ("device-gpu", ["--device", "gpu"], "--device gpu", "expected auto, cpu, cuda"),
    ("device-mps", ["--device", "mps"], "--device mps", "expected auto, cpu, cuda"),
    ("threads-negative", ["--threads", "-1"], "--threads -1", "threads = -1"),
    ("max-time-negative", ["--max-time", "-5"], "--max-time -5", "max_time = -5: expected >= 0"),
    ("max-steps-negative", ["--max-steps", "-1"], "--max-steps -1", "max_steps = -1: expected >= 0"),
    ("resume-and-overwrite", ["--resume", "--overwrite"], "--resume --overwrite", "choose one"),
    ("init-foreign-checkpoint", ["--init", "{tmp}/" + FOREIGN], FOREIGN, "not a voxnerf checkpoint"),
    ("init-not-a-checkpoint", ["--init", "{tmp}/notes.txt"], "notes.txt", "unreadable checkpoint"),
    ("resume-foreign-checkpoint", ["--resume", "--out", "{tmp}/foreign-run"], "checkpoint.pt",
     "not a voxnerf checkpoint"),
    ("init-older-checkpoint", ["--init", "{tmp}/" + OLDER], OLDER, "of version 1; this release reads version 2"),
    ("resume-newer-checkpoint", ["--resume", "--out", "{tmp}/newer-run"], "checkpoint.pt",
     "of version 3; this release reads version 2"),
    ("out-under-a-file", ["--out", "{tmp}/notes.txt/run"], "notes.txt/run", "cannot write the run folder"),
]


@pytest.mark.parametrize("name, options, culprit, problem", OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_train_refuses_a_bad_option_in_one_line(pinhole_scene, tmp_path, cli_in_process, name, options, culprit,
                                                problem):
    root = write_scene(pinhole_scene, "blender", tmp_path / "scene")
    torch.save({"weights": torch.zeros(3)}, tmp_path / FOREIGN)
    (tmp_path / "foreign-run").mkdir()
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign-run" / "checkpoint.pt")
    run_keys = {"config": {}, "scene": {}, "step": 1}
    torch.save({"version": 1, **run_keys, "field": {"grid": {}}}, tmp_path / OLDER)
    (tmp_path / "newer-run").mkdir()
    torch.save({**run_keys, "model": {"version": 3}}, tmp_path / "newer-run" / "checkpoint.pt")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    options = [o.replace("{tmp}", str(tmp_path)) for o in options]
    out = [] if "--out" in options else ["--out", tmp_path / "run"]
    code, stderr = cli_in_process("train", root, "--max-steps", "1", *out, *options)
    problem_found = complaint(code, stderr, culprit, problem)
    assert problem_found is None, problem_found
    assert not (tmp_path / "run").exists(), "a refused train must write nothing"


@pytest.mark.parametrize("args, culprit", [
    (["export", "{tmp}", "--pointcloud", "{tmp}/p.ply", "--num-points", "0"], "--num-points"),
    (["export", "{tmp}", "--mesh", "{tmp}/m.ply", "--target-faces", "-5"], "--target-faces"),
    (["scene", "make", "sphere", "{tmp}/s", "--size", "0"], "--size"),
    (["demo", "--out", "{tmp}/demo", "--max-time", "-1"], "--max-time -1"),
], ids=["export-num-points-zero", "export-target-faces-negative", "scene-size-zero", "demo-max-time-negative"])
def test_other_commands_refuse_bad_numbers_in_one_line(tmp_path, cli_in_process, args, culprit):
    code, stderr = cli_in_process(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    problem = complaint(code, stderr, culprit)
    assert problem is None, problem
    assert not (tmp_path / "s").exists() and not (tmp_path / "demo").exists()
