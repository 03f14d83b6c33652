"""Shared fixtures: synthetic scenes to write in every format, the real data folder, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voxnerf.data.cameras import Cameras
from voxnerf.data.scene import Scene

REPO = Path(__file__).resolve().parents[1]
TARGET = np.array([0.1, -0.2, 0.3])


def look_at(eye: np.ndarray, target: np.ndarray, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """(3, 4) OpenCV camera-to-world matrix of a camera at `eye` (3,) looking at `target` (3,)."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward, eye], -1)


def build_scene(
    n: int = 12,
    size: tuple[int, int] = (24, 20),
    intrinsics: tuple[float, float, float, float] = (30.0, 28.0, 11.3, 10.7),
    distortion: tuple[float, float, float, float] = (0.05, -0.01, 0.002, -0.001),
    channels: int = 3,
    masks: bool = True,
    points: bool = True,
    seed: int = 0,
) -> Scene:
    """A small object capture: n cameras on a sphere of radius 4 around TARGET, random images (width, height `size`).

    Every camera shares `intrinsics` (fx, fy, cx, cy) and `distortion` (k1, k2, p1, p2); the box of interest is
    the cube TARGET +- 1 and, with `points`, 60 sparse points lie inside it.
    """
    rng = np.random.default_rng(seed)
    k = np.arange(n) + 0.5
    elevation = np.arcsin(0.1 + 0.8 * k / n)
    azimuth = np.pi * (1 + 5**0.5) * k
    ring = np.cos(elevation)
    directions = np.stack([ring * np.cos(azimuth), ring * np.sin(azimuth), np.sin(elevation)], -1)
    eyes = TARGET + 4.0 * directions
    cameras = Cameras(
        np.stack([look_at(e, TARGET) for e in eyes]),
        np.tile(intrinsics, (n, 1)),
        np.tile(size, (n, 1)),
        np.tile(distortion, (n, 1)),
    )
    width, height = size
    return Scene(
        root=Path("synthetic"),
        format="synthetic",
        image_paths=[Path(f"synthetic/{i}.png") for i in range(n)],
        cameras=cameras,
        splits={"train": np.arange(n)[n // 4:], "val": np.arange(n)[: n // 8], "test": np.arange(n)[n // 8: n // 4]},
        bbox=np.stack([TARGET - 1, TARGET + 1]),
        near=2.0,
        far=6.0,
        images=[rng.integers(0, 256, (height, width, channels), dtype=np.uint8) for _ in range(n)],
        masks=[rng.random((height, width)) > 0.5 for _ in range(n)] if masks else None,
        points=TARGET + rng.uniform(-0.7, 0.7, (60, 3)) if points else None,
    )


@pytest.fixture
def general_scene() -> Scene:
    """Distorted cameras with fx != fy and an off-center principal point, masks and sparse points."""
    return build_scene()


@pytest.fixture
def undistorted_scene() -> Scene:
    """As general_scene without lens distortion (formats without distortion: NeuS)."""
    return build_scene(distortion=(0.0, 0.0, 0.0, 0.0))


@pytest.fixture
def pinhole_scene() -> Scene:
    """One focal length, centered principal point, no distortion, RGBA images (Blender and LLFF)."""
    return build_scene(intrinsics=(26.0, 26.0, 12.0, 10.0), distortion=(0.0, 0.0, 0.0, 0.0), channels=4)


@pytest.fixture
def make_scene():
    """build_scene, for tests that need other cameras than the named fixtures."""
    return build_scene


@pytest.fixture
def nerf_synthetic() -> Path:
    """The real NeRF-Synthetic folder ($VOXNERF_DATA, else ../shared/data/nerf_synthetic); skips when absent."""
    root = Path(os.environ.get("VOXNERF_DATA", REPO.parent / "shared" / "data" / "nerf_synthetic"))
    if not root.is_dir():
        pytest.skip(f"real data not found at {root} (set VOXNERF_DATA to the nerf_synthetic folder)")
    return root


@pytest.fixture
def voxnerf_cli():
    """Run `python -m voxnerf ARGS...` and return the CompletedProcess (text stdout and stderr)."""

    def run(*args: str | Path) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "voxnerf", *map(str, args)]
        return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)

    return run
