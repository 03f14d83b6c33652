"""Occupancy and topology as a strategy, and the one owner of topology: when to update occupancy and refine the
model (the loop only calls hooks), and the surgery of every per-row table a change of bricks carries.

The field's grid and the occupancy estimator live on one set of bricks (rows aligned). A change of bricks
(`pruned`, `subdivided`: voxnerf.fields.bricks) is decided here once and applied by `change_bricks` to every
table the modules declare (`BrickModule.ROW_TABLES`: the grid's density and features, the estimator's scores and
occupancy) and to the optimizer's per-row state of those that are parameters (Adam's moments), with one remap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch
from torch import nn

from voxnerf.fields import Field
from voxnerf.fields.bricks import (BRICK, BRICK_VOLUME, STENCIL_CHUNK, BrickChange, BrickField, BrickIndex, BrickModule,
                                  flat_index, grid_coords, grown, pruned, subdivided)
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyConfig, OccupancyGrid
from voxnerf.run.config import Level


class FixedPointsDensity:
    """A density callback for one fixed tensor of points (the estimator's vertices), computed once per topology:
    where the field's rows are those vertices (a `BrickField`), their own density (`BrickField.vertex_density`, no
    stencil); else through the field's Lookup of the points, computed once and reused (the trilinear stencil is most
    of the cost of an occupancy update). Other points are looked up as usual. Valid while neither the points nor the
    field's topology change."""

    def __init__(self, field: Field, points: torch.Tensor):
        self.field, self.points, self.lookup = field, points, None
        if isinstance(field, BrickField):
            return
        with torch.no_grad():  # in chunks: the lookup's temporaries are several times its result
            parts = [field.lookup(points[i:i + STENCIL_CHUNK]) for i in range(0, max(len(points), 1), STENCIL_CHUNK)]
        self.lookup = tuple(torch.cat(columns) for columns in zip(*parts))

    def __call__(self, g: torch.Tensor) -> torch.Tensor:
        if g is not self.points:
            return self.field.density_at(g)
        return self.field.vertex_density() if self.lookup is None else self.field.density(self.lookup)


def occupancy_for_ranks(cfg: OccupancyConfig, ranks: int) -> OccupancyConfig:
    """The occupancy schedule for a job whose every step draws `ranks` batches (data-parallel ranks).

    The configured schedule counts steps of one batch. Counted in rays instead, a step of `ranks` batches is
    `ranks` such steps: warm-up ends after as many rays (warmup_steps / ranks steps, rounded up) and each update
    decays the scores as far as one process's updates would over the same rays (decay ** ranks per update, which
    still come every `update_every` steps: no more work per step). Without it the occupancy of a 2-rank job lagged
    a single process's by half the rays, and its rays took 1.5x the samples.
    """
    return replace(cfg, warmup_steps=math.ceil(cfg.warmup_steps / ranks), decay=cfg.decay ** ranks)


