"""Scene loaders, one module per format, chosen by what the folder holds.

Each format module has `NAME`, `detect(root) -> bool` and `load(root, with_images, downscale) -> Scene`.
Every scene's cameras and splits are checked here, whatever the format (`check_cameras`, `check_splits`); loaders
whose bounds depend on the cameras check them before computing bounds too. Detection tries FORMATS in order: LLFF comes before COLMAP because LLFF scenes usually ship the COLMAP model
(`sparse/0/`) they were made from, and `poses_bounds.npy` is the more specific sign.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxnerf.data import blender, colmap, llff, nerfstudio, neus
from voxnerf.data.common import check_cameras, check_splits
from voxnerf.errors import SceneError
from voxnerf.scene import Scene

FORMATS = [blender, nerfstudio, llff, colmap, neus]


def detect_format(root: Path):
    """The loader module for `root`, or SceneError listing what was looked for."""
    for fmt in FORMATS:
        if fmt.detect(root):
            return fmt
    expected = ", ".join(f.NAME for f in FORMATS)
    raise SceneError(root, f"no known scene format here (looked for: {expected})")


def load_scene(path: str | Path, with_images: bool = True, downscale: int = 1) -> Scene:
    """Load a scene folder in any supported format.

    Args:
        path: the scene folder.
        with_images: decode every image (False only checks that each is readable and measures it).
        downscale: integer image downscale for formats that ship smaller copies (LLFF's images_4, ...).
    """
    root = Path(path)
    if not root.exists():
        raise SceneError(root, "no such folder")
    if not root.is_dir():
        raise SceneError(root, "not a folder")
    if not any(root.iterdir()):
        raise SceneError(root, "folder is empty")
    fmt = detect_format(root)
    with np.errstate(all="ignore"):  # a broken camera is reported by check_cameras below, not as numpy warnings
        scene = fmt.load(root, with_images=with_images, downscale=downscale)
    source = root / getattr(fmt, "FILE", "")
    scene.cameras = check_cameras(scene.cameras, source, scene.image_paths)
    check_splits(scene.splits, source)
    return scene
