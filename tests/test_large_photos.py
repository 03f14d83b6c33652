"""Photos as users bring them: a capture larger than the grid can use trains at a size that follows from the
configuration (said once, recorded in the run, kept on resume, `--downscale 1` to refuse it); photos and masks
are decoded at the size in use, never all at full size at once; scores say at which size they were taken; long
loops tell a log where they are."""

from __future__ import annotations

import dataclasses
import io
import tracemalloc

import imageio.v3 as iio
import numpy as np
import pytest

import voxnerf.scenes as toy_scenes
from voxnerf.cli.evaluate import mean_line
from voxnerf.data import load_scene
from voxnerf.data.formats import write_scene
from voxnerf.data.images import read_image, read_mask, resize_area
from voxnerf.run.config import TrainConfig
from voxnerf.run.load import load_run
from voxnerf.system.progress import track
from voxnerf.train.downscale import training_downscale
from voxnerf.train.session import train_run

SETS = ["levels=[{until: 1.0, resolution: 16, image_scale: 1.0}]", "optim.target_samples=4096",
        "optim.min_rays=128", "optim.max_rays=512", "pixels_per_cell=1"]  # photos over 16x16 px are downscaled


def smooth_photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """(height, width, 3) uint8: a few low-frequency waves, as a photo's content is mostly smooth."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    waves = [np.sin(2 * np.pi * (rng.uniform(1, 4) * x + rng.uniform(1, 4) * y) + rng.uniform(0, 6))
             for _ in range(3)]
    return (127.5 + 120 * np.stack(waves, -1)).astype(np.uint8)


def test_a_large_jpeg_read_at_a_smaller_size_matches_the_area_resized_full_decode(tmp_path):
    path = tmp_path / "big.jpg"
    iio.imwrite(path, smooth_photo(1024, 768), quality=95)
    full = read_image(path)
    for size in [(128, 96), (100, 75), (512, 384)]:
        small = read_image(path, size)
        assert small.shape == (size[1], size[0], 3)
        assert np.abs(small.astype(float) - resize_area(full, size)).mean() < 1.0  # levels of 255


def test_a_mask_read_at_a_smaller_size_is_covered_more_than_half(tmp_path):
    mask = np.zeros((800, 800), np.uint8)
    mask[200:600, 100:500] = 255
    path = tmp_path / "mask.jpg"
    iio.imwrite(path, mask, quality=95)
    small = read_mask(path, (100, 100))
    expected = np.zeros((100, 100), bool)
    expected[25:75, 12:62] = True
    assert small.shape == (100, 100) and (small != expected).sum() <= 100  # one-pixel rows at the edges at most


def test_loading_a_capture_holds_no_decoded_mask(pinhole_scene, tmp_path):
    factor = 100  # 2400 x 2000 photos and masks
    photos = [np.kron(im[..., :3], np.ones((factor, factor, 1), np.uint8)) for im in pinhole_scene.images]
    scene = dataclasses.replace(pinhole_scene, images=photos, masks=None,
                                cameras=pinhole_scene.cameras.scaled(factor))
    root = write_scene(scene, "llff", tmp_path / "llff")
    (root / "masks").mkdir()
    for path, mask in zip(sorted((root / "images").iterdir()), pinhole_scene.masks):
        big = np.kron(mask, np.ones((factor, factor), np.uint8)) * np.uint8(255)
        iio.imwrite(root / "masks" / f"{path.stem}.png", big)
    tracemalloc.start()
    loaded = load_scene(root)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    one_mask = 2400 * 2000  # bytes, decoded (uint8 or bool)
    assert peak < 6 * one_mask  # a mask at a time as it is decoded (the box's hull reads them one by one); all 12
    #                             masks held, as before, took 12 of them and more
    assert np.array_equal(loaded.masks[3], np.kron(pinhole_scene.masks[3], np.ones((factor, factor), bool)))


@pytest.mark.parametrize("size, expected", [((4000, 4000), 8), ((500, 500), 1), ((400, 600), 1),
                                            ((800, 800), 2), ((4000, 3000), 7)])
def test_the_training_size_holds_at_most_the_pixels_the_finest_grid_can_use(size, expected):
    cfg = TrainConfig()  # finest level 256^3, 4 pixels per cell: up to 1024^2 pixels
    cpu = dataclasses.replace(cfg, levels=[dataclasses.replace(level, resolution=min(level.resolution, 128))
                                           for level in cfg.levels])  # configs/cpu.yaml's 128^3: 512^2 pixels
    assert training_downscale(np.array([size]), cpu) == expected
    assert training_downscale(np.array([size]), cfg) == max(1, (expected + 1) // 2)


@pytest.fixture(scope="module")
def large_capture(tmp_path_factory):
    """A 48-pixel toy scene, three times what SETS's 16^3 grid at one pixel per cell can use."""
    root = tmp_path_factory.mktemp("large")
    return toy_scenes.make_scene("sphere", root / "sphere", n_train=4, n_val=0, n_test=2, size=48, n_samples=64)


def test_large_photos_train_at_the_size_the_grid_can_use_and_the_run_records_it(large_capture, tmp_path):
    said = []
    outcome = train_run(large_capture, None, tmp_path / "run", device="cpu", sets=SETS, max_steps=3, threads=1,
                        quiet=True, say=said.append)
    assert "images      48x48 -> 16x16 (1/3: the finest grid, 16^3, uses up to 1 pixels per cell; " \
           "--downscale 1 keeps 48x48)" in said
    assert outcome.scores["size"] == [16, 16] and outcome.scores["downscale"] == 3
    assert "2 views at 16x16, 1/3 size" in mean_line(outcome.scores)
    run = load_run(outcome.out)
    assert run.record.downscale == 3 and run.scene().cameras.sizes[0].tolist() == [16, 16]  # eval's default size


def test_a_resumed_run_keeps_its_size_and_downscale_1_keeps_the_photos(large_capture, tmp_path):
    train_run(large_capture, None, tmp_path / "run", device="cpu", sets=SETS, max_steps=2, threads=1, quiet=True,
              downscale=2)
    said = []
    resumed = train_run(large_capture, None, tmp_path / "run", device="cpu", sets=SETS, max_steps=4, threads=1,
                        quiet=True, resume=True, say=said.append)
    assert resumed.scores["size"] == [24, 24] and any("1/2: the run's own size" in line for line in said)
    full = train_run(large_capture, None, tmp_path / "full", device="cpu", sets=SETS, max_steps=2, threads=1,
                     quiet=True, downscale=1)
    assert full.scores["size"] == [48, 48] and full.scores["downscale"] == 1


def test_a_long_loop_tells_a_log_where_it_is_every_30_seconds_with_an_eta(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("voxnerf.system.progress.time.monotonic", lambda: now[0])
    log = io.StringIO()
    for _ in track(range(10), "decoding photos", "photo", file=log):
        now[0] += 10.0  # 10 s a photo
    lines = log.getvalue().splitlines()
    assert lines[0] == "voxnerf: decoding photos 3/10 photo  30%    30.0 s  ETA 70 s"
    assert len(lines) == 4 and lines[-1] == "voxnerf: decoding photos 10/10 photo 100%   100.0 s"


def test_a_short_loop_writes_nothing_to_a_log():
    log = io.StringIO()
    assert list(track(range(3), "scoring test views", "view", file=log)) == [0, 1, 2]
    assert log.getvalue() == ""
