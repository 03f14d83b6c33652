"""The model: a field and the occupancy estimator that marches rays through it; what renders a scene."""

from __future__ import annotations

from torch import nn

from voxnerf.data.cameras import Cameras
from voxnerf.data.space import Space
from voxnerf.fields import Field, field_class, field_from_state
from voxnerf.fields.color_maps import ColorMaps
from voxnerf.render.occupancy import OccupancyGrid

STATE_VERSION = 2  # the layout of `Model.state`, the version of a checkpoint (voxnerf.run.checkpoint reads no other)


class Model(nn.Module):
    """A field (density and color of grid points) and its occupancy estimator (which cells may hold matter, how rays
    are marched, and the space that maps the scene into the grid).

    Attributes:
        field: the voxnerf.fields.Field.
        estimator: the voxnerf.render.occupancy.OccupancyGrid.
        color_maps: per-training-image color maps of the gathered radiance (voxnerf.fields.color_maps), or None.
    """

    def __init__(self, field: Field, estimator: OccupancyGrid, color_maps: ColorMaps | None = None):
        super().__init__()
        self.field = field
        self.estimator = estimator
        self.color_maps = color_maps

    @classmethod
    def build(cls, field_cfg, resolution: int, space: Space, seed: int = 0,
              train_cameras: Cameras | None = None) -> "Model":
        """A fresh model: the configured field kind and an all-occupied estimator, both at `resolution` (the
        schedule's first level), and a color map for each of `train_cameras` (the training images, in order) where
        the field's options ask for them; on the CPU."""
        field = field_class(field_cfg.kind)(field_cfg, resolution, space, seed)
        num_images = 0 if train_cameras is None else len(train_cameras)
        color_maps = (ColorMaps(num_images, train_cameras.centers)
                      if getattr(field_cfg, "color_maps", False) and num_images else None)
        return cls(field, OccupancyGrid(resolution, space), color_maps)

    @property
    def space(self) -> Space:
        return self.estimator.space

    def state(self) -> dict:
        """What a checkpoint stores of the model (plain dicts and tensors)."""
        state = {"version": STATE_VERSION, "field": self.field.state(), "estimator": self.estimator.state()}
        if self.color_maps is not None:
            state["color_maps"] = self.color_maps.maps.detach()
            if self.color_maps.centers is not None:
                state["color_map_centers"] = self.color_maps.centers
        return state

    @classmethod
    def from_state(cls, state: dict) -> "Model":
        """Rebuild a model saved by `state` (of STATE_VERSION, which `voxnerf.run.checkpoint.load_checkpoint`
        checks), on the CPU."""
        estimator = OccupancyGrid.from_state(state["estimator"])
        return cls(field_from_state(state["field"], estimator.space), estimator, _color_maps(state))

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> "Model":
        """The model a training checkpoint (`load_checkpoint`) holds, on the CPU."""
        return cls.from_state(ckpt["model"])


def _color_maps(state: dict) -> ColorMaps | None:
    """The per-image color maps a model state holds (a state written before the maps kept their cameras' centers
    renders views not trained on with the identity), or None."""
    if "color_maps" not in state:
        return None
    maps = ColorMaps(len(state["color_maps"]), state.get("color_map_centers"))
    maps.maps.data.copy_(state["color_maps"].cpu())
    return maps
