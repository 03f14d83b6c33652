"""A run's views written out: each view of a split as color and depth PNGs, and a video along a camera path
(an orbit, a spiral, a smooth path through the training cameras, or a camera-path file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import imageio.v3 as iio

from voxnerf.data.cameras import Cameras
from voxnerf.data.images import to_uint8
from voxnerf.errors import VoxnerfError
from voxnerf.render.views import View
from voxnerf.run.load import Run, load_run
from voxnerf.system.device import resolve_device
from voxnerf.system.progress import track
from voxnerf.view.path_file import load_camera_path
from voxnerf.view.paths import interpolate_cameras, orbit_cameras, resized, spiral_cameras, sweep_cameras
from voxnerf.view.video import depth_image, write_video

PATHS = ("orbit", "spiral", "interpolate")
DEFAULT_FPS = 24.0


@dataclass
class Rendered:
    """What `render_run` wrote: the views' folder, its PNG files, and the video (None when not asked)."""

    folder: Path
    images: list[Path] = field(default_factory=list)
    video: Path | None = None


@dataclass
class VideoRequest:
    """The video `render_run` makes.

    Attributes:
        path: "orbit" (a sweep for forward-facing runs), "spiral" or "interpolate" (through the training poses).
        camera_path: a camera-path JSON file (`voxnerf.view.path_file`); replaces `path`, and the split's views
            are not rendered.
        frames: frames of a made path when `seconds` is not given.
        fps: frames per second (default: the camera-path file's, else 24).
        seconds: length: a made path gets fps * seconds frames; a camera-path file is retimed to last it.
        resolution: (width, height) of the frames (default: the file's, else the first training camera's).
    """

    path: str = "orbit"
    camera_path: Path | None = None
    frames: int = 60
    fps: float | None = None
    seconds: float | None = None
    resolution: tuple[int, int] | None = None


def render_cameras(run: Run, cameras: Cameras, quiet: bool, what: str) -> Iterator[tuple[int, View]]:
    """Yield (index, View) for every camera, as the run renders (`Run.render_view`)."""
    for i in track(range(len(cameras)), what, "view", enabled=not quiet):
        yield i, run.render_view(cameras, i)


def write_view(folder: Path, name: str, view: View) -> list[Path]:
    """NAME.png (color) and NAME_depth.png (grey, near is bright) in `folder`."""
    rgb, depth = folder / f"{name}.png", folder / f"{name}_depth.png"
    iio.imwrite(rgb, to_uint8(view.rgb))
    iio.imwrite(depth, depth_image(view.depth, view.opacity))
    return [rgb, depth]


def made_path(run: Run, kind: str, frames: int) -> Cameras:
    """`frames` cameras along the path `kind` (PATHS) made from the run's training cameras."""
    train = run.training_cameras()
    forward = run.model.space.faces_forward
    if kind == "interpolate":
        return interpolate_cameras(train, frames)
    if kind == "spiral":
        return spiral_cameras(train, run.center, frames, forward)
    if kind == "orbit":
        return sweep_cameras(train, frames) if forward else orbit_cameras(train, run.center, frames)
    raise VoxnerfError(f"--path {kind}: expected one of {', '.join(PATHS)}")


def video_cameras(run: Run, request: VideoRequest) -> tuple[Cameras, float, str]:
    """The video's cameras, its frames per second and its file stem."""
    if request.seconds is not None and request.seconds <= 0 or request.fps is not None and request.fps <= 0:
        raise VoxnerfError(f"--seconds {request.seconds} / --fps {request.fps}: expected positive numbers")
    if request.camera_path is not None:
        cameras, fps = load_camera_path(request.camera_path)
        fps = len(cameras) / request.seconds if request.seconds else request.fps or fps
        stem = Path(request.camera_path).stem
    else:
        fps = request.fps or DEFAULT_FPS
        frames = max(2, round(fps * request.seconds)) if request.seconds else request.frames
        cameras, stem = made_path(run, request.path, frames), request.path
    if request.resolution is not None:
        cameras = resized(cameras, *request.resolution)
    return cameras, fps, stem


def render_run(run_dir: Path, split: str = "test", out: Path | None = None, video: bool = True, frames: int = 60,
               device: str = "auto", scene: Path | None = None, quiet: bool = False,
               request: VideoRequest | None = None, downscale: int | None = None) -> Rendered:
    """Render into OUT (default RUN/renders) the split's views, as OUT/SPLIT/*.png, and a video (OUT/orbit.mp4,
    spiral.mp4, interpolate.mp4 or CAMERA_PATH_STEM.mp4); with a camera-path file only the video. Views are rendered
    at `downscale` (default: the training's)."""
    run = load_run(run_dir, resolve_device(device), scene, downscale)
    out = Path(out) if out else run.path / "renders"
    request = request or VideoRequest(frames=frames)
    if request.camera_path is not None:
        return _with_video(run, request, Rendered(out), out, quiet)
    data = run.scene(with_images=False)
    indices = data.split_indices(split)
    if not len(indices):
        raise VoxnerfError(f"{data.root}: no '{split}' views to render")
    result = Rendered(out / split)
    result.folder.mkdir(parents=True, exist_ok=True)
    views = data.cameras.subset(indices)
    for k, view in render_cameras(run, views, quiet, f"rendering {split} views"):
        result.images += write_view(result.folder, data.image_paths[indices[k]].stem, view)
    return _with_video(run, request, result, out, quiet) if video else result


def _with_video(run: Run, request: VideoRequest, result: Rendered, folder: Path, quiet: bool) -> Rendered:
    """`result` with the requested video rendered into `folder`."""
    cameras, fps, stem = video_cameras(run, request)
    pictures = [to_uint8(view.rgb) for _, view in render_cameras(run, cameras, quiet, f"rendering {stem}")]
    result.video = write_video(pictures, folder / f"{stem}.mp4", fps)
    return result
