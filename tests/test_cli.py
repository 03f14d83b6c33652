"""The user-facing verbs run as a user runs them (`python -m voxnerf ...`): train, eval, render, and their errors.

One tiny toy scene and one short training run are shared by the whole module; each command starts a Python
process (a second or two of importing torch), so the file stays at a few tens of seconds.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.run.metrics import psnr
from voxnerf.view.path_file import save_camera_path

N_TEST = 2
STEPS = 60
# A single 32^3 level and small batches: 60 steps take a few seconds on one thread.
TINY = ["--threads", "1", "--quiet", "--set", "levels=[{until: 1.0, resolution: 32, image_scale: 1.0}]",
        "--set", "optim.target_samples=16384", "--set", "log_every=10"]


def voxnerf(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m voxnerf ARGS...` in `cwd` (where relative run folders go)."""
    command = [sys.executable, "-m", "voxnerf", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    """A non-zero exit with exactly one line on stderr, no traceback, naming each of `words`."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("voxnerf: error: ")
    for word in words:
        assert word in lines[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def scene_dir(workdir: Path) -> Path:
    return toy_scenes.make_scene("sphere", workdir / "sphere", n_train=20, n_val=2, n_test=N_TEST, size=32,
                                 n_samples=128)


@pytest.fixture(scope="module")
def trained(workdir: Path, scene_dir: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """The default run folder (runs/sphere under the working folder) after a 60-step run, and the command's result."""
    result = voxnerf("train", scene_dir, "--max-steps", STEPS, *TINY, cwd=workdir)
    assert result.returncode == 0, result.stderr
    return workdir / "runs" / "sphere", result


def test_train_writes_checkpoint_metrics_and_test_scores(trained):
    run, result = trained
    assert (run / "checkpoint.pt").is_file() and (run / "config.yaml").is_file()
    rows = (run / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("loss,") and len(rows) == 1 + STEPS // 10
    scores = json.loads((run / "eval.json").read_text())
    assert scores["split"] == "test" and len(scores["views"]) == N_TEST
    assert math.isfinite(scores["mean"]["psnr"]) and scores["mean"]["psnr"] > 10
    for name in ("checkpoint.pt", "metrics.csv", "eval.json"):
        assert str(Path("runs") / "sphere" / name) in result.stdout
    assert "PSNR" in result.stdout and "SSIM" in result.stdout


def test_eval_rewrites_eval_json_with_the_same_scores(trained, workdir):
    run, _ = trained
    before = json.loads((run / "eval.json").read_text())
    (run / "eval.json").unlink()
    result = voxnerf("eval", run, "--device", "cpu", cwd=workdir)
    assert result.returncode == 0, result.stderr
    after = json.loads((run / "eval.json").read_text())
    assert after["mean"]["psnr"] == pytest.approx(before["mean"]["psnr"], abs=1e-3)
    assert [v["view"] for v in after["views"]] == ["r_0.png", "r_1.png"]
    assert "r_1.png" in result.stdout and "PSNR" in result.stdout


def test_render_writes_color_and_depth_pngs_and_an_orbit(trained, workdir):
    run, _ = trained
    result = voxnerf("render", run, "--frames", 4, "--quiet", cwd=workdir)
    assert result.returncode == 0, result.stderr
    folder = run / "renders" / "test"
    assert sorted(p.name for p in folder.iterdir()) == ["r_0.png", "r_0_depth.png", "r_1.png", "r_1_depth.png"]
    assert iio.imread(folder / "r_0.png").shape == (32, 32, 3)
    assert iio.imread(folder / "r_0_depth.png").shape == (32, 32)
    assert iio.imread(run / "renders" / "orbit.mp4", index=None).shape == (4, 32, 32, 3)


def test_render_along_a_camera_path_file_sees_what_the_test_views_see(trained, workdir, scene_dir):
    run, _ = trained
    cameras = load_scene(scene_dir, with_images=False)
    test = cameras.cameras.subset(cameras.split_indices("test"))
    save_camera_path(workdir / "path.json", test, fps=4.0)
    assert voxnerf("render", run, "--no-video", "--quiet", cwd=workdir).returncode == 0
    result = voxnerf("render", run, "--camera-path", workdir / "path.json", "--threads", "1", "--quiet", cwd=workdir)
    assert result.returncode == 0, result.stderr
    frames = iio.imread(run / "renders" / "path.mp4", index=None)
    assert frames.shape == (2, 32, 32, 3)
    assert "views" not in result.stdout and f"video       {run / 'renders' / 'path.mp4'}" in result.stdout
    views = [iio.imread(run / "renders" / "test" / f"r_{i}.png") for i in range(2)]
    assert all(psnr(frame / 255, view / 255) > 25 for frame, view in zip(frames, views))


def test_render_makes_paths_of_the_asked_length_and_size(trained, workdir):
    run, _ = trained
    result = voxnerf("render", run, "--path", "interpolate", "--fps", "8", "--seconds", "0.5", "--resolution",
                     "40x24", "--no-video", "--quiet", cwd=workdir)
    assert result.returncode == 0 and not (run / "renders" / "interpolate.mp4").exists()
    result = voxnerf("render", run, "--path", "interpolate", "--fps", "8", "--seconds", "0.5", "--resolution",
                     "40x24", "--quiet", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert iio.imread(run / "renders" / "interpolate.mp4", index=None).shape == (4, 24, 40, 3)
    assert iio.immeta(run / "renders" / "interpolate.mp4")["fps"] == 8


def test_render_writes_everything_under_out(trained, workdir):
    run, _ = trained
    out = workdir / "shots" / "sphere"
    result = voxnerf("render", run, "--out", out, "--frames", 2, "--quiet", cwd=workdir)
    assert result.returncode == 0, result.stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["orbit.mp4", "test/r_0.png", "test/r_0_depth.png", "test/r_1.png", "test/r_1_depth.png"]
    assert [p.name for p in out.parent.iterdir()] == ["sphere"]  # nothing beside OUT
    assert f"video       {out / 'orbit.mp4'}" in result.stdout


@pytest.mark.parametrize("command", ["eval", "render", "export"])
def test_threads_below_one_are_refused(trained, workdir, command):
    run, _ = trained
    extra = ["--mesh", "m.ply"] if command == "export" else []
    assert_one_line_error(voxnerf(command, run, "--threads", "0", *extra, cwd=workdir), "--threads 0")


def test_eval_writes_no_bar_into_a_log_and_says_the_size_it_scored_at(trained, workdir):
    run, _ = trained
    result = voxnerf("eval", run, "--device", "cpu", "--threads", "1", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "test views" not in result.stderr  # off a terminal: a line every 30 s
    # (tests/test_large_photos.py), none for two views that take less
    assert "(2 views at 32x32," in result.stdout


def test_resume_continues_the_run_to_the_new_step_budget(trained, workdir, scene_dir):
    run, _ = trained
    copy = workdir / "resumed"
    shutil.copytree(run, copy)
    result = voxnerf("train", scene_dir, "--out", copy, "--resume", "--max-steps", STEPS + 20, "--quiet",
                     "--threads", "1", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert f"trained     {STEPS + 20} steps" in result.stdout
    assert len((copy / "metrics.csv").read_text().splitlines()) == 1 + (STEPS + 20) // 10


def test_resume_without_a_checkpoint_is_a_one_line_error(workdir, scene_dir):
    result = voxnerf("train", scene_dir, "--out", workdir / "empty-run", "--resume", cwd=workdir)
    assert_one_line_error(result, "empty-run", "checkpoint.pt")


def test_training_over_an_existing_run_needs_resume_or_overwrite(trained, workdir, scene_dir):
    run, _ = trained
    result = voxnerf("train", scene_dir, "--out", run, cwd=workdir)
    assert_one_line_error(result, "--resume", "--overwrite")


def test_unknown_set_key_is_a_one_line_error_naming_it(workdir, scene_dir):
    result = voxnerf("train", scene_dir, "--out", workdir / "bad-set", "--set", "optim.lr_grd=0.1", cwd=workdir)
    assert_one_line_error(result, "optim.lr_grd", "lr_grid")
    assert not (workdir / "bad-set").exists()


def test_train_on_a_folder_without_a_scene_is_a_one_line_error(workdir):
    folder = workdir / "not-a-scene"
    folder.mkdir()
    (folder / "notes.txt").write_text("no images here")
    result = voxnerf("train", folder, cwd=workdir)
    assert_one_line_error(result, "not-a-scene", "no known scene format")
