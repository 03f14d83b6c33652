"""Occupancy and topology as a strategy: when to update occupancy, prune and subdivide (the loop only calls hooks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from voxnerf.config import Level, OccupancyConfig
from voxnerf.field import RadianceField
from voxnerf.topology import change_topology


@dataclass
class TopologyStrategy:
    """Keeps the grid's occupancy current and its resolution on the level schedule.

    Hooks: `skipping(step)` says whether empty-space skipping is active yet; `step_post_backward(...)` runs
    after each optimizer step and may update occupancy, prune and subdivide. `reduce_max` combines the
    occupancy statistic (V,) over the ranks of a multi-process job before thresholding, so every rank takes the
    same decision (the default, for one process, leaves it as it is).
    """

    occupancy: OccupancyConfig
    levels: list[Level]
    step_ratio: float
    reduce_max: Callable[[torch.Tensor], torch.Tensor] = lambda t: t

    def skipping(self, step: int) -> bool:
        """False during warm-up: every cell is occupied and no sample is skipped, so training can start."""
        return step >= self.occupancy.warmup_steps

    def level(self, progress: float) -> Level:
        """The schedule level active at `progress` in [0, 1]."""
        return next((lv for lv in self.levels if progress < lv.until), self.levels[-1])

    @torch.no_grad()
    def update_occupancy(self, field: RadianceField) -> None:
        """score = max(decay * score, max opacity of one step in the cell); occupied = score > threshold.

        A step is `step_ratio` cells of the grid, as long as the space makes it where the cell lies (longer in
        a contracted shell, where one sample stands for a long stretch of the ray).
        """
        grid = field.grid
        step = self.step_ratio * grid.cell_size * field.space.world_step_scale(grid.layout.cell_centers())
        alpha = self.reduce_max(-torch.expm1(-field.activate(grid.cell_max_density()) * step))
        grid.score = torch.maximum(grid.score * self.occupancy.decay, alpha)
        grid.set_occupied(self._occupied(grid.score, grid.layout.real_cells()))

    def _occupied(self, score: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """(V,) bool: score above the threshold, or else the `min_fraction` highest scores of the real cells (a
        grid pruned empty, e.g. when nothing grew past the threshold during warm-up, could never train again)."""
        occupied = score > self.occupancy.threshold
        floor = int(self.occupancy.min_fraction * int(real.sum()))
        if int(occupied.sum()) >= floor or floor == 0:
            return occupied
        cutoff = torch.topk(score.masked_fill(~real, float("-inf")), floor).values[-1]
        return score >= cutoff

    def step_post_backward(self, step: int, progress: float, field: RadianceField,
                           optimizer: torch.optim.Optimizer | None) -> bool:
        """Occupancy update, pruning and subdivision due after `step`.

        Returns:
            True when the grid's topology changed (so callers can re-check ranks or caches).
        """
        cfg = self.occupancy
        if step + 1 < cfg.warmup_steps:
            return False
        changed = False
        if (step + 1) % cfg.update_every == 0 or step + 1 == cfg.warmup_steps:
            self.update_occupancy(field)
        target = self.level(progress).resolution
        if field.grid.resolution < target:
            self.update_occupancy(field)
            change_topology(field.grid, optimizer, lambda: field.grid.prune(field.grid.occupied))
            change_topology(field.grid, optimizer, field.grid.subdivide)
            changed = True
        return changed
