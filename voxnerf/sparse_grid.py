"""A sparse grid of features at the vertices of an R^3 cell grid over the unit box [-1, 1]^3.

Storage is two-level, VDB-like: a dense int32 index over bricks of 8^3 vertices (R/8 + 1 per axis, so 1024^3
cells need a 129^3 index, 8.6 MB) points into tables holding only the allocated bricks' vertices. Lookup is two
gathers per corner, O(1), in plain PyTorch on any device. Memory grows with the allocated bricks, not with R^3.

Each cell is named by its min-corner vertex and its occupancy lives in that vertex's slot. Topology changes
(`prune`, `subdivide`) rebuild the index and return the `RowRemap` that carries any per-row table (parameters,
optimizer moments) from the old layout to the new one.
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from voxnerf.interpolate import weighted_row_sum

BRICK = 8
BRICK_VOLUME = BRICK**3
CORNERS = torch.tensor([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], dtype=torch.int64)
LOCAL = torch.stack(torch.meshgrid(*[torch.arange(BRICK)] * 3, indexing="ij"), -1).reshape(-1, 3)

RowRemap = Callable[[torch.Tensor], torch.Tensor]
"""Maps a per-row table of the old layout, (V_old, ...) -> (V_new, ...)."""


class BrickIndex:
    """Integer lookup of one sparse brick layout (no parameters): vertex coordinates -> table rows.

    Attributes:
        resolution: R, cells per axis.
        brick_coords: (B, 3) int64 brick coordinates (vertex // 8) of the allocated bricks, in table order.
        index: (n, n, n) int32 table slot of each brick, -1 if absent; n = R / 8 + 1.
    """

    def __init__(self, resolution: int, brick_coords: torch.Tensor):
        if resolution % BRICK:
            raise ValueError(f"grid resolution must be a multiple of {BRICK}, got {resolution}")
        self.resolution = resolution
        self.brick_coords = brick_coords.long()
        n = self.bricks_per_axis
        self.index = torch.full((n, n, n), -1, dtype=torch.int32, device=brick_coords.device)
        c = self.brick_coords
        self.index[c[:, 0], c[:, 1], c[:, 2]] = torch.arange(len(c), dtype=torch.int32, device=c.device)

    @property
    def bricks_per_axis(self) -> int:
        return self.resolution // BRICK + 1

    @property
    def num_rows(self) -> int:
        return len(self.brick_coords) * BRICK_VOLUME

    def vertex_slots(self, v: torch.Tensor) -> torch.Tensor:
        """Table rows of integer vertex coordinates.

        Args:
            v: (..., 3) int64 vertex coordinates in [0, R].
        Returns:
            (...,) int64 rows, -1 where the vertex's brick is not allocated.
        """
        n = self.bricks_per_axis
        b = v >> 3
        brick = self.index.view(-1)[(b[..., 0] * n + b[..., 1]) * n + b[..., 2]].long()
        local = v & (BRICK - 1)
        slot = brick * BRICK_VOLUME + (local[..., 0] * BRICK + local[..., 1]) * BRICK + local[..., 2]
        return torch.where(brick >= 0, slot, -1)

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N, 3) continuous vertex coordinates in [0, R]."""
        return ((x + 1) * (0.5 * self.resolution)).clamp(0, self.resolution)

    def cells(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N, 3) int64 coordinates of the cell holding each."""
        return self.to_grid(x).floor().long().clamp(0, self.resolution - 1)

    def corners(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Trilinear interpolation stencil of each point.

        Brick and in-brick offsets are computed per axis for the two vertex layers (c and c + 1) and combined by
        broadcasting, so only the final gather touches all 8 corners.
        Args:
            x: (N, 3) points in the unit box.
        Returns:
            rows (N, 8) int64 and weights (N, 8) float; corners in unallocated bricks get row 0 and weight 0.
            Corner k is offset (k >> 2 & 1, k >> 1 & 1, k & 1) from the cell's min corner.
        """
        p = self.to_grid(x)
        c = p.floor().clamp(0, self.resolution - 1)
        f = p - c
        c = c.long()
        v = torch.stack([c, c + 1], 1)  # (N, 2, 3): the two vertex layers per axis
        n = self.bricks_per_axis
        brick = (v >> 3) * torch.tensor([n * n, n, 1], device=x.device)
        local = (v & (BRICK - 1)) * torch.tensor([BRICK * BRICK, BRICK, 1], device=x.device)
        brick = brick[:, :, 0, None, None] + brick[:, None, :, 1, None] + brick[:, None, None, :, 2]
        local = local[:, :, 0, None, None] + local[:, None, :, 1, None] + local[:, None, None, :, 2]
        b = self.index.view(-1)[brick.view(-1, 8)].long()
        w1 = torch.stack([1 - f, f], 1)  # (N, 2, 3)
        w = (w1[:, :, 0, None, None] * w1[:, None, :, 1, None] * w1[:, None, None, :, 2]).view(-1, 8)
        valid = b >= 0
        return (b * BRICK_VOLUME + local.view(-1, 8)).masked_fill_(~valid, 0), w * valid

    def slot_vertices(self) -> torch.Tensor:
        """(V, 3) int64 vertex coordinates of every table row (computed once per layout; do not modify)."""
        return self._slot_vertices

    @cached_property
    def _slot_vertices(self) -> torch.Tensor:
        base = self.brick_coords.unsqueeze(1) * BRICK
        return (base + LOCAL.to(base.device)).reshape(-1, 3)

    def cell_corner_rows(self) -> torch.Tensor:
        """(V, 8) int64 rows of the 8 corners of the cell each row is the min corner of, -1 where a corner's
        brick is not allocated or the row names no cell (computed once per layout; do not modify)."""
        return self._cell_corner_rows

    @cached_property
    def _cell_corner_rows(self) -> torch.Tensor:
        v = self.slot_vertices().clamp_max(self.resolution - 1)
        rows = self.vertex_slots(v.unsqueeze(1) + CORNERS.to(v.device))
        return rows.masked_fill_(~self.real_cells().unsqueeze(1), -1)

    def cell_centers(self) -> torch.Tensor:
        """(V, 3) float grid coordinates (in [-1, 1]) of the center of the cell each row is the min corner of."""
        return (self.slot_vertices().float() + 0.5) * (2.0 / self.resolution) - 1

    def real_cells(self) -> torch.Tensor:
        """(V,) bool, rows that are the min corner of a cell (vertex coordinates < R on every axis)."""
        return self._real_cells

    @cached_property
    def _real_cells(self) -> torch.Tensor:
        return (self.slot_vertices() < self.resolution).all(-1)


def bricks_around_cells(cells: torch.Tensor, bricks_per_axis: int) -> torch.Tensor:
    """Coordinates of the bricks holding any corner of the given cells.

    Args:
        cells: (K, 3) int64 cell coordinates.
        bricks_per_axis: n, the size of the brick grid the bricks live in.
    Returns:
        (M, 3) int64 brick coordinates, unique, in raster order (marked on a dense n^3 mask: O(K), no sort).
    """
    n = bricks_per_axis
    mark = torch.zeros(n * n * n, dtype=torch.bool, device=cells.device)
    for offset in CORNERS.to(cells.device):
        b = ((cells + offset) >> 3).clamp_max(n - 1)
        mark[(b[:, 0] * n + b[:, 1]) * n + b[:, 2]] = True
    lin = torch.nonzero(mark).squeeze(-1)
    return torch.stack([lin // (n * n), (lin // n) % n, lin % n], -1)


class SparseVoxelGrid(nn.Module):
    """Vertex features (raw density + C feature channels) on allocated 8^3-vertex bricks.

    Parameters:
        density: (V,) raw density per vertex, V = 512 * number of bricks.
        features: (V, C) feature vector per vertex.
    Buffers:
        brick_coords: (B, 3) int64 allocated bricks (the layout; `layout` is rebuilt from it).
        occupied: (V,) bool, whether the cell whose min corner is this vertex may hold matter.
        score: (V,) float, running occupancy statistic of that cell (kept by the occupancy strategy).
        brick_occupied: (n, n, n) bool, bricks holding an occupied cell, dilated by one brick (coarse marching).
    Attributes:
        occupied_bbox: unit-box min and max corners (3,), (3,) of the occupied cells, refreshed with them.
    """

    def __init__(self, resolution: int, brick_coords: torch.Tensor, density: torch.Tensor, features: torch.Tensor,
                 occupied: torch.Tensor | None = None):
        super().__init__()
        self.layout = BrickIndex(resolution, brick_coords)
        self.density = nn.Parameter(density)
        self.features = nn.Parameter(features)
        self.register_buffer("brick_coords", self.layout.brick_coords)
        self.register_buffer("occupied", torch.ones(len(density), dtype=torch.bool, device=density.device))
        self.register_buffer("score", torch.zeros(len(density), device=density.device))
        self.register_buffer("brick_occupied", torch.empty(0, dtype=torch.bool))
        self.set_occupied(self.occupied if occupied is None else occupied)

    @classmethod
    def dense(cls, resolution: int, feature_dim: int, density_value: float = 0.0, feature_std: float = 0.0,
              generator: torch.Generator | None = None) -> "SparseVoxelGrid":
        """A grid with every brick allocated (the coarse starting level), on the CPU."""
        n = resolution // BRICK + 1
        coords = torch.stack(torch.meshgrid(*[torch.arange(n)] * 3, indexing="ij"), -1).reshape(-1, 3)
        rows = len(coords) * BRICK_VOLUME
        density = torch.full((rows,), density_value)
        features = torch.randn(rows, feature_dim, generator=generator) * feature_std
        return cls(resolution, coords, density, features)

    @classmethod
    def from_state_dict(cls, state: dict, resolution: int) -> "SparseVoxelGrid":
        """Rebuild a grid saved with `state_dict()` (the layout comes from the saved brick coordinates)."""
        grid = cls(resolution, state["brick_coords"], state["density"], state["features"], state["occupied"])
        grid.score = state["score"]
        return grid

    @property
    def resolution(self) -> int:
        return self.layout.resolution

    @property
    def num_bricks(self) -> int:
        return len(self.brick_coords)

    @property
    def cell_size(self) -> float:
        """Edge of one cell in unit-box units."""
        return 2.0 / self.resolution

    def extra_repr(self) -> str:
        return f"resolution={self.resolution}, bricks={self.num_bricks}, occupied_cells={int(self.occupied.sum())}"

    def _apply(self, fn, recurse=True):
        """Moving the module (`.to(device)`) moves the layout's index along with the buffers."""
        super()._apply(fn, recurse)
        self.layout = BrickIndex(self.layout.resolution, self.brick_coords)
        return self

    # ---- lookup ---------------------------------------------------------------------------------------------
    def is_occupied(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N,) bool, whether each lies in an occupied cell."""
        slots = self.layout.vertex_slots(self.layout.cells(x))
        return self.occupied[slots.clamp_min(0)] & (slots >= 0)

    def stencil(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Corner rows (N, 8) and trilinear weights (N, 8) of unit-box points (N, 3); see BrickIndex.corners."""
        return self.layout.corners(x)

    def density_at(self, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Raw density (N,) interpolated with a stencil from `stencil`."""
        return weighted_row_sum(self.density, rows, weights)

    def features_at(self, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Features (N, C) interpolated with a stencil from `stencil`."""
        return weighted_row_sum(self.features, rows, weights)

    def total_variation(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Squared differences between the given vertices and their +x, +y, +z neighbours (where allocated).

        Args:
            rows: (N,) int64 table rows.
        Returns:
            mean squared difference of raw density () and of features (), over the existing neighbour pairs.
        """
        local = rows % BRICK_VOLUME
        offsets = torch.stack([local // (BRICK * BRICK), (local // BRICK) % BRICK, local % BRICK], -1)
        v = self.brick_coords[rows // BRICK_VOLUME] * BRICK + offsets
        n = v.unsqueeze(1) + torch.eye(3, dtype=torch.long, device=v.device)  # (N, 3, 3) neighbours
        nb = self.layout.vertex_slots(n.clamp_max(self.resolution))
        valid = (nb >= 0) & (n <= self.resolution).all(-1)
        nb = nb[valid]
        here = rows.unsqueeze(1).expand_as(valid)[valid]
        if len(nb) == 0:
            zero = self.density.sum() * 0
            return zero, zero
        d_density = (self.density[here] - self.density[nb]).pow(2).mean()
        d_features = (self.features[here] - self.features[nb]).pow(2).mean()
        return d_density, d_features

    # ---- per-cell statistics --------------------------------------------------------------------------------
    def cell_max_density(self) -> torch.Tensor:
        """(V,) the largest raw density inside each row's cell (-inf for rows naming no cell).

        Trilinear interpolation is multilinear, so its maximum over a cell is at a corner: this is exact.
        """
        slots = self.layout.cell_corner_rows()
        return self.density.detach()[slots.clamp_min(0)].masked_fill(slots < 0, float("-inf")).amax(-1)

    def set_occupied(self, occupied: torch.Tensor) -> None:
        """Replace the per-cell occupancy (V,) bool and refresh the brick-level summary."""
        self.occupied = occupied & self.layout.real_cells()
        n = self.layout.bricks_per_axis
        has = self.occupied.view(-1, BRICK_VOLUME).any(1).float()
        dense = torch.zeros(n, n, n, device=has.device)
        c = self.brick_coords
        dense[c[:, 0], c[:, 1], c[:, 2]] = has
        self.brick_occupied = F.max_pool3d(dense[None, None], 3, stride=1, padding=1)[0, 0] > 0
        self.occupied_bbox = self._bbox_of(self.occupied)

    def _bbox_of(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-box min and max corners (3,), (3,) of the cells marked in (V,) bool (the whole box if none)."""
        v = self.layout.slot_vertices()[cells]
        if len(v) == 0:
            return -torch.ones(3, device=v.device), torch.ones(3, device=v.device)
        return v.amin(0).float() * self.cell_size - 1, (v.amax(0) + 1).float() * self.cell_size - 1

    # ---- topology -------------------------------------------------------------------------------------------
    def prune(self, keep: torch.Tensor) -> RowRemap:
        """Free every brick that no kept cell touches, and mark the cells not kept as empty.

        Args:
            keep: (V,) bool, cells to keep (usually the occupied ones).
        Returns:
            the RowRemap from old rows to new rows (kept bricks keep their values).
        """
        old = self.layout
        wanted = bricks_around_cells(old.slot_vertices()[keep & old.real_cells()], old.bricks_per_axis)
        n = old.bricks_per_axis
        old_bricks = old.index.view(-1)[(wanted[:, 0] * n + wanted[:, 1]) * n + wanted[:, 2]].long()
        old_rows = (old_bricks.unsqueeze(1) * BRICK_VOLUME + torch.arange(BRICK_VOLUME, device=wanted.device)).reshape(-1)

        def remap(table: torch.Tensor) -> torch.Tensor:
            return table[old_rows]

        self._relayout(BrickIndex(old.resolution, wanted), remap, remap(self.occupied & keep))
        return remap

    def subdivide(self) -> RowRemap:
        """Halve the cell size where cells are occupied; the new vertices interpolate the old field.

        A trilinear field restricted to a sub-cell is trilinear, so the field is preserved exactly inside every
        refined cell. Child cells inherit their parent's occupancy.
        Returns:
            the RowRemap from old rows to new rows (trilinear resampling of any per-row table).
        """
        old = self.layout
        parents = old.slot_vertices()[self.occupied]
        children = (2 * parents.unsqueeze(1) + CORNERS.to(parents.device)).reshape(-1, 3)
        new = BrickIndex(2 * old.resolution, bricks_around_cells(children, 2 * old.resolution // BRICK + 1))
        vertices = new.slot_vertices()
        rows, w = old.corners(vertices.float() / new.resolution * 2 - 1)

        def remap(table: torch.Tensor) -> torch.Tensor:
            flat = table.reshape(len(table), -1)
            return weighted_row_sum(flat, rows, w.to(flat.dtype)).reshape(len(rows), *table.shape[1:])

        parent_slots = old.vertex_slots((vertices >> 1).clamp_max(old.resolution - 1))
        occupied = self.occupied[parent_slots.clamp_min(0)] & (parent_slots >= 0)
        self._relayout(new, remap, occupied)
        return remap

    def _relayout(self, layout: BrickIndex, remap: RowRemap, occupied: torch.Tensor) -> None:
        self.layout = layout
        self.brick_coords = layout.brick_coords
        with torch.no_grad():
            self.density = nn.Parameter(remap(self.density.detach()))
            self.features = nn.Parameter(remap(self.features.detach()))
            self.score = remap(self.score)
        self.set_occupied(occupied)
