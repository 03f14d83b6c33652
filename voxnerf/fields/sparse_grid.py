"""The sparse grid's parameters: raw density and features at the vertices of allocated bricks
(voxnerf.fields.bricks), read by trilinear interpolation, through a row space while one is open
(voxnerf.fields.row_space). Its tables are per-row tables of its bricks, which the owner of topology carries through
every change of bricks (voxnerf.train.strategy).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from voxnerf.fields.bricks import BRICK_VOLUME, BrickModule, CellPoints, all_bricks
from voxnerf.fields.interpolate import take_rows, weighted_row_sum
from voxnerf.fields.row_space import GradientTables, RowSpace


class SparseVoxelGrid(BrickModule):
    """Vertex features (raw density + C feature channels) on allocated 8^3-vertex bricks.

    Parameters (its ROW_TABLES):
        density: (V,) raw density per vertex, V = 512 * number of bricks.
        features: (V, C) feature vector per vertex.
    Buffers:
        brick_coords: (B, 3) int64 allocated bricks (see BrickModule).
    Attributes:
        row_space: None, or the RowSpace (voxnerf.fields.row_space) of the two tables that `row_space_open` opened:
            every read of a table goes through it, so it knows the rows a step's gradient can reach.
        gradient_tables: the tables' gradient tables, kept from step to step (voxnerf.fields.row_space).
    """

    ROW_TABLES = {"density": "interpolate", "features": "interpolate"}

    def __init__(self, resolution: int, brick_coords: torch.Tensor, density: torch.Tensor, features: torch.Tensor):
        super().__init__(resolution, brick_coords)
        self.density = nn.Parameter(density)
        self.features = nn.Parameter(features)
        self.row_space: RowSpace | None = None
        self.gradient_tables = GradientTables()

    @classmethod
    def dense(cls, resolution: int, feature_dim: int, density_value: float = 0.0, feature_std: float = 0.0,
              generator: torch.Generator | None = None) -> "SparseVoxelGrid":
        """A grid with every brick allocated (the coarse starting level), on the CPU."""
        coords = all_bricks(resolution)
        rows = len(coords) * BRICK_VOLUME
        density = torch.full((rows,), density_value)
        features = torch.randn(rows, feature_dim, generator=generator) * feature_std
        return cls(resolution, coords, density, features)

    @classmethod
    def empty(cls, resolution: int, feature_dim: int) -> "SparseVoxelGrid":
        """A grid with no bricks yet (a level that `grown` allocates where it is needed), on the CPU."""
        return cls(resolution, torch.zeros(0, 3, dtype=torch.int64), torch.zeros(0), torch.zeros(0, feature_dim))

    @classmethod
    def from_state_dict(cls, state: dict, resolution: int) -> "SparseVoxelGrid":
        """Rebuild a grid saved with `state_dict()` (the bricks come from the saved brick coordinates)."""
        return cls(resolution, state["brick_coords"], state["density"], state["features"])

    @property
    def num_bricks(self) -> int:
        return len(self.brick_coords)

    def extra_repr(self) -> str:
        return f"resolution={self.resolution}, bricks={self.num_bricks}"

    def bricks_changed(self) -> None:
        """The kept gradient tables hold the old rows: dropped (the next step keeps tables of the new ones)."""
        self.gradient_tables = GradientTables()

    # ---- lookup ---------------------------------------------------------------------------------------------
    def stencil(self, x: torch.Tensor, cells: CellPoints | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Corner rows (N, 8) and trilinear weights (N, 8) of grid points (N, 3); see BrickIndex.corners."""
        return self.bricks.corners(x, cells)

    def density_at(self, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Raw density (N,) interpolated with a stencil from `stencil`."""
        return self._interpolate("density", rows, weights)

    def features_at(self, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Features (N, C) interpolated with a stencil from `stencil`."""
        return self._interpolate("features", rows, weights)

    @contextlib.contextmanager
    def row_space_open(self) -> Iterator[RowSpace]:
        """While entered, density and features (one row per vertex) are read through a RowSpace, which it yields;
        on leaving, their .grad hold what the reads made of them."""
        self.row_space = RowSpace("grid vertices", {"density": self.density, "features": self.features},
                                  self.gradient_tables)
        try:
            yield self.row_space
        finally:
            self.row_space.close()
            self.row_space = None

    def _interpolate(self, name: str, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Table `name` (density or features) interpolated with a stencil: through the open RowSpace, if any."""
        if self.row_space is None:
            return weighted_row_sum(getattr(self, name), rows, weights)
        return self.row_space.interpolate(name, rows, weights)

    def gather(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """density and features at a few `rows` (any shape): through the open RowSpace's `gather`, if any."""
        if self.row_space is None:
            return {"density": take_rows(self.density, rows), "features": take_rows(self.features, rows)}
        return self.row_space.gather(rows)
