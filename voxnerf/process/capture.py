"""`voxnerf process`: a folder of photos or a video in, a COLMAP scene folder that voxnerf trains on out.

    OUT/images/          the photos (copied) or the video's frames (frame_NNNNN.png), undistorted to PINHOLE
                         when the camera model is one voxnerf does not read (fisheye, ...)
    OUT/images_2/, ...   downscaled copies (voxnerf's loaders read them with a downscale)
    OUT/sparse/0/        the COLMAP model that registered the most images (binary)
    OUT/colmap/          COLMAP's database and every model it found, for inspection
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from voxnerf.data.formats import colmap
from voxnerf.errors import VoxnerfError
from voxnerf.process.frames import copy_images, downscaled_copies, extract_frames, is_video
from voxnerf.process.sfm import SfmOptions, reconstruct, undistort

WORK = "colmap"


@dataclass
class ProcessReport:
    """What `process_capture` made.

    Attributes:
        out: the scene folder.
        images: images given to structure from motion (photos, or frames picked from the video).
        registered: names of the images the kept model registered (posed), sorted.
        unregistered: names of the images left out.
        models: how many separate models COLMAP found (1 when every registered image links up).
        camera: the kept model's first camera, as COLMAP prints it (model, size, parameters).
        points: sparse points of the kept model.
        reprojection_error: mean reprojection error of those points, pixels.
        downscaled: the folders of downscaled copies.
    """

    out: Path
    images: int
    registered: list[str]
    unregistered: list[str]
    models: int
    camera: str
    points: int
    reprojection_error: float
    downscaled: list[Path] = field(default_factory=list)


def check_folders(source: Path, out: Path, overwrite: bool) -> None:
    """VoxnerfError unless `source` exists and `out` is new or empty (or `overwrite`, which clears it)."""
    if not source.exists():
        raise VoxnerfError(f"{source}: no such file or folder (give a folder of photos or a video file)")
    if source.is_file() and not is_video(source):
        raise VoxnerfError(f"{source}: not a video (expected a folder of photos or a .mp4, .mov, ... file)")
    if out.exists() and not out.is_dir():
        raise VoxnerfError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise VoxnerfError(f"{out}: the folder is not empty (give --overwrite to replace what it holds)")
        shutil.rmtree(out)


def gather(source: Path, folder: Path, frames: int) -> list[Path]:
    """The video's `frames` evenly spread frames, or the folder's photos, written into `folder`."""
    return extract_frames(source, folder, frames) if is_video(source) else copy_images(source, folder)


def process_capture(source: str | Path, out: str | Path, options: SfmOptions | None = None, frames: int = 150,
                    downscales: tuple[int, ...] = (2, 4), overwrite: bool = False) -> ProcessReport:
    """Photos or a video -> a COLMAP scene folder (module docstring): images, structure from motion, copies.

    Args:
        source: a folder of photos or a video file.
        out: the scene folder to make (new or empty, unless `overwrite`).
        options: structure-from-motion settings (default `SfmOptions()`).
        frames: frames to take from a video, spread evenly over it.
        downscales: factors d of the images_{d}/ copies.
        overwrite: clear a non-empty `out` first.
    """
    source, out, options = Path(source), Path(out), options or SfmOptions()
    options.check()
    if frames < 2 or any(d < 2 for d in downscales):
        raise VoxnerfError(f"--frames {frames} / --downscales {downscales}: expected >= 2 frames and factors >= 2")
    check_folders(source, out, overwrite)
    work = out / WORK
    direct = options.camera_model in colmap.PARAM_ORDER
    raw = out / "images" if direct else work / "distorted"
    paths = gather(source, raw, frames)
    model = reconstruct(raw, work, options)
    model_dir = out / "sparse" / "0" if direct else work / "kept"
    model_dir.mkdir(parents=True, exist_ok=True)
    model.write_binary(model_dir)
    if not direct:
        undistort(model_dir, raw, out)
    registered = sorted(image.name for image in model.images.values() if image.has_pose)
    names = sorted(p.name for p in (out / "images").iterdir())
    camera = next(iter(model.cameras.values()))
    return ProcessReport(
        out=out,
        images=len(paths),
        registered=registered,
        unregistered=sorted(set(p.name for p in paths) - set(registered)),
        models=len(list((work / "models").iterdir())),
        camera=f"{camera.model.name} {camera.width}x{camera.height} {camera.params_to_string()}",
        points=model.num_points3D(),
        reprojection_error=float(model.compute_mean_reprojection_error()),
        downscaled=downscaled_copies(out / "images", names, downscales),
    )

