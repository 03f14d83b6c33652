"""The scene formats, one module each, that reads and writes it: `NAME`, `detect(root) -> bool`,
`load(root, with_images, downscale) -> Scene` and `write(scene, out, **options)`.

Detection tries FORMATS in order: LLFF comes before COLMAP because LLFF scenes usually ship the COLMAP model
(`sparse/0/`) they were made from, and `poses_bounds.npy` is the more specific sign.

A scene (images loaded) written in a format reads back as the same scene (`write_scene`): used for test fixtures
and to write toy scenes in every format. Images and masks are written as PNG, so they come back bit for bit. A
format that cannot hold a scene's cameras (Blender and LLFF: one focal length, centered principal point, no
distortion) raises ValueError rather than writing something else.
"""

from __future__ import annotations

from pathlib import Path

from voxnerf.data.formats import blender, colmap, llff, nerfstudio, neus
from voxnerf.data.scene import Scene
from voxnerf.errors import SceneError, VoxnerfError

FORMATS = [blender, nerfstudio, llff, colmap, neus]
WRITERS = {fmt.NAME: fmt.write for fmt in FORMATS}


def detect_format(root: Path):
    """The format module for `root`, or SceneError listing what was looked for."""
    for fmt in FORMATS:
        if fmt.detect(root):
            return fmt
    expected = ", ".join(f.NAME for f in FORMATS)
    raise SceneError(root, f"no known scene format here (looked for: {expected})")


def format_named(name: str):
    """The format module of format `name` (`--format`), or a VoxnerfError listing the known ones."""
    for fmt in FORMATS:
        if fmt.NAME == name:
            return fmt
    raise VoxnerfError(f"format '{name}': unknown scene format (known: {', '.join(f.NAME for f in FORMATS)})")


def write_scene(scene: Scene, fmt: str, out_dir: str | Path, **options) -> Path:
    """Write `scene` as format `fmt` into `out_dir` (created if needed) and return that folder.

    Options by format:
        nerfstudio: split_lists (write `{split}_filenames`), aabb_scale (write instant-ngp's box size),
            downscales (factors d of extra `images_{d}/` and `masks_{d}/` copies).
        llff: downscales (factors d of extra `images_{d}/` copies).
        colmap: binary (True: .bin files, False: .txt files), downscales.
    """
    if fmt not in WRITERS:
        raise ValueError(f"unknown format '{fmt}' (known: {', '.join(WRITERS)})")
    if scene.images is None:
        raise ValueError("the scene was loaded without images; load it with with_images=True to write it")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    WRITERS[fmt](scene, out, **options)
    return out
