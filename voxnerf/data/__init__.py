"""What a capture is and where it lies: the Scene (images, cameras, splits, bounds), the rays through its pixels,
the capture's layout (object, forward, unbounded), the Space that maps it onto the grid and its normalization, and
the scene formats (`voxnerf.data.formats`, one module each that reads and writes it), chosen by what the folder
holds. Beside them: `files` (finding and checking files), `images` (decoding, masks, area downscaling),
`camera_checks` (poses and intrinsics), `bounds` (boxes and near/far), `hull` (the masks' visual hull),
`mask_check` (masks against the poses), `footprint` (what a cell spans in the photos).

May import only `voxnerf.errors` and `voxnerf.system`: every other stage reads scenes.

Every scene's cameras and splits are checked here, whatever the format (`check_cameras`, `check_splits`); loaders
whose bounds depend on the cameras check them before computing bounds too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from voxnerf.data.camera_checks import check_cameras
from voxnerf.data.formats import detect_format, format_named
from voxnerf.data.scene import Scene, check_splits
from voxnerf.errors import SceneError


def load_scene(path: str | Path, with_images: bool = True, downscale: int = 1, format: str | None = None) -> Scene:
    """Load a scene folder in any supported format.

    Args:
        path: the scene folder.
        with_images: decode images on access (False only checks that each is readable and measures it).
        downscale: integer image downscale: the format's smaller copies where it has them (`images_{d}/`), else
            the full-size images resized on access, intrinsics scaled alike.
        format: a format name to read the folder as (default: detected, see `detect_format`).
    """
    root = Path(path)
    if not root.exists():
        raise SceneError(root, "no such folder")
    if not root.is_dir():
        raise SceneError(root, "not a folder")
    if not any(root.iterdir()):
        raise SceneError(root, "folder is empty")
    if isinstance(downscale, bool) or not isinstance(downscale, int) or downscale < 1:
        raise SceneError(root, f"downscale {downscale!r}: expected a whole number of 1 or more")
    fmt = format_named(format) if format else detect_format(root)
    with np.errstate(all="ignore"):  # a broken camera is reported by check_cameras below, not as numpy warnings
        if downscale > 1 and not (root / f"images_{downscale}").is_dir():
            scene = fmt.load(root, with_images=with_images, downscale=1).downscaled(downscale)
        else:
            scene = dataclasses.replace(fmt.load(root, with_images=with_images, downscale=downscale),
                                        downscale=downscale)
    source = root / getattr(fmt, "FILE", "")
    scene.cameras = check_cameras(scene.cameras, source, scene.image_paths)
    check_splits(scene.splits, source)
    return scene
