"""The model: a field and the occupancy estimator that marches rays through it; what renders a scene."""

from __future__ import annotations

from torch import nn

from voxnerf.data.cameras import Cameras
from voxnerf.data.space import Space, space_from_dict
from voxnerf.errors import VoxnerfError
from voxnerf.fields import Field, field_class, field_from_state
from voxnerf.fields.appearance import AppearanceCodes, ColorMaps
from voxnerf.fields.base import saved_options
from voxnerf.fields.sparse_grid import SparseVoxelGrid
from voxnerf.fields.voxels import SparseVoxelField
from voxnerf.render.occupancy import OccupancyGrid

STATE_VERSION = 2  # 1: the sparse voxel field with its occupancy inside the grid


class Model(nn.Module):
    """A field (density and color of grid points) and its occupancy estimator (which cells may hold matter, how rays
    are marched, and the space that maps the scene into the grid).

    Attributes:
        field: the voxnerf.fields.Field.
        estimator: the voxnerf.render.occupancy.OccupancyGrid.
        appearance: per-training-image appearance codes (voxnerf.fields.appearance), or None when the field takes none.
        color_maps: per-training-image color maps of the gathered radiance (voxnerf.fields.appearance), or None.
    """

    def __init__(self, field: Field, estimator: OccupancyGrid, appearance: AppearanceCodes | None = None,
                 color_maps: ColorMaps | None = None):
        super().__init__()
        self.field = field
        self.estimator = estimator
        self.appearance = appearance
        self.color_maps = color_maps

    @classmethod
    def build(cls, field_cfg, resolution: int, space: Space, seed: int = 0,
              train_cameras: Cameras | None = None) -> "Model":
        """A fresh model: the configured field kind and an all-occupied estimator, both at `resolution` (the
        schedule's first level), and an appearance code and a color map for each of `train_cameras` (the training
        images, in order) where the field's options ask for them; on the CPU."""
        field = field_class(field_cfg.kind)(field_cfg, resolution, space, seed)
        num_images = 0 if train_cameras is None else len(train_cameras)
        dim = getattr(field_cfg, "appearance_dim", 0)
        appearance = AppearanceCodes(num_images, dim) if dim and num_images else None
        color_maps = (ColorMaps(num_images, train_cameras.centers)
                      if getattr(field_cfg, "color_maps", False) and num_images else None)
        return cls(field, OccupancyGrid(resolution, space), appearance, color_maps)

    @property
    def space(self) -> Space:
        return self.estimator.space

    def state(self) -> dict:
        """What a checkpoint stores of the model (plain dicts and tensors)."""
        state = {"version": STATE_VERSION, "field": self.field.state(), "estimator": self.estimator.state()}
        if self.appearance is not None:
            state["appearance"] = self.appearance.codes.weight.detach()
        if self.color_maps is not None:
            state["color_maps"] = self.color_maps.maps.detach()
            if self.color_maps.centers is not None:
                state["color_map_centers"] = self.color_maps.centers
        return state

    @classmethod
    def from_state(cls, state: dict, field_options: dict | None = None) -> "Model":
        """Rebuild a model saved by `state` (on the CPU). A checkpoint of the first format stored the grid's
        field and occupancy together and its options in the run config: `field_options` (`config["field"]`)."""
        if state.get("version") == STATE_VERSION:
            estimator = OccupancyGrid.from_state(state["estimator"])
            return cls(field_from_state(state["field"], estimator.space), estimator, _appearance(state),
                       _color_maps(state))
        if "grid" in state and field_options is not None:
            return cls._from_first_format(state, field_options)
        raise VoxnerfError("the checkpoint's model has an unknown format")

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> "Model":
        """The model a training checkpoint holds (either format), on the CPU."""
        if "model" in ckpt:
            return cls.from_state(ckpt["model"])
        return cls.from_state(ckpt["field"], ckpt.get("config", {}).get("field", {}))

    @classmethod
    def _from_first_format(cls, state: dict, options: dict) -> "Model":
        space = space_from_dict(state.get("space"))
        grid_state = {k: v.cpu() for k, v in state["grid"].items()}
        grid = SparseVoxelGrid.from_state_dict(grid_state, state["resolution"])
        cfg = saved_options(SparseVoxelField.Config, options)
        field = SparseVoxelField(cfg, options.get("resolution", 32), space, grid=grid)
        field.decoder.load_state_dict(state["decoder"])
        estimator = OccupancyGrid(state["resolution"], space, grid_state["brick_coords"], grid_state["occupied"],
                                  grid_state["score"].float())
        return cls(field, estimator)


def _appearance(state: dict) -> AppearanceCodes | None:
    """The appearance codes a model state holds, or None."""
    if "appearance" not in state:
        return None
    weight = state["appearance"].cpu()
    codes = AppearanceCodes(*weight.shape)
    codes.codes.weight.data.copy_(weight)
    return codes


def _color_maps(state: dict) -> ColorMaps | None:
    """The per-image color maps a model state holds (a state written before the maps kept their cameras' centers
    renders views not trained on with the identity), or None."""
    if "color_maps" not in state:
        return None
    maps = ColorMaps(len(state["color_maps"]), state.get("color_map_centers"))
    maps.maps.data.copy_(state["color_maps"].cpu())
    return maps
