"""The occupancy estimator: which cells of the grid cube may hold matter, and the marching of rays through them.

The estimator knows no field. It keeps its own sparse cell grid (a BrickIndex over the bricks that may hold
matter), a running score per cell, and the space (voxnerf.data.space) that maps rays into the grid; it asks the field
for density only through callbacks: `update` takes `density_fn(points) -> sigma`, `march` takes
`sigma_fn(points) -> (sigma, lookup)` (see voxnerf.render.march). Its verbs: `update` (the occupancy statistic) and
`march` (sample rays). Its bricks change only with the field's, by the one owner of topology (voxnerf.train.strategy),
which carries its per-row tables (`ROW_TABLES`: scores and occupancy) along with the field's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from voxnerf.data.space import UNIT_BOX, MarchRays, Space, space_from_dict
from voxnerf.fields.bricks import (
    BRICK,
    BRICK_VOLUME,
    STENCIL_CHUNK,
    BrickModule,
    all_bricks,
)
from voxnerf.render.march import Samples, SigmaFn, march


@dataclass
class OccupancyConfig:
    warmup_steps: int = 100  # every cell counts as occupied until then (an empty grid never trains)
    update_every: int = 16  # steps between occupancy updates
    decay: float = 0.95  # running max: score = max(decay * score, current opacity)
    threshold: float = 1e-2  # a cell stays occupied while its max opacity over one step exceeds this
    min_fraction: float = 0.01  # ...but at least this fraction of cells (the highest scores) stays occupied


class OccupancyGrid(BrickModule):
    """Per-cell occupancy of an R^3 grid over [-1, 1]^3, stored on sparse bricks.

    Buffers:
        brick_coords: (B, 3) int64 bricks whose cells may be occupied (see BrickModule).
        occupied: (V,) bool, whether the cell whose min corner is row v's vertex may hold matter (a ROW_TABLE: new
            cells inherit their parent's).
        score: (V,) float, running max of the opacity of one sample step in that cell (a ROW_TABLE: new cells
            interpolate it).
        occupied_or_none: (V + BRICK_VOLUME,) bool, `occupied` and BRICK_VOLUME False rows, which the negative
            rows of missing cells read (`cell_rows`).
        brick_occupied: (n, n, n) bool, bricks holding an occupied cell, dilated by one brick (coarse marching).
        bbox: (2, 3) grid-coordinate min and max corners of the occupied cells.
    Attributes:
        space: how rays reach the grid (voxnerf.data.space).
    """

    ROW_TABLES = {"score": "interpolate", "occupied": "inherit"}

    def __init__(self, resolution: int, space: Space, brick_coords: torch.Tensor | None = None,
                 occupied: torch.Tensor | None = None, score: torch.Tensor | None = None):
        super().__init__(resolution, all_bricks(resolution) if brick_coords is None else brick_coords)
        self.space = space
        rows = self.bricks.num_rows
        self.register_buffer("score", torch.zeros(rows) if score is None else score)
        self.register_buffer("occupied", torch.ones(rows, dtype=torch.bool))
        self.register_buffer("occupied_or_none", torch.empty(0, dtype=torch.bool), persistent=False)
        self.register_buffer("brick_occupied", torch.empty(0, dtype=torch.bool))
        self.register_buffer("bbox", torch.empty(2, 3))
        self.set_occupied(self.occupied if occupied is None else occupied)

    def extra_repr(self) -> str:
        return f"resolution={self.resolution}, occupied_cells={int(self.occupied.sum())}"

    # ---- state ----------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint stores: resolution, space and the per-cell buffers."""
        return {"resolution": self.resolution, "space": self.space.to_dict(),
                "brick_coords": self.brick_coords, "occupied": self.occupied, "score": self.score}

    @classmethod
    def from_state(cls, state: dict) -> "OccupancyGrid":
        """Rebuild an estimator saved by `state` (on the CPU)."""
        cpu = {k: v.cpu() if torch.is_tensor(v) else v for k, v in state.items()}
        return cls(cpu["resolution"], space_from_dict(cpu["space"]), cpu["brick_coords"], cpu["occupied"],
                   cpu["score"].float())

    # ---- queries --------------------------------------------------------------------------------------------
    def is_occupied(self, g: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid points -> (N,) bool, whether each lies in an occupied cell."""
        return self.occupied_rows(self.cell_rows(g))

    def cell_rows(self, g: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid points -> (N,) int64 row of the cell holding each, negative where its brick is not allocated
        (`BrickIndex.slots_or_negative`)."""
        return self.bricks.slots_or_negative(self.bricks.cells(g))

    def occupied_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """(N,) int64 cell rows (negative: none, as `cell_rows` gives) -> (N,) bool, whether each cell is
        occupied."""
        return self.occupied_or_none[rows]

    def in_occupied_brick(self, g: torch.Tensor) -> torch.Tensor:
        """(N, 3) grid points -> (N,) bool, whether each lies in a (dilated) occupied brick: the brick of vertex
        coordinates p (`BrickIndex.vertex_coords`) is floor(p / BRICK), and scaling by a power of two is exact."""
        b = ((g + 1) * (self.resolution / (2 * BRICK))).clamp(0, self.bricks.bricks_per_axis - 1).long()
        return self.brick_occupied.view(-1)[self.bricks.raster(b)]

    def occupied_cells(self) -> torch.Tensor:
        """(K, 3) int64 coordinates of the occupied cells."""
        return self.bricks.slot_vertices()[self.occupied]

    def set_occupied(self, occupied: torch.Tensor) -> None:
        """Replace the per-cell occupancy (V,) bool and refresh the per-brick summary and the bounding box."""
        self.occupied = occupied & self.bricks.real_cells()
        self.occupied_or_none = F.pad(self.occupied, (0, BRICK_VOLUME))  # a negative row (no cell) reads a False
        n = self.bricks.bricks_per_axis
        has = self.occupied.view(-1, BRICK_VOLUME).any(1).float()
        dense = torch.zeros(n, n, n, device=has.device)
        c = self.brick_coords
        dense[c[:, 0], c[:, 1], c[:, 2]] = has
        self.brick_occupied = F.max_pool3d(dense[None, None], 3, stride=1, padding=1)[0, 0] > 0
        self.bbox = self._bbox_of(self.occupied)

    def _bbox_of(self, cells: torch.Tensor) -> torch.Tensor:
        """(2, 3) grid min and max corners of the cells marked in (V,) bool (the whole cube if none); computed
        without a host sync, per axis from the layers of each brick that hold a marked cell (reductions of the mask:
        no (V, 3) coordinates)."""
        marked = cells.view(-1, BRICK, BRICK, BRICK)  # (B, x, y, z): a brick's rows in LOCAL order
        # (3, B, 8): whether each brick's layers across x, y and z hold a marked cell, and the layers' coordinates
        held = torch.stack([marked.any(dim=(2, 3)), marked.any(dim=(1, 3)), marked.any(dim=(1, 2))])
        layers = (self.brick_coords.t() * BRICK).unsqueeze(-1) + torch.arange(BRICK, device=cells.device)
        low = torch.where(held, layers, self.resolution).amin((1, 2))
        high = torch.where(held, layers + 1, 0).amax((1, 2))
        box = torch.stack([low, high]).float() * self.cell_size - 1
        return torch.where(cells.any(), box, UNIT_BOX.to(cells.device))

    def vertices(self) -> torch.Tensor:
        """(V, 3) grid points of the rows' vertices (the cells' corners); the same tensor until the next refinement
        or move, so a caller may cache what it computes for them (see voxnerf.train.strategy)."""
        return self.bricks.vertex_points()

    # ---- verbs ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def cell_density(self, density_fn: Callable[[torch.Tensor], torch.Tensor], cells: slice = slice(None)
                     ) -> torch.Tensor:
        """(V,) the largest density the field gives at the corners of each row's cell in `cells` (0 for the other
        rows and for rows naming no cell).

        For a field interpolated trilinearly on this grid's vertices that is the largest density in the cell.
        Args:
            density_fn: (N, 3) grid points -> (N,) sigma >= 0, asked once for all of `vertices()`.
            cells: the rows whose cells to evaluate (a share of the work, see `update`).
        """
        sigma = density_fn(self.vertices())
        padded = F.pad(sigma, (0, 1))  # a missing corner's row -1 reads the appended 0 (sigma >= 0)
        corners = self.bricks.cell_corner_rows()
        out = torch.zeros_like(sigma)
        start, stop, _ = cells.indices(len(corners))
        for i in range(start, stop, STENCIL_CHUNK):  # chunks small enough to stay in cache (2.4x faster than 2M)
            c = corners[i:min(i + STENCIL_CHUNK, stop)]
            torch.amax(padded[c], -1, out=out[i:i + len(c)])
        return out

    @torch.no_grad()
    def update(self, density_fn: Callable[[torch.Tensor], torch.Tensor], cfg: OccupancyConfig, step_ratio: float,
               reduce_max: Callable[[torch.Tensor], torch.Tensor] = lambda t: t, share: tuple[int, int] = (0, 1)
               ) -> None:
        """score = max(decay * score, opacity of one sample step at the cell's largest density); occupied =
        score > threshold (but at least the `min_fraction` highest-scoring cells).

        Args:
            density_fn: (N, 3) grid points -> (N,) sigma.
            cfg: decay, threshold and min_fraction.
            step_ratio: a sample step in cells; it is as long as the space makes it where the cell lies (longer in
                a contracted shell, where one sample stands for a long stretch of the ray).
            reduce_max: combines the (V,) opacities over the ranks of a multi-process job (every rank then takes
                the same decision).
            share: (k, n): evaluate the k-th of n equal runs of rows only, the others left 0 for `reduce_max` to
                fill in: rank k of n ranks does 1/n of the update's corner maxima.
        """
        k, n = share
        rows = len(self.score)
        cells = slice(k * rows // n, (k + 1) * rows // n)
        step = step_ratio * self.cell_size * self.space.world_step_scale(self.bricks.cell_centers())
        alpha = reduce_max(-torch.expm1(-self.cell_density(density_fn, cells) * step))
        self.score = torch.maximum(self.score * cfg.decay, alpha)
        self.set_occupied(self._occupied(cfg))

    def _occupied(self, cfg: OccupancyConfig) -> torch.Tensor:
        """(V,) bool: score above the threshold, or else the `min_fraction` highest scores of the real cells (a
        grid pruned empty, e.g. when nothing grew past the threshold during warm-up, could never train again)."""
        occupied = self.score > cfg.threshold
        floor = int(cfg.min_fraction * self.bricks.num_real_cells)
        if floor == 0:
            return occupied
        # the floor-th highest score of a real cell is above the threshold when `floor` cells or more pass it (the
        # union is then the cells that pass), else at most the threshold (the union is then the floor highest):
        # decided on the device, without reading a count on the host
        real = self.bricks.real_cells()
        cutoff = torch.topk(self.score.masked_fill(~real, float("-inf")), floor, sorted=False).values.amin()
        return occupied | (self.score >= cutoff)

    def bricks_changed(self) -> None:
        """After a topology change: the carried occupancy limited to the new real cells, and its summaries."""
        self.set_occupied(self.occupied)

    def march(self, rays: MarchRays, sigma_fn: SigmaFn, step: float, offsets: torch.Tensor, alpha_min: float,
              transmittance_min: float, chunk: int, color_weight_min: float = 0.0) -> Samples:
        """Sample points along rays through the occupied cells (see `voxnerf.render.march.march` for the arguments)."""
        return march(self, rays, sigma_fn, step, offsets, alpha_min, transmittance_min, chunk, color_weight_min)

