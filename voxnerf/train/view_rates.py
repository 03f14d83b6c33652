"""Grid learning rates that follow how many training views look at each vertex (`optim.view_count_lr`; DVGO's
view-count-based learning rate): a vertex that few photos see is fitted by few rays, and full steps let it learn
what one photo alone shows (a floater that paints that photo's surroundings). Adam's step of each grid row is
scaled by its view count over the largest count in the grid, recounted whenever the grid's bricks change.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from voxnerf.data.cameras import Cameras
from voxnerf.data.footprint import views_seeing
from voxnerf.data.space import Space
from voxnerf.fields import Field


class ViewCountRates:
    """The per-row step scale of a field's grid (its `grid` attribute: density and features), from the training
    cameras.

    Args:
        cameras: the training cameras.
        space: the field's space (grid points to the unit box).
    """

    def __init__(self, cameras: Cameras, space: Space):
        self.cameras, self.space = cameras, space
        self._bricks = None  # the brick index the scale was counted on
        self.scale: torch.Tensor | None = None  # (V,) float32 in [0, 1]

    def tables(self, field: Field) -> list[tuple[nn.Parameter, torch.Tensor]]:
        """(parameter, scale broadcastable to it) of each of the grid's tables; none for a field without a grid."""
        grid = getattr(field, "grid", None)
        if grid is None:
            return []
        if self._bricks is not grid.bricks:
            count = views_seeing(self.cameras, self.space, grid.bricks.vertex_points())
            self.scale = (count / count.max().clamp_min(1)).to(grid.density.device)
            self._bricks = grid.bricks
        return [(p, self.scale.reshape(-1, *[1] * (p.dim() - 1))) for p in (grid.density, grid.features)]

    @contextlib.contextmanager
    def scaled_steps(self, field: Field) -> Iterator[None]:
        """Around an optimizer step: each grid row moves by its scale times the step the optimizer took."""
        pairs = self.tables(field)
        before = [p.detach().clone() for p, _ in pairs]
        yield
        with torch.no_grad():
            for (p, scale), old in zip(pairs, before):
                p.copy_(old.lerp_(p, scale))
