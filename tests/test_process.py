"""`voxnerf process`: a toy capture with known poses (the speckled `textured` capture, rendered) posed by COLMAP
(pycolmap) comes back with the true poses up to a similarity, and trains as well as on the true poses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
import torch

import voxnerf.scenes as vs
from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras
from voxnerf.errors import VoxnerfError
from voxnerf.process.capture import process_capture
from voxnerf.process.frames import frame_indices
from voxnerf.process.sfm import SfmOptions
from voxnerf.run.config import load_config
from voxnerf.train.presets import preset_path
from voxnerf.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
VIEWS, WIDTH = 24, 160  # 160 x 120 pixels: SIFT finds ~300 features per view on the speckles
# Small images have few features: the first pair needs 30 matches instead of COLMAP's 100.
OPTIONS = SfmOptions(min_inliers=30, threads=1)  # one thread and the fixed seed: the same reconstruction every run
ROTATION_TOLERANCE = 1.5  # degrees (measured: 0.63 at most)
CENTER_TOLERANCE = 0.04  # of the cameras' spread, the ring's diameter 3.6 (measured: 0.017 at most)
SHORT_TRAINING = {
    "levels": [{"until": 0.3, "resolution": 16, "image_scale": 1.0},
               {"until": 1.0, "resolution": 32, "image_scale": 1.0}],
    "occupancy": {"warmup_steps": 30},
    "optim": {"target_samples": 4096, "min_rays": 256, "max_rays": 1024},
    "max_steps": 150, "log_every": 50, "checkpoint_every": 1000, "threads": 2,
}


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """The textured toy capture in COLMAP format with its true poses (and images_2/)."""
    return vs.make_capture("textured", tmp_path_factory.mktemp("truth"), "colmap", n_views=VIEWS, width=WIDTH,
                           n_samples=64, n_points=500, downscales=(2,))


@pytest.fixture(scope="module")
def processed(capture, tmp_path_factory):
    """(report, scene folder) of `process_capture` on the capture's images alone."""
    out = tmp_path_factory.mktemp("processed") / "scene"
    return process_capture(capture / "images", out, OPTIONS, downscales=(2, 4)), out


def similarity(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Scale s, rotation R (3, 3) and translation t (3,) minimizing |s R source + t - target|² over (N, 3) points
    (Umeyama's closed form)."""
    mu_s, mu_t = source.mean(0), target.mean(0)
    a, b = source - mu_s, target - mu_t
    u, d, vt = np.linalg.svd(b.T @ a / len(a))
    flip = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ flip @ vt
    scale = float(np.trace(np.diag(d) @ flip) / (a**2).sum(1).mean())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def pose_errors(found: Cameras, truth: Cameras) -> tuple[np.ndarray, np.ndarray]:
    """(N,) rotation errors in degrees and (N,) camera-center distances after aligning `found` onto `truth`."""
    scale, rotation, shift = similarity(found.centers, truth.centers)
    centers = scale * found.centers @ rotation.T + shift
    relative = np.einsum("nji,njk->nik", truth.c2w[:, :, :3], rotation @ found.c2w[:, :, :3])
    cosine = (np.trace(relative, axis1=1, axis2=2) - 1) / 2
    return np.degrees(np.arccos(np.clip(cosine, -1, 1))), np.linalg.norm(centers - truth.centers, axis=-1)


def short_training_psnr(root: Path, out: Path) -> float:
    """Test PSNR after a short training on `root`'s images_2 (80 x 60) with the 360 preset."""
    cfg = load_config(preset_path("360"), [SHORT_TRAINING])
    trainer = Trainer(load_scene(root, downscale=2), cfg, out, torch.device("cpu"), quiet=True)
    trainer.train()
    return trainer.evaluate(with_lpips=False, write=False)["mean"]["psnr"]


def test_every_view_of_the_toy_capture_is_registered(processed):
    report, out = processed
    assert report.images == VIEWS and len(report.registered) == VIEWS and report.unregistered == []
    assert report.points > 100 and report.reprojection_error < 1.0
    assert [p.name for p in report.downscaled] == ["images_2", "images_4"]
    assert iio.improps(out / "images_4" / "image_000.png").shape[:2] == (30, 40)


def test_recovered_poses_match_the_truth_up_to_a_similarity(capture, processed):
    _, out = processed
    truth, found = load_scene(capture, with_images=False), load_scene(out, with_images=False)
    assert [p.name for p in found.image_paths] == [p.name for p in truth.image_paths]
    rotation_error, center_error = pose_errors(found.cameras, truth.cameras)
    spread = 2 * 1.8
    assert rotation_error.max() < ROTATION_TOLERANCE, rotation_error
    assert center_error.max() < CENTER_TOLERANCE * spread, center_error
    focal = truth.cameras.intrinsics[0, 0]
    assert abs(found.cameras.intrinsics[0, 0] - focal) < 0.05 * focal


def test_training_on_the_recovered_poses_is_within_1_db_of_training_on_the_true_poses(capture, processed, tmp_path):
    _, out = processed
    on_truth = short_training_psnr(capture, tmp_path / "truth")
    on_found = short_training_psnr(out, tmp_path / "found")
    assert on_found > on_truth - 1.0, (on_found, on_truth)


def test_a_video_becomes_frames_that_are_posed(capture, tmp_path):
    video = tmp_path / "walk.mp4"
    frames = [iio.imread(p) for p in sorted((capture / "images").glob("*.png"))]
    iio.imwrite(video, np.stack(frames), fps=8, codec="libx264", macro_block_size=2, quality=9)
    r = subprocess.run([sys.executable, "-m", "voxnerf", "process", str(video), str(tmp_path / "scene"), "--frames",
                        str(VIEWS), "--min-inliers", "30", "--threads", "1", "--downscales", ""],  # repeatable
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"registered  {VIEWS} of {VIEWS} images (100%)" in r.stdout
    assert sorted(p.name for p in (tmp_path / "scene" / "images").iterdir())[:2] == ["frame_00000.png",
                                                                                     "frame_00001.png"]
    assert len(load_scene(tmp_path / "scene", with_images=False).image_paths) == VIEWS


def test_frames_are_spread_over_the_whole_video():
    np.testing.assert_array_equal(frame_indices(100, 5), [0, 25, 50, 74, 99])
    np.testing.assert_array_equal(frame_indices(3, 10), [0, 1, 2])


def test_a_folder_that_already_holds_files_is_not_overwritten(capture, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(VoxnerfError, match="not empty .give --overwrite"):
        process_capture(capture / "images", tmp_path, OPTIONS)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("source, options, message", [
    ("missing", OPTIONS, "no such file or folder"),
    ("groundtruth.json", OPTIONS, "not a video"),
    ("images", SfmOptions(camera_model="PINHOLE_ISH"), "--camera-model PINHOLE_ISH: expected one of"),
    ("depth", OPTIONS, "no images"),
])
def test_bad_input_is_named(capture, tmp_path, source, options, message):
    with pytest.raises(VoxnerfError, match=message):
        process_capture(capture / source, tmp_path / "out", options)
