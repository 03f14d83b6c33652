"""A deliberately small field: density and features on one dense vertex grid, read with `grid_sample`.

It has no topology of its own (the schedule's levels refine only the estimator's occupancy), so it suits tiny
scenes and serves as the second implementation that keeps the Field interface honest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from voxnerf.data.space import Space
from voxnerf.fields.base import Field, Lookup
from voxnerf.fields.bricks import CellPoints
from voxnerf.fields.decoder import ColorDecoder, DensityActivation, GridFieldConfig
from voxnerf.ranges import Range


@dataclass
class DenseGridConfig(GridFieldConfig):
    kind: str = "dense_grid"
    vertices: int = 65  # vertices per axis of the dense grid (fixed for the whole run)

    RANGES: ClassVar[dict[str, Range]] = {**GridFieldConfig.RANGES, "vertices": Range(2, 1024)}


class DenseGridField(Field):
    """sigma and features trilinearly interpolated from dense (1, C, S, S, S) volumes; its Lookup is the points."""

    name = "dense_grid"
    Config = DenseGridConfig

    def __init__(self, cfg: DenseGridConfig, resolution: int, space: Space, seed: int = 0):
        super().__init__(cfg, resolution, space, seed)
        s = cfg.vertices
        gen = torch.Generator().manual_seed(seed)
        self.activate = DensityActivation(cfg.alpha_init, cfg.density_scale, s - 1)
        self.density_volume = nn.Parameter(torch.zeros(1, 1, s, s, s))
        self.feature_volume = nn.Parameter(torch.randn(1, cfg.feature_dim, s, s, s, generator=gen) * cfg.feature_std)
        self.decoder = ColorDecoder.seeded(cfg, seed)

    @staticmethod
    def _sample(volume: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(N, C) values of a (1, C, S, S, S) volume at grid points g (N, 3) (x along the last volume axis)."""
        values = F.grid_sample(volume, g.view(1, -1, 1, 1, 3), mode="bilinear", align_corners=True)
        return values.view(volume.shape[1], -1).T

    def lookup(self, g: torch.Tensor, cells: CellPoints | None = None) -> Lookup:
        return (g,)

    def density(self, lookup: Lookup) -> torch.Tensor:
        return self.activate(self._sample(self.density_volume, lookup[0])[:, 0])

    def color(self, lookup: Lookup, dirs: torch.Tensor, amp_dtype: torch.dtype | None = None,
              rays: torch.Tensor | None = None) -> torch.Tensor:
        return self.decoder(self._sample(self.feature_volume, lookup[0]), dirs, amp_dtype, rays)

    def param_groups(self, optim) -> list[dict]:
        return [
            {"name": "grid", "params": [self.density_volume, self.feature_volume], "lr": optim.lr_grid},
            {"name": "decoder", "params": list(self.decoder.parameters()), "lr": optim.lr_decoder},
        ]
