"""A trained run as others use it (eval, render, export, view): the model, how it sits in the world, the scene it
was trained on, and how it renders and scores."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras
from voxnerf.data.scene import Scene
from voxnerf.data.space import Space
from voxnerf.errors import VoxnerfError
from voxnerf.render.model import Model
from voxnerf.render.views import View, render_view
from voxnerf.run.checkpoint import CHECKPOINT, checkpoint_model, load_checkpoint
from voxnerf.run.config import TrainConfig, load_config, saved_config_options
from voxnerf.run.scores import score_split
from voxnerf.system.device import amp_dtype_for


@dataclass(frozen=True, eq=False)
class SceneRecord:
    """The scene facts a run keeps without the images: where the scene came from and how it sits in the world.

    Attributes:
        root: the scene folder the run was trained on.
        format: its format name (see voxnerf.data).
        center: (3,) world center of the run's space.
        scale: world-to-unit scale of the run's space.
        space: the space's kind ("box", "contract" or "ndc").
        bbox: (2, 3) float64 world box of interest (min and max corners).
        near, far: the scene's ray distance range, world units.
        background: (3,) float32 color the run is rendered and scored on (`Scene.render_background`).
        downscale: the image downscale it was trained at (`--downscale`).
    """

    root: Path
    format: str
    center: tuple[float, float, float]
    scale: float
    space: str
    bbox: np.ndarray
    near: float
    far: float
    background: np.ndarray
    downscale: int = 1

    @classmethod
    def of(cls, scene: Scene, space: Space) -> SceneRecord:
        """The record of a loaded scene framed by `space`."""
        return cls(Path(scene.root), scene.format, tuple(space.center), space.scale, space.kind,
                   np.asarray(scene.bbox, np.float64), scene.near, scene.far,
                   np.asarray(scene.render_background, np.float32), scene.downscale)

    def to_dict(self) -> dict:
        """Plain values, as a checkpoint stores them."""
        return {"root": str(self.root), "format": self.format, "center": list(self.center), "scale": self.scale,
                "space": self.space, "bbox": self.bbox.tolist(), "near": self.near, "far": self.far,
                "background": self.background.tolist(), "downscale": self.downscale}

    @classmethod
    def from_dict(cls, data: dict) -> SceneRecord:
        """Read `to_dict`'s values; older checkpoints stored no background for opaque scenes (black)."""
        background = data["background"] if data["background"] is not None else np.zeros(3)
        return cls(Path(data["root"]), data["format"], tuple(data["center"]), data["scale"], data["space"],
                   np.asarray(data["bbox"], np.float64), data["near"], data["far"],
                   np.asarray(background, np.float32), data.get("downscale", 1))


@dataclass
class Run:
    """A loaded run: its model, configuration and scene record, and the scene itself on demand.

    Attributes:
        path: the run folder.
        model: the trained Model (field and occupancy estimator, on `device`).
        config: its TrainConfig.
        record: what the run knows of its scene (see SceneRecord).
        step: training steps done.
        device: where the model is and renders.
        scene_root: the scene folder when it moved since training (default: `record.root`).
        downscale: the image downscale to load the scene at (default: the one it was trained at).
    """

    path: Path
    model: Model
    config: TrainConfig
    record: SceneRecord
    step: int
    device: torch.device = torch.device("cpu")
    scene_root: Path | None = None
    downscale: int | None = None
    _scenes: dict[bool, Scene] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def of_training(cls, path: Path, model: Model, config: TrainConfig, scene: Scene, step: int,
                    device: torch.device) -> Run:
        """A Run over a model in training (`Trainer.as_run`): its record of `scene` (images loaded), which is its
        scene too."""
        return cls(Path(path), model, config, SceneRecord.of(scene, model.space), step, device, _scenes={True: scene})

    @property
    def center(self) -> np.ndarray:
        return np.asarray(self.model.space.center)

    @property
    def scale(self) -> float:
        return self.model.space.scale

    @property
    def background(self) -> np.ndarray:
        """(3,) float32 color the run is rendered and scored on."""
        return self.record.background

    def to_world(self, x: np.ndarray) -> np.ndarray:
        """Unit-box points (..., 3) -> world coordinates."""
        return self.model.space.unit_to_world(x)

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        """World points (..., 3) -> unit-box coordinates."""
        return self.model.space.world_to_unit(x)

    # ---- the scene ------------------------------------------------------------------------------------------
    def scene(self, with_images: bool = True) -> Scene:
        """The scene the run was trained on, loaded once per run (a scene with images serves both kinds)."""
        if True in self._scenes:
            return self._scenes[True]
        if with_images or False not in self._scenes:
            self._scenes[with_images] = load_scene(self.scene_root or self.record.root, with_images,
                                                   self.downscale or self.record.downscale,
                                                   self.record.format if self.scene_root is None else None)
        return self._scenes[with_images]

    def training_cameras(self) -> Cameras:
        """The cameras of the scene's training split (images not decoded)."""
        try:
            scene = self.scene(with_images=False)
        except VoxnerfError as e:
            raise VoxnerfError(f"{self.path}: the training cameras are needed but its scene is unreadable ({e})") \
                from None
        return scene.cameras.subset(scene.split_indices("train"))

    # ---- rendering and scores -------------------------------------------------------------------------------
    def render_view(self, cameras: Cameras, index: int, device: torch.device | None = None) -> View:
        """Camera `index` of world `cameras` rendered in full on the run's background, with its render settings
        and autocast dtype (on `device`, default the run's)."""
        device = device or self.device
        return render_view(self.model, cameras, index, self.background, self.config.render, device,
                           amp_dtype_for(self.config.precision, device))

    def evaluate(self, scene: Scene | None = None, split: str = "test", every: int = 1,
                 with_lpips: bool = True, progress: bool = False) -> dict:
        """Scores of every `every`-th view of `split` (see `score_split`) on `scene` (default: the run's own)."""
        return score_split(self.render_view, scene or self.scene(), split, every, with_lpips, progress)


def config_from_dict(data: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's saved dict (options unknown to this version, at any level, are ignored:
    `saved_config_options`)."""
    return load_config(None, [saved_config_options(data)])


def load_run(path: str | Path, device: torch.device | str = "cpu", scene_root: Path | None = None,
             downscale: int | None = None) -> Run:
    """Load a run folder (or a checkpoint file) for scoring, rendering and export; its scene is read from
    `scene_root` when given (a moved folder), else from where it was at training, at `downscale` (default: the
    training's)."""
    path = Path(path)
    device = torch.device(device)
    ckpt = load_checkpoint(path, "cpu")
    cfg = config_from_dict(ckpt["config"])
    model = checkpoint_model(ckpt, path / CHECKPOINT if path.is_dir() else path).to(device).eval()
    return Run(path if path.is_dir() else path.parent, model, cfg, SceneRecord.from_dict(ckpt["scene"]),
               ckpt["step"], device, scene_root, downscale)