@dataclass
class TopologyStrategy:
    """Keeps the estimator's occupancy current and the model's resolution on the level schedule.

    Hooks: `skipping(step)` says whether empty-space skipping is active yet; `step_post_backward(...)` runs
    after each optimizer step and may update occupancy and refine the field and the estimator. `reduce_max`
    combines the occupancy statistic (V,) over the ranks of a multi-process job before thresholding, so every
    rank takes the same decision (the default, for one process, leaves it as it is); `share` = (rank, ranks) splits
    the statistic's work among them (see OccupancyGrid.update). `footprint(g, cell)` (voxnerf.data.footprint) gives
    the most training pixels (K,) a cell of edge `cell` at grid points g (K, 3) covers: the detail level grows only
    where its cells cover a pixel or more (None: everywhere).
    """

    occupancy: OccupancyConfig
    levels: list[Level]
    step_ratio: float
    reduce_max: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    share: tuple[int, int] = (0, 1)
    footprint: Callable[[torch.Tensor, float], torch.Tensor] | None = None
    _density: FixedPointsDensity | None = field(default=None, init=False, repr=False)

    def skipping(self, step: int) -> bool:
        """False during warm-up: every cell is occupied and no sample is skipped, so training can start."""
        return step >= self.occupancy.warmup_steps

    def level(self, progress: float) -> Level:
        """The schedule level active at `progress` in [0, 1]."""
        return next((lv for lv in self.levels if progress < lv.until), self.levels[-1])

    def update_occupancy(self, model: Model) -> None:
        """The estimator's occupancy from the field's current density (see OccupancyGrid.update)."""
        vertices = model.estimator.vertices()
        if self._density is None or self._density.points is not vertices or self._density.field is not model.field:
            self._density = FixedPointsDensity(model.field, vertices)
        model.estimator.update(self._density, self.occupancy, self.step_ratio, self.reduce_max, self.share)

    def step_post_backward(self, step: int, progress: float, model: Model,
                           optimizer: torch.optim.Optimizer | None) -> bool:
        """Occupancy update and refinement due after `step`.

        Returns:
            True when the model's topology changed (so callers can re-check ranks or caches).
        """
        cfg = self.occupancy
        if step + 1 < cfg.warmup_steps:
            return False
        if (step + 1) % cfg.update_every == 0 or step + 1 == cfg.warmup_steps:
            self.update_occupancy(model)
        target = self.level(progress).resolution
        if model.estimator.resolution < target:
            self.update_occupancy(model)
            self.refine(model, target, optimizer)
            return True
        detail = model.field.growable() if isinstance(model.field, BrickField) else None
        if detail is None or detail.bricks.num_rows or progress < model.field.cfg.detail_at \
                or target < self.levels[-1].resolution:
            return False
        self.grow_detail(model, detail, optimizer)
        return True

    def grow_detail(self, model: Model, detail: BrickModule, optimizer: torch.optim.Optimizer | None) -> None:
        """Allocate the field's detail level (twice the grid's resolution) on the bricks whose occupied cells carry
        the largest gradients, `detail_share` of the grid's rows in all (see `detail_bricks`)."""
        estimator = model.estimator
        budget = int(model.field.cfg.detail_share * estimator.bricks.num_rows)
        resolution = 2 * estimator.resolution
        bricks = detail_bricks(estimator.bricks, self.detail_cells(estimator, resolution),
                               gradient_energy(model.field.brick_modules(), optimizer), resolution,
                               budget // BRICK_VOLUME)
        change_bricks([detail], grown(detail.bricks, resolution, bricks), optimizer)
        self._density = None  # the field's lookups changed with its topology

    def detail_cells(self, estimator: OccupancyGrid, resolution: int) -> torch.Tensor:
        """(V,) bool, the estimator's occupied cells that a level at `resolution` may refine: those where its cells
        would cover at least a training pixel (`footprint`), since a finer cell has nothing more to learn."""
        cells = estimator.occupied & estimator.bricks.real_cells()
        if self.footprint is None:
            return cells
        rows = torch.nonzero(cells).squeeze(-1)
        pixels = self.footprint(estimator.bricks.cell_centers()[rows], 2.0 / resolution)
        return cells.index_fill_(0, rows[pixels < 1.0], False)

    def refine(self, model: Model, resolution: int, optimizer: torch.optim.Optimizer | None) -> None:
        """The model's bricks refined to `resolution` (`refine`: the estimator, the field's per-row tables and the
        optimizer's state of them together), and what the strategy cached of the old ones dropped."""
        refine(model.estimator, resolution, carried_modules(model.field), optimizer)
        self._density = None  # the field's lookups changed with its topology


def carried_modules(field: Field) -> list[BrickModule]:
    """The field's modules whose per-row tables a change of the estimator's bricks carries: a `BrickField`'s
    `brick_modules`, none for a field with no topology of its own."""
    return field.brick_modules() if isinstance(field, BrickField) else []


def gradient_energy(modules: Sequence[BrickModule], optimizer: torch.optim.Optimizer | None) -> torch.Tensor:
    """(V,) how strongly the photos pull on each row of the modules' tables: the root of Adam's running mean of
    squared gradients (`exp_avg_sq`, an average over the last ~100 steps), summed over the tables' channels; zero
    where the optimizer holds no such state."""
    energy = torch.zeros(modules[0].bricks.num_rows, device=modules[0].brick_coords.device)
    for module in modules:
        for name in module.ROW_TABLES:
            state = optimizer.state.get(getattr(module, name), {}) if optimizer is not None else {}
            if "exp_avg_sq" in state:
                energy += state["exp_avg_sq"].reshape(len(energy), -1).float().sqrt().sum(-1)
    return energy


def detail_bricks(bricks: BrickIndex, cells: torch.Tensor, energy: torch.Tensor, resolution: int,
                  count: int) -> torch.Tensor:
    """The `count` bricks of a grid at `resolution` (a multiple of the bricks') whose `cells` carry the most
    gradient energy (each cell: its 8 corner rows' `energy`), as SVRaster refines the voxels of largest accumulated
    gradient.

    Args:
        bricks: the estimator's bricks (the grid's cells).
        cells: (V,) bool, the cells that may be refined (occupied, and wide enough: `TopologyStrategy.detail_cells`).
        energy: (V,) per row, see `gradient_energy`.
    Returns:
        (M, 3) int64 brick coordinates at `resolution`, M <= count (bricks without such a cell are never chosen).
    """
    corners = bricks.cell_corner_rows().long()
    cell_energy = torch.where(corners >= 0, energy[corners.clamp_min(0)], 0).sum(-1)
    fine = bricks.slot_vertices()[cells] * (resolution // bricks.resolution) >> 3  # (K, 3) fine bricks
    n = resolution // BRICK + 1
    score = torch.zeros(n**3, device=energy.device).index_add_(0, flat_index(fine, n), cell_energy[cells] + 1e-12)
    return grid_coords(score.topk(min(count, int((score > 0).sum()))).indices, n)


def refine(estimator: OccupancyGrid, resolution: int, carried: Sequence[BrickModule] = (),
           optimizer: torch.optim.Optimizer | None = None) -> None:
    """Prune the bricks no occupied cell touches, then halve the cell size where cells are occupied, until
    `resolution`: the estimator and the modules `carried` (`carried_modules` of a field, on the same bricks) change
    together, and `optimizer`'s per-row state with their parameters. Children inherit their parent's occupancy;
    values (parameters, moments, scores) are interpolated, which keeps a trilinear field exactly."""
    modules = [estimator, *carried]
    for module in carried:
        if module.resolution != estimator.resolution or not torch.equal(module.brick_coords, estimator.brick_coords):
            raise RuntimeError(f"{type(module).__name__} is not on the occupancy estimator's bricks")
    while estimator.resolution < resolution:
        change_bricks(modules, pruned(estimator.bricks, estimator.occupied), optimizer)
        change_bricks(modules, subdivided(estimator.bricks, estimator.occupied), optimizer)


@torch.no_grad()
def change_bricks(modules: Sequence[BrickModule], change: BrickChange,
                  optimizer: torch.optim.Optimizer | None = None) -> None:
    """Move every module to `change.bricks`, each table it declares (ROW_TABLES) through its remap; a parameter
    becomes a new one, and the optimizer's per-row state of it (tensors of its length, e.g. Adam's exp_avg and
    exp_avg_sq) follows through the same remap, its scalar state (the step count) as it was."""
    for module in modules:
        for name, remap in module.ROW_TABLES.items():
            old = getattr(module, name)
            new = getattr(change, remap)(old.detach())
            if isinstance(old, nn.Parameter):
                new = nn.Parameter(new, requires_grad=old.requires_grad)
                if optimizer is not None:
                    _carry_state(optimizer, old, new, getattr(change, remap))
            setattr(module, name, new)
        module.set_bricks(change.bricks)


def _carry_state(optimizer: torch.optim.Optimizer, old: nn.Parameter, new: nn.Parameter,
                 remap: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The optimizer holds `new` where it held `old`, with `old`'s per-row state remapped."""
    state = optimizer.state.pop(old, {})
    optimizer.state[new] = {k: remap(v) if torch.is_tensor(v) and v.dim() > 0 and len(v) == len(old) else v
                            for k, v in state.items()}
    for group in optimizer.param_groups:
        group["params"] = [new if p is old else p for p in group["params"]]
