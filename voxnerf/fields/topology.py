"""Topology changes that keep the optimizer consistent: parameters and their Adam moments move together."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from voxnerf.fields.sparse_grid import BrickChange


def change_topology(module: nn.Module, names: tuple[str, ...], optimizer: torch.optim.Optimizer | None,
                    change: Callable[[], BrickChange]) -> BrickChange:
    """Run a topology change of `module` (e.g. `grid.prune`, `grid.subdivide`) and carry the optimizer along.

    Args:
        module: owns the per-row parameters `names`, which `change` replaces.
        names: attribute names of the per-row parameters.
        optimizer: the optimizer holding them, or None.
        change: performs the change and returns its BrickChange.
    Per-row optimizer state (Adam's exp_avg, exp_avg_sq) goes through the same `interpolate` remap as the
    parameters, so moments follow their vertices (kept rows keep theirs; new vertices interpolate their
    parents'); scalar state such as the step count is kept.
    """
    old = {name: getattr(module, name) for name in names}
    rebuilt = change()
    if optimizer is None:
        return rebuilt
    for name, old_param in old.items():
        new_param = getattr(module, name)
        state = optimizer.state.pop(old_param, {})
        optimizer.state[new_param] = {
            k: rebuilt.interpolate(v) if torch.is_tensor(v) and v.dim() > 0 and len(v) == len(old_param) else v
            for k, v in state.items()
        }
        for group in optimizer.param_groups:
            group["params"] = [new_param if p is old_param else p for p in group["params"]]
    return rebuilt
