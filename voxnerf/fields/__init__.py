"""Radiance fields behind one interface (`voxnerf.fields.base.Field`), and what they are built of: sparse bricks
(`bricks`: the brick index shared with the occupancy estimator, its changes `pruned`, `subdivided`, `grown`, and
`BrickField`, a field whose tables live on them), the sparse grid's parameters (`sparse_grid`) and their total
variation (`total_variation`), trilinear gathers (`interpolate`), the color decoder and its spherical harmonics,
per-photo color maps (`color_maps`), and the row spaces a field declares for the data-parallel gradient exchange
(`row_space`).

May import: `voxnerf.errors`, `voxnerf.system`, `voxnerf.data` (the Space), `voxnerf.ranges` (its options' ranges).
A field knows nothing of rays.

Every module of this package is imported here, so a new field needs only its own module (a Field subclass with a
`name` and a `Config`) and a config entry that selects it (`field: {kind: NAME}`).
"""

from __future__ import annotations

import importlib
import pkgutil

from voxnerf.fields.base import FIELDS, Field, Lookup, field_class, field_from_state

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["FIELDS", "Field", "Lookup", "field_class", "field_from_state"]
