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

import voxnerf.scenes as toy_scenes
from voxnerf.data.bounds import bounds_from_cameras, bounds_from_frustums
from voxnerf.data.cameras import Cameras, focal_from_fov, look_at, opengl_to_opencv
from voxnerf.render.views import View
from voxnerf.run.load import Run, load_run
from voxnerf.run.metrics import psnr
from voxnerf.train.session import prepare
from voxnerf.train.trainer import Trainer
from voxnerf.view.keyframes import Keyframe, interpolate, write_camera_path
from voxnerf.view.viewer import TrainingViewer, Viewer, browser_camera, frustum_depth, frustum_points, start_position

SETS = ["levels=[{until: 1.0, resolution: 32, image_scale: 1.0}]", "optim.target_samples=16384", "log_every=10"]
TINY = ["--threads", "1", "--quiet", *[a for s in SETS for a in ("--set", s)]]
CHROMIUM = shutil.which("chromium")
WINDOW = (1280, 720)  # wide enough that the control panel (about 330 px, on the right) leaves the center free


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory) -> Path:
    return toy_scenes.make_scene("sphere", tmp_path_factory.mktemp("viewer") / "sphere", n_train=20, n_val=2,
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
    seen = browser_camera(camera_like(cameras.c2w[0], float(cameras.vertical_fov()[0]), width / height), width)
    assert np.allclose(seen.c2w, cameras.c2w) and np.allclose(seen.intrinsics, cameras.intrinsics)
    assert psnr(run.render_view(seen, 0).rgb, run.render_view(cameras, 0).rgb) > 40


def test_saved_camera_path_holds_the_keyframes_in_the_training_cameras_frame(run_dir: Path, tmp_path: Path):
    run = load_run(run_dir)
    cameras = run.training_cameras()
    viewer = Viewer(run, cameras, port=0, say=lambda _: None)
    try:
        fov = float(cameras.vertical_fov()[0])
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


def cameras_looking(eyes: np.ndarray, targets: np.ndarray, width: int, height: int) -> Cameras:
    """Pinhole cameras at `eyes` (N, 3) looking at `targets` (N, 3), +z up, with a 40 degree vertical field of view."""
    fy = 0.5 * height / np.tan(np.radians(20.0))
    c2w = np.stack([look_at(e, t, np.array([0.0, 0.0, 1.0])) for e, t in zip(eyes, targets)])
    n = len(c2w)
    return Cameras(c2w, np.tile([fy, fy, width / 2, height / 2], (n, 1)), np.tile([width, height], (n, 1)),
                   np.zeros((n, 4)))


def around(azimuth: np.ndarray, elevation: np.ndarray, distance: float) -> np.ndarray:
    """(N, 3) points at `distance` from the origin in the directions (radians) `azimuth` and `elevation` (N,)."""
    return distance * np.stack([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
                                np.sin(elevation)], -1)


def layout(name: str) -> tuple[Cameras, np.ndarray]:
    """Training cameras and scene box (2, 3) of a capture laid out as `name`: "object" (100 cameras over the upper
    hemisphere, as in NeRF-Synthetic), "ring" (60 cameras around an object at 20 degrees elevation, as the
    ethiopianHead capture), "unbounded" (48 cameras around, inside a box of sparse points wider than their
    ring) or "forward" (a 4 x 5 grid of parallel cameras, as an LLFF capture)."""
    rng = np.random.default_rng(0)
    if name == "forward":
        eyes = np.stack(np.meshgrid(np.linspace(-0.3, 0.3, 5), [0.0], np.linspace(-0.2, 0.2, 4)), -1).reshape(-1, 3)
        cameras = cameras_looking(eyes, eyes + [0.0, 1.0, 0.0], 504, 378)
        return cameras, bounds_from_frustums(cameras, 2.0, 20.0)
    if name == "object":
        eyes = around(rng.uniform(0, 2 * np.pi, 100), np.arcsin(rng.uniform(0.05, 1.0, 100)), 4.0)
    else:
        n = 60 if name == "ring" else 48
        eyes = around(np.linspace(0, 2 * np.pi, n, endpoint=False), np.full(n, np.radians(20.0)), 4.0)
    cameras = cameras_looking(eyes, np.zeros_like(eyes), 400, 400)
    return cameras, bounds_from_cameras(cameras)[0] * (4.0 if name == "unbounded" else 1.0)


def frustum_samples(cameras: Cameras, depth: float, rng: np.random.Generator, per_frustum: int = 400) -> np.ndarray:
    """(N * per_frustum, 3) points filling the drawn frusta (`depth` deep): their hulls' corners and random convex
    combinations of them."""
    hulls = frustum_points(cameras, depth)
    weights = np.concatenate([np.eye(hulls.shape[1]), rng.dirichlet(np.ones(hulls.shape[1]), per_frustum)])
    return np.einsum("kh,nhi->nki", weights, hulls).reshape(-1, 3)


def shown_nearer_than(c2w: np.ndarray, fov: float, aspect: float, target: np.ndarray, points: np.ndarray) -> int:
    """How many `points` (M, 3) a camera at pose `c2w` (3, 4) with vertical field of view `fov` (radians) and
    image aspect `aspect` shows nearer (in depth) than `target` (3,)."""
    x, y, z = ((points - c2w[:, 3]) @ c2w[:, :3]).T
    half = np.tan(0.5 * fov)
    in_view = (np.abs(x) < z * half * aspect) & (np.abs(y) < z * half)
    return int(np.sum(in_view & (z > 0) & (z < (target - c2w[:, 3]) @ c2w[:, 2])))


@pytest.mark.parametrize("name", ["object", "ring", "unbounded", "forward"])
def test_no_training_frustum_shows_between_the_start_camera_and_the_scene_center(name: str):
    cameras, bbox = layout(name)
    center = bbox.mean(0)
    start = look_at(start_position(cameras, bbox), center, cameras.up)
    points = frustum_samples(cameras, frustum_depth(cameras, center), np.random.default_rng(1))
    for aspect in (4 / 3, 16 / 9):  # browser windows
        assert shown_nearer_than(start, float(cameras.vertical_fov()[0]), aspect, center, points) == 0
    assert np.linalg.norm(start[:, 3] - center) < np.linalg.norm(cameras.centers - center, axis=1).min()


def test_camera_images_show_only_while_their_box_is_ticked(run_dir: Path):
    run = load_run(run_dir)
    cameras = run.training_cameras()
    images = [np.full((8, 8, 3), 10 * i, np.uint8) for i in range(len(cameras))]
    viewer = Viewer(run, cameras, images, port=0, say=lambda _: None)
    try:
        first = [f.image for f in viewer.frusta]
        viewer.images_box.value = True
        ticked = [f.image for f in viewer.frusta]
        viewer.images_box.value = False
        unticked = [f.image for f in viewer.frusta]
    finally:
        viewer.close()
    assert all(image is None for image in first + unticked)
    assert all(image is shown for image, shown in zip(ticked, images))


def view_from(run: Run, eye: np.ndarray, width: int, height: int) -> Cameras:
    """A width x height pinhole camera at `eye` (3,) looking at the run's box center as the viewer's first view does
    (the up of the training cameras, the first one's vertical field of view)."""
    cameras = run.training_cameras()
    fy = focal_from_fov(cameras.vertical_fov()[0], height)
    return Cameras(look_at(eye, run.record.bbox.mean(0), cameras.up)[None], [[fy, fy, width / 2, height / 2]],
                   [[width, height]], np.zeros((1, 4)))


def center_patch(image: np.ndarray, half: int) -> np.ndarray:
    """(3,) mean color of the (2 half)^2 pixels at the center of `image` (H, W, 3)."""
    h, w = image.shape[:2]
    return image[h // 2 - half:h // 2 + half, w // 2 - half:w // 2 + half].reshape(-1, 3).mean(0)


def browser_screenshot(url: str, expected: np.ndarray, out: Path, tries: int = 10) -> np.ndarray:
    """Open `url` in headless Chromium (WINDOW) and return its screenshot (H, W, 3) in [0, 1] (kept in `out`),
    taken every 1.5 s until its center patch is within 0.1 of `expected` (3,) (a refined frame) or after `tries`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                     "--disable-quic", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": WINDOW[0], "height": WINDOW[1]})
        page.goto(url)
        for _ in range(tries):
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out))
            seen = iio.imread(out)[:, :, :3] / 255
            if np.abs(center_patch(seen, 8) - expected).max() < 0.1:
                break
        browser.close()
    return seen


def shown_share(seen: np.ndarray, view: View) -> float:
    """Share of the screenshot `seen` (H, W, 3) showing the field as `view` renders it (at a whole fraction of
    its size): pixels of the field (opacity > 0.5) whose screenshot color is within 0.15 of the rendered one."""
    k = seen.shape[0] // view.rgb.shape[0]
    h, w = view.rgb.shape[:2]
    small = seen[:h * k, :w * k].reshape(h, k, w, k, 3).mean((1, 3))
    return float(np.mean((view.opacity > 0.5) & (np.abs(small - view.rgb).max(-1) < 0.15)))


@pytest.mark.skipif(CHROMIUM is None, reason="headless browser test needs Chromium (Debian: apt-get install chromium)")
def test_browser_first_view_shows_the_field_at_least_as_large_as_the_nearest_training_view(run_dir: Path,
                                                                                            tmp_path: Path):
    pytest.importorskip("playwright", reason="the browser test drives Chromium with playwright (the dev extra)")
    server = subprocess.Popen([sys.executable, "-m", "voxnerf", "viewer", run_dir, "--port", "0", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = load_run(run_dir)
    cameras, center = run.training_cameras(), run.record.bbox.mean(0)
    small = (WINDOW[0] // 4, WINDOW[1] // 4)
    start = run.render_view(view_from(run, start_position(cameras, run.record.bbox), *small), 0)
    nearest = cameras.centers[np.argmin(np.linalg.norm(cameras.centers - center, axis=1))]
    trained = run.render_view(view_from(run, nearest, *small), 0)
    try:
        url = next(line.split()[1] for line in server.stdout if line.startswith("viewer "))
        seen = browser_screenshot(url, center_patch(start.rgb, 2), tmp_path / "page.png")
    finally:
        server.send_signal(signal.SIGTERM)  # as Ctrl-C; SIGINT is ignored where pytest runs in the background
        code = server.wait(timeout=60)
    assert code == 0, server.stderr.read()
    blank = [np.zeros(3), np.ones(3)]  # an empty canvas, the scene's background
    assert min(np.abs(center_patch(start.rgb, 2) - b).max() for b in blank) > 0.3
    assert np.abs(center_patch(seen, 8) - center_patch(start.rgb, 2)).max() < 0.1
    # From inside the ring the field looks larger than from the nearest training camera (with the same field of
    # view); 0.8 of that share allows for the JPEG frame and the soft edge of a 200-step field.
    shown, trained_share = shown_share(seen, start), float(np.mean(trained.opacity > 0.5))
    assert shown > 0.8 * trained_share, (shown, trained_share)


@pytest.mark.parametrize("args, named", [(["viewer", "RUN", "--max-resolution", "8"], "--max-resolution"),
                                         (["viewer", "RUN/missing"], "missing"),
                                         (["train", "RUN", "--viewer", "--nproc", "2"], "--viewer")])
def test_bad_viewer_input_is_a_one_line_error(run_dir: Path, args: list[str], named: str):
    command = [sys.executable, "-m", "voxnerf", *(a.replace("RUN", str(run_dir)) for a in args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("voxnerf: error: ") and named in lines[0]
