"""The web viewer: what a browser shows of a run, the camera path it saves, and the progress it shows in training.

One toy sphere run (200 steps, about ten seconds) is shared by the module. The browser test opens the page of
`voxnerf viewer` in headless Chromium (the Debian package `chromium`, driven by playwright) and skips where it is
not installed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import imageio.v3 as iio
import numpy as np
import pytest
import torch
import viser.transforms as vtf

import voxnerf_scenes
from voxnerf.cameras import Cameras, opengl_to_opencv
from voxnerf.keyframes import Keyframe, interpolate, write_camera_path
from voxnerf.metrics import psnr
from voxnerf.run import load_run
from voxnerf.session import prepare
from voxnerf.trainer import Trainer
from voxnerf.video import look_at, world_up
from voxnerf.viewer import TrainingViewer, Viewer, browser_camera, start_position, vertical_fov

SETS = ["levels=[{until: 1.0, resolution: 32, image_scale: 1.0}]", "optim.target_samples=16384", "log_every=10"]
TINY = ["--threads", "1", "--quiet", *[a for s in SETS for a in ("--set", s)]]
CHROMIUM = shutil.which("chromium")
WINDOW = (800, 600)


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory) -> Path:
    return voxnerf_scenes.make_scene("sphere", tmp_path_factory.mktemp("viewer") / "sphere", n_train=20, n_val=2,
                                     n_test=2, size=32, n_samples=128)


@pytest.fixture(scope="module")
def run_dir(scene_dir: Path) -> Path:
    out = scene_dir.parent / "run"
    result = subprocess.run([sys.executable, "-m", "voxnerf", "train", scene_dir, "--out", out, "--max-steps", "200",
                             *TINY], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return out


def camera_like(c2w: np.ndarray, fov: float, aspect: float, width: int = 0, height: int = 0) -> SimpleNamespace:
    """A stand-in for a browser's viser CameraHandle at world pose `c2w` (3, 4), OpenCV convention."""
    return SimpleNamespace(wxyz=vtf.SO3.from_matrix(c2w[:, :3]).wxyz, position=c2w[:, 3], fov=fov, aspect=aspect,
                           image_width=width, image_height=height)


def test_a_browser_camera_at_a_training_pose_renders_that_training_view(run_dir: Path):
    run = load_run(run_dir)
    cameras = run.training_cameras().subset([3])
    width, height = (int(s) for s in cameras.sizes[0])
    seen = browser_camera(camera_like(cameras.c2w[0], float(vertical_fov(cameras)[0]), width / height), width)
    assert np.allclose(seen.c2w, cameras.c2w) and np.allclose(seen.intrinsics, cameras.intrinsics)
    assert psnr(run.render_view(seen, 0).rgb, run.render_view(cameras, 0).rgb) > 40


def test_saved_camera_path_holds_the_keyframes_in_the_training_cameras_frame(run_dir: Path, tmp_path: Path):
    run = load_run(run_dir)
    cameras = run.training_cameras()
    viewer = Viewer(run, cameras, port=0, say=lambda _: None)
    try:
        fov = float(vertical_fov(cameras)[0])
        for i in (0, 5, 9):
            viewer.add_keyframe(camera_like(cameras.c2w[i], fov, 1.5))
        viewer.fps.value, viewer.seconds.value, viewer.width.value, viewer.height.value = 10, 2.0, 96, 64
        viewer.path_file.value = str(tmp_path / "paths" / "orbit.json")
        saved = json.loads(viewer.save_camera_path().read_text())
    finally:
        viewer.close()
    assert (saved["camera_type"], saved["render_width"], saved["render_height"], saved["fps"], saved["seconds"]) == \
        ("perspective", 96, 64, 10.0, 2.0)
    poses = [opengl_to_opencv(np.reshape(f["camera_to_world"], (4, 4)))[:3] for f in saved["camera_path"]]
    keyposes = [opengl_to_opencv(np.reshape(k["camera_to_world"], (4, 4)))[:3] for k in saved["keyframes"]]
    assert len(poses) == 20 and len(keyposes) == 3
    assert np.allclose(keyposes, cameras.c2w[[0, 5, 9]], atol=1e-9)
    assert np.allclose(poses[0], cameras.c2w[0], atol=1e-9) and np.allclose(poses[-1], cameras.c2w[9], atol=1e-9)
    assert all(np.allclose(p[:, :3] @ p[:, :3].T, np.eye(3), atol=1e-9) for p in poses)
    assert all(f["fov"] == pytest.approx(np.degrees(fov)) and f["aspect"] == pytest.approx(1.5)
               for f in saved["camera_path"])


