"""The run's training cameras and their rendered views: the input of depth point clouds and TSDF fusion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
from tqdm import tqdm

from voxnerf.cameras import Cameras
from voxnerf.data import load_scene
from voxnerf.errors import VoxnerfError
from voxnerf.evaluate import View, render_view
from voxnerf.rays import image_rays
from voxnerf.run import Run

SURFACE_OPACITY = 0.5  # pixels more opaque than this see a surface


def training_cameras(run: Run) -> Cameras:
    """The cameras of the run's training split, read from the scene folder the run records (images not decoded)."""
    root = run.scene["root"]
    try:
        scene = load_scene(root, with_images=False)
    except VoxnerfError as e:
        raise VoxnerfError(f"{run.path}: the training cameras are needed but its scene is unreadable ({e})") from None
    return scene.cameras.subset(scene.split_indices("train"))


@dataclass
class SurfaceView:
    """One rendered training view, flattened to its H*W pixels (row-major).

    Attributes:
        index: the camera's index in the training cameras.
        view: the render (rgb, depth along the ray in world units, opacity), each (H, W, ...).
        origins: (H*W, 3) world ray origins.
        dirs: (H*W, 3) world unit ray directions.
        surface: (H*W,) bool, pixels that see a surface (opacity > SURFACE_OPACITY and a positive depth).
    """

    index: int
    view: View
    origins: np.ndarray
    dirs: np.ndarray
    surface: np.ndarray

    def points(self) -> np.ndarray:
        """(P, 3) world surface points of the `surface` pixels: origin + depth * direction."""
        d = self.view.depth.reshape(-1)[self.surface, None]
        return self.origins[self.surface] + d * self.dirs[self.surface]

    def foreground_rgb(self, background: np.ndarray) -> np.ndarray:
        """(P, 3) colors of the `surface` pixels with the background's share removed (rgb = c * a + bg * (1 - a))."""
        a = self.view.opacity.reshape(-1)[self.surface, None]
        rgb = self.view.rgb.reshape(-1, 3)[self.surface]
        return np.clip((rgb - (1 - a) * background) / a, 0, 1)


def background_of(run: Run) -> np.ndarray:
    """(3,) the background color the run was trained on (black when the images were opaque)."""
    return np.asarray(run.scene["background"] or np.zeros(3), np.float32)


def rendered_views(run: Run, cameras: Cameras, progress: bool = False) -> Iterator[SurfaceView]:
    """Render every camera with the run's field (on its device) and render settings, one SurfaceView at a time."""
    background = background_of(run)
    device = run.field.grid.density.device
    for i in tqdm(range(len(cameras)), desc="rendering views", unit="view", disable=not progress, leave=False):
        view = render_view(run.field, cameras, i, background, run.config.render, device)
        origins, dirs = (t.numpy().astype(np.float64) for t in image_rays(cameras, i))
        surface = (view.opacity.reshape(-1) > SURFACE_OPACITY) & (view.depth.reshape(-1) > 0)
        yield SurfaceView(i, view, origins, dirs, surface)
