"""A trained run as others use it (eval, render, export, view): the field plus how it sits in the world."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from voxnerf.checkpoint import load_checkpoint
from voxnerf.config import TrainConfig, load_config
from voxnerf.errors import VoxnerfError
from voxnerf.model import Model
from voxnerf.scene import Scene
from voxnerf.space import Space


def scene_record(scene: Scene, space: Space) -> dict:
    """The scene facts a run needs without the images: where it came from and its world<->unit-box mapping."""
    return {"root": str(scene.root), "format": scene.format, "center": list(space.center), "scale": space.scale,
            "space": space.kind, "bbox": scene.bbox.tolist(), "near": scene.near, "far": scene.far,
            "background": None if not scene.has_alpha else scene.render_background.tolist()}


@dataclass
class Run:
    """A loaded run: its model, configuration and scene record.

    Attributes:
        path: the run folder.
        model: the trained Model (field and occupancy estimator, on the requested device).
        config: its TrainConfig.
        scene: the scene record (see `scene_record`): root, center, scale, bbox, near, far, background.
        step: training steps done.
    """

    path: Path
    model: Model
    config: TrainConfig
    scene: dict
    step: int

    @property
    def center(self) -> np.ndarray:
        return np.asarray(self.model.space.center)

    @property
    def scale(self) -> float:
        return self.model.space.scale

    def to_world(self, x: np.ndarray) -> np.ndarray:
        """Unit-box points (..., 3) -> world coordinates."""
        return self.model.space.unit_to_world(x)

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        """World points (..., 3) -> unit-box coordinates."""
        return self.model.space.world_to_unit(x)


def config_from_dict(data: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's saved dict (keys unknown to this version are ignored)."""
    known = {f.name for f in fields(TrainConfig)}
    data = {k: v for k, v in data.items() if k in known}
    if "resolution" in data.get("field", {}):  # the first checkpoint format: the first level's resolution
        data["field"] = {k: v for k, v in data["field"].items() if k != "resolution"}
    return load_config(None, [data])


def load_run(path: str | Path, device: torch.device | str = "cpu") -> Run:
    """Load a run folder (or a checkpoint file) for rendering and export."""
    path = Path(path)
    ckpt = load_checkpoint(path, "cpu")
    if not ("model" in ckpt or "field" in ckpt) or "scene" not in ckpt:
        raise VoxnerfError(f"{path}: not a voxnerf checkpoint")
    cfg = config_from_dict(ckpt["config"])
    model = Model.from_checkpoint(ckpt).to(device).eval()
    return Run(path if path.is_dir() else path.parent, model, cfg, ckpt["scene"], ckpt["step"])