def test_path_between_two_keyframes_passes_halfway_at_its_middle_frame(tmp_path: Path):
    a = look_at(np.array([4.0, 0, 0]), np.zeros(3), np.array([0, 0, 1.0]))
    b = look_at(np.array([0, 4.0, 0]), np.zeros(3), np.array([0, 0, 1.0]))
    middle = interpolate([Keyframe(a, 30.0, 1.0), Keyframe(b, 50.0, 1.0)], 3)[1]
    assert np.allclose(middle.c2w[:, 3], [2.0, 2.0, 0.0])
    assert np.allclose(middle.c2w[:, 2], -np.array([1.0, 1.0, 0.0]) / np.sqrt(2))  # looks at the center
    assert middle.fov == pytest.approx(40.0)
    path = write_camera_path(tmp_path / "new" / "p.json", [Keyframe(a, 30.0, 1.0)], 32, 32, 24, 1.0)
    assert len(json.loads(path.read_text())["camera_path"]) == 24


def test_viewer_of_a_training_shows_its_progress(scene_dir: Path, tmp_path: Path):
    scene, cfg = prepare(scene_dir, None, tmp_path / "run", False, SETS, max_steps=10)
    hook = TrainingViewer(port=0, say=lambda _: None)
    trainer = Trainer(scene, cfg, tmp_path / "run", torch.device("cpu"), quiet=True, on_step=[hook])
    try:
        done = trainer.train()
        text = hook.viewer.progress.content
        points = hook.viewer.points
    finally:
        hook.serve_after_training(1)
    assert done["step"] == 10
    assert text.startswith("**training** step ") and "PSNR" in text and "rays/s" in text
    assert len(points.points) > 0


def center_patch(image: np.ndarray, half: int) -> np.ndarray:
    """(3,) mean color in [0, 1] of the (2 half)^2 pixels at the image center."""
    h, w = image.shape[:2]
    return image[h // 2 - half:h // 2 + half, w // 2 - half:w // 2 + half, :3].reshape(-1, 3).mean(0) / 255


def expected_center(run_dir: Path) -> np.ndarray:
    """(3,) the color the run renders at the center of the viewer's first view."""
    run = load_run(run_dir)
    cameras = run.training_cameras()
    center = run.record.bbox.mean(0)
    eye = start_position(cameras, center)
    fy = 0.5 * 64 / np.tan(0.5 * vertical_fov(cameras)[0])
    start = Cameras(look_at(eye, center, world_up(cameras))[None], [[fy, fy, 32, 32]], [[64, 64]], np.zeros((1, 4)))
    return run.render_view(start, 0).rgb[30:34, 30:34].reshape(-1, 3).mean(0)


def browser_center(url: str, expected: np.ndarray, out: Path, tries: int = 10) -> np.ndarray:
    """Open `url` in headless Chromium (800x600) and return the center patch color (3,) of its screenshot (kept in
    `out`), taken every 1.5 s until it is within 0.1 of `expected` (3,) or after `tries` screenshots."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                     "--disable-quic", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": WINDOW[0], "height": WINDOW[1]})
        page.goto(url)
        for _ in range(tries):
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out))
            seen = center_patch(iio.imread(out), 8)
            if np.abs(seen - expected).max() < 0.1:
                break
        browser.close()
    return seen


@pytest.mark.skipif(CHROMIUM is None, reason="headless browser test needs Chromium (Debian: apt-get install chromium)")
def test_browser_page_shows_the_rendered_field(run_dir: Path, tmp_path: Path):
    pytest.importorskip("playwright", reason="the browser test drives Chromium with playwright (the dev extra)")
    server = subprocess.Popen([sys.executable, "-m", "voxnerf", "viewer", run_dir, "--port", "0", "--threads", "1",
                               "--no-camera-images"],  # a camera's image must not pass for the rendered field
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    expected = expected_center(run_dir)
    try:
        url = next(line.split()[1] for line in server.stdout if line.startswith("viewer "))
        seen = browser_center(url, expected, tmp_path / "page.png")
    finally:
        server.send_signal(signal.SIGTERM)  # as Ctrl-C; SIGINT is ignored where pytest runs in the background
        code = server.wait(timeout=60)
    assert code == 0, server.stderr.read()
    blank = [np.zeros(3), np.ones(3)]  # an empty canvas, the scene's background
    assert min(np.abs(expected - b).max() for b in blank) > 0.3
    assert np.abs(seen - expected).max() < 0.1, (seen, expected)


@pytest.mark.parametrize("args, named", [(["viewer", "RUN", "--max-resolution", "8"], "--max-resolution"),
                                         (["viewer", "RUN/missing"], "missing"),
                                         (["train", "RUN", "--viewer", "--nproc", "2"], "--viewer")])
def test_bad_viewer_input_is_a_one_line_error(run_dir: Path, args: list[str], named: str):
    command = [sys.executable, "-m", "voxnerf", *(a.replace("RUN", str(run_dir)) for a in args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("voxnerf: error: ") and named in lines[0]
