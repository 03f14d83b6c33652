"""The sparse voxel field: density and features on a sparse brick grid (voxnerf.fields.sparse_grid), decoded to color by a
small MLP. The grid starts dense at the schedule's first resolution; the owner of topology (voxnerf.train.strategy)
prunes the bricks the estimator finds empty and subdivides the rest, carrying the grid's tables and Adam's moments.

With `detail_share` > 0 a second, finer level adds to the grid where the photos need detail: a sparse grid at twice
the grid's final resolution, empty until the owner of topology allocates its bricks where the training gradients
are largest (`TopologyStrategy.grow_detail`). Density and features are the sum of the two levels' trilinear
interpolations; a vertex the detail level does not allocate counts as zero, so the sum stays continuous."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterator

import torch

from voxnerf.data.space import Space
from voxnerf.fields.base import Field, Lookup, saved_options
from voxnerf.fields.bricks import BrickField, BrickModule, CellPoints
from voxnerf.fields.decoder import ColorDecoder, DensityActivation, GridFieldConfig
from voxnerf.fields.interpolate import take_rows
from voxnerf.fields.row_space import RowSpace
from voxnerf.fields.sparse_grid import SparseVoxelGrid
from voxnerf.fields.total_variation import total_variation, tv_rows
from voxnerf.ranges import FRACTION, Range

MAX_INIT_STRETCH = 1000.0  # see SparseVoxelField._initial_density


@dataclass
class SparseVoxelConfig(GridFieldConfig):
    kind: str = "sparse_grid"
    detail_share: float = 0.0  # rows of the finer detail level, as a share of the grid's rows when it is built (0: none)
    detail_at: float = 0.5  # fraction of the budget at which the detail level is built (once the grid is at its finest)

    RANGES: ClassVar[dict[str, Range]] = {**GridFieldConfig.RANGES, "detail_share": Range(0, 8), "detail_at": FRACTION}


class SparseVoxelField(Field, BrickField):
    """sigma(x) from the grid's density channel, rgb(x, d) from its features through the decoder.

    Its Lookup is the trilinear stencil of each point: corner rows (N, 8) int64 and weights (N, 8), followed by the
    detail level's (N, 8) rows and weights when the field has one.
    """

    name = "sparse_grid"
    Config = SparseVoxelConfig

    def __init__(self, cfg: SparseVoxelConfig, resolution: int, space: Space, seed: int = 0,
                 grid: SparseVoxelGrid | None = None, detail: SparseVoxelGrid | None = None):
        super().__init__(cfg, resolution, space, seed)
        self.activate = DensityActivation(cfg.alpha_init, cfg.density_scale, resolution)
        if grid is None:
            gen = torch.Generator().manual_seed(seed)
            grid = SparseVoxelGrid.dense(resolution, cfg.feature_dim, 0.0, cfg.feature_std, gen)
            grid.density.data = self._initial_density(grid, space)
        self.grid = grid
        if detail is None and cfg.detail_share > 0:
            detail = SparseVoxelGrid.empty(2 * resolution, cfg.feature_dim)  # its resolution is set when it grows
        self.detail = detail
        self.decoder = ColorDecoder.seeded(cfg, seed)

    def _initial_density(self, grid: SparseVoxelGrid, space: Space) -> torch.Tensor:
        """(V,) raw density giving every sample step the same initial opacity, wherever the space makes steps
        longer: in a contracted shell a step stands for a long stretch of ray, and a uniform density there
        would start (and, behind opaque surfaces no gradient reaches, stay) occupied. The correction stops at
        MAX_INIT_STRETCH, so that the outermost cells can still learn in a few hundred steps."""
        g = grid.bricks.slot_vertices().double() * grid.cell_size - 1
        stretch = space.world_step_scale(g) / space.world_step_scale(torch.zeros(1, 3)).double()
        sigma = self.activate(torch.zeros((), dtype=torch.float64)) / stretch.clamp_max(MAX_INIT_STRETCH)
        return self.activate.inverse(sigma).float()

    # ---- queries --------------------------------------------------------------------------------------------
    def lookup(self, g: torch.Tensor, cells: CellPoints | None = None) -> Lookup:
        """The estimator's bricks are the grid's, so `cells` are the grid's own cells of the points: the grid reads
        their stencils from them (the detail level looks its up)."""
        return tuple(t for grid in self.grids() for t in grid.stencil(g, cells if grid is self.grid else None))

    def density(self, lookup: Lookup) -> torch.Tensor:
        raw = self.grid.density_at(*lookup[:2])
        if len(lookup) > 2:
            raw = plus_detail(raw, self.detail.density_at, *lookup[2:])
        return self.activate(raw)

    def color(self, lookup: Lookup, dirs: torch.Tensor, amp_dtype: torch.dtype | None = None,
              rays: torch.Tensor | None = None) -> torch.Tensor:
        features = self.grid.features_at(*lookup[:2])
        if len(lookup) > 2:
            features = plus_detail(features, self.detail.features_at, *lookup[2:])
        return self.decoder(features, dirs, amp_dtype, rays)

    @torch.no_grad()
    def vertex_density(self) -> torch.Tensor:
        """sigma (V,) at the grid's vertices: each row's own density, plus the detail level's at the same point
        where its bricks hold that vertex (a vertex of the grid is one of the finer level's). Rows beyond the grid's
        last vertex layer (a brick's overhang past R) name no vertex and hold whatever their row holds."""
        raw = self.grid.density
        if self.detail is not None and self.detail.num_bricks:
            scale = self.detail.resolution // self.grid.resolution
            vertices = (self.grid.bricks.slot_vertices() * scale).clamp_max(self.detail.resolution)
            rows = self.detail.bricks.vertex_slots(vertices)
            raw = raw + torch.where(rows >= 0, self.detail.density[rows.clamp_min(0)], 0.0)
        return self.activate(raw)

    # ---- training -------------------------------------------------------------------------------------------
    def param_groups(self, optim) -> list[dict]:
        groups = [
            {"name": "grid", "params": [self.grid.density, self.grid.features], "lr": optim.lr_grid},
            {"name": "decoder", "params": list(self.decoder.parameters()), "lr": optim.lr_decoder},
        ]
        if self.detail is not None:
            groups.append({"name": "detail", "params": [self.detail.density, self.detail.features],
                           "lr": optim.lr_grid})
        return groups

    def regularization(self, optim, generator: torch.Generator) -> torch.Tensor | float:
        """Total variation of the grid's raw density and features on `tv_vertices` vertices drawn from the rows
        this step's samples read (where the photos look, in proportion to how often; `tv_rows`), the rows random
        real cells start at when no samples were read through its row space. The detail level is left out: it
        holds what the grid is too coarse for, which a smoothness term on its own rows would take back (and the
        term was half the level's cost a step)."""
        if not (optim.tv_density or optim.tv_features):
            return 0.0
        rows = tv_rows(self.grid)
        pick = torch.randint(0, len(rows), (optim.tv_vertices,), generator=generator, device=generator.device)
        return total_variation(self.grid, rows[pick.to(rows.device)], optim.tv_density, optim.tv_features)

    def grids(self) -> list[SparseVoxelGrid]:
        """The grid, then the detail level once it has bricks: the levels a Lookup reads, in its order."""
        return [self.grid] if self.detail is None or not self.detail.num_bricks else [self.grid, self.detail]

    def growable(self) -> SparseVoxelGrid | None:
        return self.detail

    @contextlib.contextmanager
    def row_spaces(self) -> Iterator[list[RowSpace]]:
        """A row space per grid level: its density and features, a row per vertex, read at the samples' stencils
        and the total variation's vertex pairs."""
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(grid.row_space_open()) for grid in self.grids()]

    def brick_modules(self) -> list[BrickModule]:
        """The grid: its density and features are rows of the estimator's bricks."""
        return [self.grid]

    # ---- state ----------------------------------------------------------------------------------------------
    @classmethod
    def restore(cls, state: dict, space: Space) -> "SparseVoxelField":
        """The grid's shape (and the detail level's) comes from its saved bricks and resolution."""
        tensors = {k: v.cpu() for k, v in state["tensors"].items()}
        levels = {}
        for name in ("grid", "detail"):
            level = {k.removeprefix(f"{name}."): v for k, v in tensors.items() if k.startswith(f"{name}.")}
            if level:
                levels[name] = SparseVoxelGrid.from_state_dict(level, state[f"{name}_resolution"])
        field = cls(saved_options(cls.Config, state["config"]), state["resolution"], space, **levels)
        field.decoder.load_state_dict({k.removeprefix("decoder."): v for k, v in tensors.items()
                                       if k.startswith("decoder.")})
        return field

    def state(self) -> dict:
        return {**super().state(), **{f"{name}_resolution": getattr(self, name).resolution
                                      for name in ("grid", "detail") if getattr(self, name) is not None}}


def plus_detail(base: torch.Tensor, read: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], rows: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
    """`base` (N, ...) plus the detail level's interpolation `read(rows, weights)` (`density_at` or `features_at`).

    The level covers a small share of the space, and a sample whose stencil holds none of its vertices (all weights
    zero) adds nothing: on a CPU only the samples inside are read (a `nonzero`: the gather, its backward and the
    row space's notes shrink with them); on CUDA every sample is (a `nonzero` would make the host wait a step).
    """
    if base.is_cuda:
        return base + read(rows, weights)
    inside = torch.nonzero(weights.any(-1)).squeeze(-1)
    return base.index_add(0, inside, read(take_rows(rows, inside), take_rows(weights, inside)))
