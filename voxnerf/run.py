"""A trained run as others use it (eval, render, export, view): the field plus how it sits in the world."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from voxnerf.checkpoint import load_checkpoint
from voxnerf.config import TrainConfig, load_config
from voxnerf.errors import VoxnerfError
from voxnerf.field import FieldConfig, RadianceField
from voxnerf.scene import Scene
from voxnerf.space import Space
from voxnerf.sparse_grid import SparseVoxelGrid


def field_state(field: RadianceField) -> dict:
    """What a checkpoint stores of a field: the grid (with its resolution), the decoder and the space."""
    return {"resolution": field.grid.resolution, "grid": field.grid.state_dict(),
            "decoder": field.decoder.state_dict(), "space": field.space.to_dict()}


def field_from_state(state: dict, cfg: FieldConfig) -> RadianceField:
    """Rebuild a field saved by `field_state` (on the CPU)."""
    grid = SparseVoxelGrid.from_state_dict({k: v.cpu() for k, v in state["grid"].items()}, state["resolution"])
    field = RadianceField(cfg, grid=grid, space=Space.from_dict(state.get("space")))
    field.decoder.load_state_dict(state["decoder"])
    return field


def scene_record(scene: Scene, space: Space) -> dict:
    """The scene facts a run needs without the images: where it came from and its world<->unit-box mapping."""
    return {"root": str(scene.root), "format": scene.format, "center": list(space.center), "scale": space.scale,
            "space": space.kind, "bbox": scene.bbox.tolist(), "near": scene.near, "far": scene.far,
            "background": None if not scene.has_alpha else scene.render_background.tolist()}


@dataclass
class Run:
    """A loaded run: its field, configuration and scene record.

    Attributes:
        path: the run folder.
        field: the trained RadianceField (on the requested device).
        config: its TrainConfig.
        scene: the scene record (see `scene_record`): root, center, scale, bbox, near, far, background.
        step: training steps done.
    """

    path: Path
    field: RadianceField
    config: TrainConfig
    scene: dict
    step: int

    @property
    def center(self) -> np.ndarray:
        return np.asarray(self.field.space.center)

    @property
    def scale(self) -> float:
        return self.field.space.scale

    def to_world(self, x: np.ndarray) -> np.ndarray:
        """Unit-box points (..., 3) -> world coordinates."""
        return self.field.space.unit_to_world(x)

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        """World points (..., 3) -> unit-box coordinates."""
        return self.field.space.world_to_unit(x)


def config_from_dict(data: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's saved dict (keys unknown to this version are ignored)."""
    known = {f.name for f in fields(TrainConfig)}
    return load_config(None, [{k: v for k, v in data.items() if k in known}])


def load_run(path: str | Path, device: torch.device | str = "cpu") -> Run:
    """Load a run folder (or a checkpoint file) for rendering and export."""
    path = Path(path)
    ckpt = load_checkpoint(path, "cpu")
    if "field" not in ckpt or "scene" not in ckpt:
        raise VoxnerfError(f"{path}: not a voxnerf checkpoint")
    cfg = config_from_dict(ckpt["config"])
    field = field_from_state(ckpt["field"], cfg.field).to(device).eval()
    return Run(path if path.is_dir() else path.parent, field, cfg, ckpt["scene"], ckpt["step"])
