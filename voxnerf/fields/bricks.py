"""Sparse bricks: the index of a set of 8^3-vertex bricks over an R^3 cell grid of the grid cube [-1, 1]^3, its
changes, and the modules whose per-row tables live on it.

Storage is two-level, VDB-like: a dense int32 index over bricks of 8^3 vertices (R/8 + 1 per axis, so 1024^3
cells need a 129^3 index, 8.6 MB) points into tables holding only the allocated bricks' vertices. Lookup is O(1), in
plain PyTorch on any device: the index gives a point's cell its row (on a CPU a table of every cell's 8 corner rows,
kept per brick set, then gives its stencil). Memory grows with the allocated bricks, not with R^3.

Each cell is named by its min-corner vertex. Topology changes (`pruned`, `subdivided`, `grown`) build a new index and
the `BrickChange` that carries any per-row table (parameters, optimizer moments, occupancy scores) from the old bricks
to the new one. A BrickModule declares its per-row tables (`ROW_TABLES`); one owner, voxnerf.train.strategy, decides
every change and applies it to every declared table of the field's modules on the bricks (a `BrickField`'s, such as
the sparse grid's, voxnerf.fields.sparse_grid) and of the occupancy estimator (voxnerf.render.occupancy), which live
on the same bricks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, ClassVar, NamedTuple

import torch
from torch import nn

from voxnerf.fields.interpolate import take_rows, weighted_row_sum

STENCIL_CHUNK = 1 << 18  # vertices per step when a stencil is built for all the bricks (bounds its temporaries)

BRICK = 8
BRICK_VOLUME = BRICK**3
CORNERS = torch.tensor([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], dtype=torch.int64)
LOCAL = torch.stack(torch.meshgrid(*[torch.arange(BRICK)] * 3, indexing="ij"), -1).reshape(-1, 3)

RowRemap = Callable[[torch.Tensor], torch.Tensor]
"""Maps a per-row table of the old bricks, (V_old, ...) -> (V_new, ...)."""


class CellPoints(NamedTuple):
    """Points in cells the caller has found (the march's samples, in occupied cells of the estimator's bricks)."""

    rows: torch.Tensor  # (N,) int64 row of each point's cell (the row of its min corner)
    within: torch.Tensor  # (N, 3) each point's position in its cell, in [0, 1] per axis


class BrickIndex:
    """Integer lookup of one set of sparse bricks (no parameters): vertex coordinates -> table rows.

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
        self._raster_strides = torch.tensor([n * n, n, 1], device=c.device)
        self._local_strides = torch.tensor([BRICK * BRICK, BRICK, 1], device=c.device)

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
        slot = self.slots_or_negative(v)
        return torch.where(slot >= 0, slot, -1)

    def slots_or_negative(self, v: torch.Tensor) -> torch.Tensor:
        """`vertex_slots`, with a row in [-BRICK_VOLUME, 0) where the vertex's brick is not allocated (for a table
        with BRICK_VOLUME rows appended, which such a row reads)."""
        brick = self.index.view(-1)[self.raster(v >> 3)].long()
        return brick * BRICK_VOLUME + ((v & (BRICK - 1)) * self._local_strides).sum(-1)

    def raster(self, b: torch.Tensor) -> torch.Tensor:
        """(..., 3) int64 brick coordinates in [0, n) -> (...) their raster index x * n^2 + y * n + z in the brick
        grid (`flat_index` as one product and sum: two operations, not seven)."""
        return (b * self._raster_strides).sum(-1)

    def vertex_coords(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid points in [-1, 1] -> (N, 3) continuous vertex coordinates in [0, R]."""
        return ((x + 1) * (0.5 * self.resolution)).clamp(0, self.resolution)

    def cells(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid points -> (N, 3) int64 coordinates of the cell holding each."""
        return self.vertex_coords(x).floor().long().clamp(0, self.resolution - 1)

    def cell_points(self, x: torch.Tensor) -> CellPoints:
        """(N, 3) grid points -> their cells' rows, negative where a cell's brick is not allocated
        (`slots_or_negative`), and their positions within their cells."""
        p = self.vertex_coords(x)
        c = p.floor().clamp(0, self.resolution - 1)
        return CellPoints(self.slots_or_negative(c.long()), p - c)

    def corners(self, x: torch.Tensor, cells: CellPoints | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Trilinear interpolation stencil of each point: its cell's corner rows and the point's weights.

        On a CPU the rows of a point whose cell has a row (its min corner's brick is allocated) come from
        `cell_corner_rows` (kept per brick set) in one gather: a third of the cost of working out each corner's
        brick. The other points (outside every allocated cell, where a brick may still hold some of their corners, as
        at the low side of a detail level's bricks) take their corners one by one. On CUDA every point does, which
        needs no `nonzero` (the host would wait on the device).
        Args:
            x: (N, 3) grid points in [-1, 1].
            cells: the points' cells and positions in them, where the caller knows them (every cell then has a
                row): the stencil is read from `cell_corner_rows` on any device, with no search.
        Returns:
            rows (N, 8) int64 and weights (N, 8) float; corners in unallocated bricks get row 0 and weight 0.
            Corner k is offset (k >> 2 & 1, k >> 1 & 1, k & 1) from the cell's min corner.
        """
        if cells is not None:
            rows, within = take_rows(self.cell_corner_rows(), cells.rows).long(), cells.within
        else:
            p = self.vertex_coords(x)
            c = p.floor().clamp(0, self.resolution - 1)
            rows = self.corner_slots(c.long()) if x.is_cuda else self._corner_slots_by_table(c.long())
            within = p - c
        valid = rows >= 0
        return rows.masked_fill_(~valid, 0), valid * trilinear_weights(within)

    def corner_slots(self, cells: torch.Tensor) -> torch.Tensor:
        """(N, 3) int64 cell coordinates in [0, R) -> (N, 8) int64 rows of their corners, -1 where unallocated."""
        return self.vertex_slots(cells.unsqueeze(1) + CORNERS.to(cells.device))

    def _corner_slots_by_table(self, cells: torch.Tensor) -> torch.Tensor:
        """`corner_slots` through `cell_corner_rows` for the cells that have a row, one by one for the others."""
        cell = self.vertex_slots(cells)
        rows = take_rows(self.cell_corner_rows(), cell.clamp_min(0)).long()
        rowless = torch.nonzero(cell < 0).squeeze(-1)
        rows[rowless] = self.corner_slots(cells[rowless])
        return rows

    def axis_stencils(self, rows: torch.Tensor) -> torch.Tensor:
        """(N,) int64 table rows -> (N, 4) int64: each row, then the rows of its vertex's +x, +y, +z neighbours, the
        row itself where a neighbour's brick is not allocated or the neighbour lies past the grid (one gather from
        `_axis_stencil_rows`)."""
        return take_rows(self._axis_stencil_rows, rows).long()

    @cached_property
    def _axis_stencil_rows(self) -> torch.Tensor:
        """(V, 4) int32 `axis_stencils` of every row, from its vertex coordinates (computed once per brick set,
        STENCIL_CHUNK rows at a time)."""
        v = self.slot_vertices()
        step = torch.eye(3, dtype=torch.long, device=v.device)
        rows = torch.empty(len(v), 4, dtype=torch.int32, device=v.device)
        rows[:, 0] = torch.arange(len(v), device=v.device)
        for i in range(0, len(v), STENCIL_CHUNK):
            n = v[i:i + STENCIL_CHUNK].unsqueeze(1) + step
            slots = self.vertex_slots(n.clamp_max(self.resolution))
            there = (n <= self.resolution).all(-1) & (slots >= 0)  # inside the grid, in an allocated brick
            rows[i:i + STENCIL_CHUNK, 1:] = torch.where(there, slots, rows[i:i + STENCIL_CHUNK, :1])
        return rows

    def slot_vertices(self) -> torch.Tensor:
        """(V, 3) int64 vertex coordinates of every table row (computed once per brick set; do not modify)."""
        return self._slot_vertices

    @cached_property
    def _slot_vertices(self) -> torch.Tensor:
        base = self.brick_coords.unsqueeze(1) * BRICK
        return (base + LOCAL.to(base.device)).reshape(-1, 3)

    def cell_corner_rows(self) -> torch.Tensor:
        """(V, 8) int32 rows of the 8 corners of the cell each row is the min corner of, -1 where a corner's
        brick is not allocated or the row names no cell (computed once per brick set, STENCIL_CHUNK rows at a time;
        do not modify)."""
        return self._cell_corner_rows

    @cached_property
    def _cell_corner_rows(self) -> torch.Tensor:
        v = self.slot_vertices().clamp_max(self.resolution - 1)
        rows = torch.empty(len(v), 8, dtype=torch.int32, device=v.device)
        for i in range(0, len(v), STENCIL_CHUNK):
            rows[i:i + STENCIL_CHUNK] = self.corner_slots(v[i:i + STENCIL_CHUNK])
        return rows.masked_fill_(~self.real_cells().unsqueeze(1), -1)

    def vertex_points(self) -> torch.Tensor:
        """(V, 3) float grid coordinates (in [-1, 1]) of every row's vertex (computed once per brick set: the same
        tensor until the bricks change, so callers may cache what they compute for it; do not modify)."""
        return self._vertex_points

    @cached_property
    def _vertex_points(self) -> torch.Tensor:
        return self.slot_vertices().float() * (2.0 / self.resolution) - 1

    def cell_centers(self) -> torch.Tensor:
        """(V, 3) float grid coordinates (in [-1, 1]) of the center of the cell each row is the min corner of."""
        return (self.slot_vertices().float() + 0.5) * (2.0 / self.resolution) - 1

    def real_cells(self) -> torch.Tensor:
        """(V,) bool, rows that are the min corner of a cell (vertex coordinates < R on every axis)."""
        return self._real_cells

    @cached_property
    def _real_cells(self) -> torch.Tensor:
        return (self.slot_vertices() < self.resolution).all(-1)

    @cached_property
    def num_real_cells(self) -> int:
        """How many rows are the min corner of a cell (read from the device once per brick layout)."""
        return int(self.real_cells().sum())

    def real_cell_rows(self) -> torch.Tensor:
        """(K,) int64 rows of `real_cells` (computed once per brick set; do not modify)."""
        return self._real_cell_rows

    @cached_property
    def _real_cell_rows(self) -> torch.Tensor:
        return torch.nonzero(self.real_cells()).squeeze(-1)


def flat_index(coords: torch.Tensor, n: int) -> torch.Tensor:
    """(M, 3) integer coordinates in an n^3 grid -> (M,) raster index x * n^2 + y * n + z."""
    return (coords[:, 0] * n + coords[:, 1]) * n + coords[:, 2]


def grid_coords(index: torch.Tensor, n: int) -> torch.Tensor:
    """(M,) raster indices of an n^3 grid -> (M, 3) int64 coordinates (the inverse of `flat_index`)."""
    return torch.stack([index // (n * n), (index // n) % n, index % n], -1)


def trilinear_weights(f: torch.Tensor) -> torch.Tensor:
    """(N, 3) positions within a cell, in [0, 1] -> (N, 8) weights of its corners, corner k offset (k >> 2 & 1,
    k >> 1 & 1, k & 1) from the min corner.

    The products are formed corner-major, as (2, 2, 2, N) broadcasts over long rows (four operations; on a CPU as
    fast as eight products of (N,) columns, and three times faster than (N, 2, 2, 2) broadcasts), so the result is
    the transpose of a contiguous (8, N): an elementwise product with a contiguous (N, 8) first operand comes out
    contiguous."""
    high = f.t()
    gx, gy, gz = torch.stack([1 - high, high], 1).unbind(0)  # (2, N) each: the low and the high corner's weight
    return (gx.view(2, 1, 1, -1) * gy.view(2, 1, -1) * gz).view(8, -1).t()


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
        mark[flat_index(b, n)] = True
    return grid_coords(torch.nonzero(mark).squeeze(-1), n)


def all_bricks(resolution: int) -> torch.Tensor:
    """(B, 3) int64 coordinates of every brick of an R^3 grid (on the CPU)."""
    n = resolution // BRICK + 1
    return torch.stack(torch.meshgrid(*[torch.arange(n)] * 3, indexing="ij"), -1).reshape(-1, 3)


@dataclass
class BrickChange:
    """A new set of bricks and how per-row tables of the old one carry over to it.

    Attributes:
        bricks: the new BrickIndex.
        interpolate: carries values (parameters, optimizer moments, scores): kept rows keep theirs, new vertices of
            a subdivision interpolate the old field trilinearly.
        inherit: carries per-cell flags: every new cell takes its parent cell's value (False where it has none).
    """

    bricks: BrickIndex
    interpolate: RowRemap
    inherit: RowRemap


def pruned(old: BrickIndex, keep: torch.Tensor) -> BrickChange:
    """Free every brick that no kept cell touches.

    Args:
        old: the current bricks.
        keep: (V,) bool, cells to keep.
    """
    wanted = bricks_around_cells(old.slot_vertices()[keep & old.real_cells()], old.bricks_per_axis)
    old_bricks = old.index.view(-1)[flat_index(wanted, old.bricks_per_axis)].long()
    old_rows = (old_bricks.unsqueeze(1) * BRICK_VOLUME + torch.arange(BRICK_VOLUME, device=wanted.device)).reshape(-1)

    def remap(table: torch.Tensor) -> torch.Tensor:
        return table[old_rows]

    return BrickChange(BrickIndex(old.resolution, wanted), remap, remap)


def subdivided(old: BrickIndex, cells: torch.Tensor) -> BrickChange:
    """Halve the cell size where `cells` (V,) bool are marked: their children get bricks at twice the resolution.

    A trilinear field restricted to a sub-cell is trilinear, so `interpolate` preserves a field exactly inside
    every refined cell.
    """
    parents = old.slot_vertices()[cells & old.real_cells()]
    children = (2 * parents.unsqueeze(1) + CORNERS.to(parents.device)).reshape(-1, 3)
    new = BrickIndex(2 * old.resolution, bricks_around_cells(children, 2 * old.resolution // BRICK + 1))
    vertices = new.slot_vertices()
    rows, w = _stencil_in_chunks(old, vertices.float() / new.resolution * 2 - 1)
    parent_slots = old.vertex_slots((vertices >> 1).clamp_max(old.resolution - 1))

    def interpolate(table: torch.Tensor) -> torch.Tensor:
        flat = table.reshape(len(table), -1)
        return weighted_row_sum(flat, rows, w.to(flat.dtype)).reshape(len(rows), *table.shape[1:])

    def inherit(table: torch.Tensor) -> torch.Tensor:
        return table[parent_slots.clamp_min(0)] & (parent_slots >= 0)

    return BrickChange(new, interpolate, inherit)


def grown(old: BrickIndex, resolution: int, added: torch.Tensor) -> BrickChange:
    """Allocate the bricks `added` (M, 3) at `resolution` beside the old ones (a grid of that resolution, or one
    with no bricks): kept rows keep their values, new rows start at zero (False for flags)."""
    if old.resolution != resolution and len(old.brick_coords):
        raise ValueError(f"bricks at {old.resolution}^3 cannot grow at {resolution}^3")
    kept = old.brick_coords if old.resolution == resolution else old.brick_coords[:0]
    present = old.index.view(-1)[flat_index(added, old.bricks_per_axis)] >= 0 if len(kept) else None
    new_bricks = added if present is None else added[~present]
    extra = len(new_bricks) * BRICK_VOLUME

    def remap(table: torch.Tensor) -> torch.Tensor:
        return torch.cat([table, table.new_zeros(extra, *table.shape[1:])])

    return BrickChange(BrickIndex(resolution, torch.cat([kept, new_bricks])), remap, remap)


def _stencil_in_chunks(bricks: BrickIndex, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`bricks.corners(x)` for many points (N, 3), with int32 rows: (N, 8) int32 rows and (N, 8) weights, built
    STENCIL_CHUNK points at a time (a refinement to 128^3 builds it for ~2.5M vertices: ~0.6 GB of temporaries at
    once, ~0.25 GB for the int64 result)."""
    rows = torch.empty(len(x), 8, dtype=torch.int32, device=x.device)
    w = torch.empty(len(x), 8, dtype=x.dtype, device=x.device)
    for i in range(0, len(x), STENCIL_CHUNK):
        rows[i:i + STENCIL_CHUNK], w[i:i + STENCIL_CHUNK] = bricks.corners(x[i:i + STENCIL_CHUNK])
    return rows, w


class BrickModule(nn.Module):
    """A module whose per-row tables live on a BrickIndex `bricks`, rebuilt from its `brick_coords` buffer.

    Buffers:
        brick_coords: (B, 3) int64 allocated bricks (`bricks` is rebuilt from them).
    Class attributes:
        ROW_TABLES: its per-row tables (attribute name -> "interpolate" for values, "inherit" for per-cell flags: the
            BrickChange remap that carries it); a topology change replaces each of them (voxnerf.train.strategy).
    """

    ROW_TABLES: ClassVar[dict[str, str]] = {}

    def __init__(self, resolution: int, brick_coords: torch.Tensor):
        super().__init__()
        self.bricks = BrickIndex(resolution, brick_coords)
        self.register_buffer("brick_coords", self.bricks.brick_coords)

    @property
    def resolution(self) -> int:
        return self.bricks.resolution

    @property
    def cell_size(self) -> float:
        """Edge of one cell in grid units."""
        return 2.0 / self.resolution

    def _apply(self, fn, recurse=True):
        """Moving the module (`.to(device)`) moves the brick index along with the buffers."""
        super()._apply(fn, recurse)
        self.bricks = BrickIndex(self.bricks.resolution, self.brick_coords)
        return self

    def set_bricks(self, bricks: BrickIndex) -> None:
        """Take the new bricks of a topology change (its ROW_TABLES already carried), then `bricks_changed`."""
        self.bricks = bricks
        self.brick_coords = bricks.brick_coords
        self.bricks_changed()

    def bricks_changed(self) -> None:
        """Refresh what the module derives from its per-row tables after a topology change (nothing by default)."""


class BrickField(ABC):
    """A field (voxnerf.fields.base.Field) whose tables live on the occupancy estimator's bricks, rows aligned: the
    owner of topology (voxnerf.train.strategy) carries them, and the optimizer's state of them, with the estimator's
    at every change of bricks, and an occupancy update reads the field's density at the estimator's vertices from its
    rows. A field that is not one has no topology of its own (the estimator's bricks change alone)."""

    @abstractmethod
    def brick_modules(self) -> list[BrickModule]:
        """The field's modules whose per-row tables (`BrickModule.ROW_TABLES`) live on the estimator's bricks."""

    @abstractmethod
    def vertex_density(self) -> torch.Tensor:
        """sigma (V,) at the vertices of the rows of `brick_modules` (the estimator's vertices), read from the rows
        themselves: what the field's `density_at` gives at those points, without a stencil."""

    @abstractmethod
    def growable(self) -> BrickModule | None:
        """The field's finer level that the owner of topology allocates where the photos need detail
        (`TopologyStrategy.grow_detail`), on bricks of its own; None when it has none."""
