"""Topology changes that keep the optimizer consistent: parameters and their Adam moments move together."""

from __future__ import annotations

from typing import Callable

import torch

from voxnerf.sparse_grid import RowRemap, SparseVoxelGrid

ROW_PARAMETERS = ("density", "features")


def change_topology(grid: SparseVoxelGrid, optimizer: torch.optim.Optimizer | None,
                    change: Callable[[], RowRemap]) -> None:
    """Run a grid topology change (`grid.prune`, `grid.subdivide`) and carry the optimizer along.

    Per-row optimizer state (Adam's exp_avg, exp_avg_sq) goes through the same RowRemap as the parameters, so
    moments follow their vertices (kept rows keep theirs; new vertices interpolate their parents'); scalar state
    such as the step count is kept.
    """
    old = {name: getattr(grid, name) for name in ROW_PARAMETERS}
    remap = change()
    if optimizer is None:
        return
    for name, old_param in old.items():
        new_param = getattr(grid, name)
        state = optimizer.state.pop(old_param, {})
        optimizer.state[new_param] = {
            k: remap(v) if torch.is_tensor(v) and v.dim() > 0 and len(v) == len(old_param) else v
            for k, v in state.items()
        }
        for group in optimizer.param_groups:
            group["params"] = [new_param if p is old_param else p for p in group["params"]]
