"""The Field interface: what the renderer, trainer, estimator and exports may ask of a radiance field.

A field maps grid points (the grid cube [-1, 1]^3 that the space, voxnerf.data.space, maps the scene into) and view
directions to density and color. It knows nothing of rays, cameras or occupancy. Subclasses register themselves
by `name`; a config selects one with `field: {kind: NAME, ...}` (its options are the subclass's `Config`).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, fields
from typing import ClassVar, Iterator

import torch
from torch import nn

from voxnerf.data.space import Space
from voxnerf.errors import VoxnerfError
from voxnerf.fields.bricks import CellPoints
from voxnerf.fields.row_space import RowSpace

Lookup = tuple[torch.Tensor, ...]
"""What a field computes once per point and reuses for density and color: per-point tensors (N, ...)."""

FIELDS: dict[str, type["Field"]] = {}


class Field(nn.Module):
    """A radiance field. Subclasses set `name` and `Config` (a dataclass with a `kind` option equal to `name`, and
    `RANGES`, a class attribute: the voxnerf.ranges.Range of each numeric option by its name) and implement
    `lookup`, `density`, `color` and `param_groups`; the other verbs have defaults. A field whose tables live on
    the occupancy estimator's bricks is also a `voxnerf.fields.bricks.BrickField`.

    Args of the constructor (every subclass): cfg (its Config), resolution (the schedule's first grid
    resolution), space (where the grid lies: some fields start differently where steps are long), seed.
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        FIELDS[cls.name] = cls

    def __init__(self, cfg, resolution: int, space: Space, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.start_resolution = resolution

    # ---- queries --------------------------------------------------------------------------------------------
    def lookup(self, g: torch.Tensor, cells: CellPoints | None = None) -> Lookup:
        """(N, 3) grid points -> their Lookup (differentiable in g where the field is). `cells`: the points' cells in
        the occupancy estimator's bricks and their positions in them, where the caller knows them (the march's
        samples lie in occupied cells), which a field on those bricks may use to look less."""
        raise NotImplementedError

    def density(self, lookup: Lookup) -> torch.Tensor:
        """sigma (N,) >= 0, float32, per unit of march length, at looked-up points."""
        raise NotImplementedError

    def color(self, lookup: Lookup, dirs: torch.Tensor, amp_dtype: torch.dtype | None = None,
              rays: torch.Tensor | None = None) -> torch.Tensor:
        """rgb (N, 3) in [0, 1], float32, at looked-up points seen along unit directions: dirs (N, 3), one per
        point, or with `rays` (N,) int64 naming each point's ray, dirs (R, 3) of the rays (the view encoding is then
        made once per ray). The decoder runs its MLP in `amp_dtype` (autocast's dtype) when given."""
        raise NotImplementedError

    def density_at(self, g: torch.Tensor) -> torch.Tensor:
        """sigma (N,) at grid points g (N, 3)."""
        return self.density(self.lookup(g))

    def color_at(self, g: torch.Tensor, dirs: torch.Tensor, amp_dtype: torch.dtype | None = None) -> torch.Tensor:
        """rgb (N, 3) at grid points g (N, 3) along unit directions dirs (N, 3)."""
        return self.color(self.lookup(g), dirs, amp_dtype)

    # ---- training -------------------------------------------------------------------------------------------
    def param_groups(self, optim) -> list[dict]:
        """Optimizer parameter groups: dicts with "name", "params" and "lr" (the base rate, from `optim`)."""
        raise NotImplementedError

    def regularization(self, optim, generator: torch.Generator) -> torch.Tensor | float:
        """The field's own regularizers (weighted by `optim`), added to the loss; 0 by default."""
        return 0.0

    @contextlib.contextmanager
    def row_spaces(self) -> Iterator[list[RowSpace]]:
        """While entered (a training step: forward, backward and the gradient exchange), the field's row spaces:
        each names tables whose rows are the same things (a grid's density and features, per vertex) and gathers
        the rows a batch reads them at. Reads of those tables go through the RowSpace; on leaving, the tables'
        .grad hold the step's gradients. A multi-process job exchanges these tables only at the rows some rank read,
        and every other parameter whole (voxnerf.train.distributed). None by default: everything is exchanged
        whole."""
        yield []

    # ---- state ----------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint stores: kind, options and tensors."""
        return {"kind": self.name, "config": asdict(self.cfg), "resolution": self.start_resolution,
                "tensors": self.state_dict()}

    @classmethod
    def restore(cls, state: dict, space: Space) -> "Field":
        """Rebuild a field saved by `state` (on the CPU); fields whose shapes change in training override this."""
        field = cls(saved_options(cls.Config, state["config"]), state["resolution"], space)
        field.load_state_dict(state["tensors"])
        return field


def known_options(config_class: type, saved: dict) -> dict:
    """The entries of a checkpoint's saved options that dataclass `config_class` knows: another version's options
    (since removed, or added after this one) are left out."""
    known = {f.name for f in fields(config_class)}
    return {k: v for k, v in saved.items() if k in known}


def saved_options(config_class: type, saved: dict):
    """Options dataclass `config_class` from a checkpoint's saved dict (`known_options`; what it lacks takes the
    defaults)."""
    return config_class(**known_options(config_class, saved))


def field_class(kind: str, where: str = "field") -> type[Field]:
    """The registered Field subclass named `kind`, or a VoxnerfError listing the known ones."""
    if kind not in FIELDS:
        raise VoxnerfError(f"{where}.kind '{kind}': expected one of {', '.join(sorted(FIELDS))}")
    return FIELDS[kind]


def field_from_state(state: dict, space: Space) -> Field:
    """The field a checkpoint stored (see `Field.state`), on the CPU."""
    return field_class(state["kind"]).restore(state, space)
