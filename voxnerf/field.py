"""The radiance field: a sparse voxel grid of density and features, decoded to color by a small MLP."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from voxnerf.sh import sh_encode
from voxnerf.space import Space
from voxnerf.sparse_grid import SparseVoxelGrid

MAX_INIT_STRETCH = 1000.0  # see RadianceField._initial_density


@dataclass
class FieldConfig:
    resolution: int = 32  # cells per axis of the first (coarse) level; multiple of 8
    feature_dim: int = 12  # feature channels per vertex
    hidden: int = 64  # width of the color MLP's hidden layers
    layers: int = 2  # hidden layers of the color MLP
    sh_degree: int = 2  # spherical-harmonics band of the view-direction encoding (0-2)
    alpha_init: float = 1e-3  # opacity of one first-level cell at start (low initial density trains well, DVGO)
    density_scale: float = 128.0  # sigma per unit-box length for one unit of activated density (~1/voxel at 256^3)
    feature_std: float = 0.1  # std of the random initial features


class ColorDecoder(nn.Module):
    """features + SH(view dir) -> RGB in [0, 1]; the first 3 feature channels are a diffuse base color logit."""

    def __init__(self, feature_dim: int, hidden: int, layers: int, sh_degree: int):
        super().__init__()
        self.sh_degree = sh_degree
        dims = [feature_dim + (sh_degree + 1) ** 2] + [hidden] * layers
        blocks = []
        for a, b in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.mlp = nn.Sequential(*blocks, nn.Linear(dims[-1], 3))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    def forward(self, features: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
        """features (N, C), unit dirs (N, 3) -> rgb (N, 3) float32."""
        h = torch.cat([features, sh_encode(dirs, self.sh_degree).to(features.dtype)], -1)
        logits = features[:, :3].float() + self.mlp(h).float()
        return torch.sigmoid(logits)


class RadianceField(nn.Module):
    """sigma(x) from the grid's density channel, rgb(x, d) from its features through the decoder.

    Density is activated after interpolation (softplus(raw + shift), DVGO's "post-activation"), so one voxel can
    hold a sharp surface. `shift` makes a zero raw density give `alpha_init` across one first-level cell.
    Raw density counts in units of `density_scale` (about one per fine voxel), so Adam's per-step moves of the
    order of the learning rate make a surface opaque in tens of steps, not thousands.
    `space` says where the grid lies in the unit box (voxnerf.space); the grid stores the field in grid
    coordinates, and `density` / `color` take unit-box points.
    """

    def __init__(self, cfg: FieldConfig, grid: SparseVoxelGrid | None = None, seed: int = 0,
                 space: Space | None = None):
        super().__init__()
        self.cfg = cfg
        self.space = space or Space()
        cell = 2.0 / cfg.resolution
        self.shift = math.log(math.expm1(-math.log1p(-cfg.alpha_init) / (cell * cfg.density_scale)))
        gen = torch.Generator().manual_seed(seed)
        if grid is None:
            grid = SparseVoxelGrid.dense(cfg.resolution, cfg.feature_dim, 0.0, cfg.feature_std, gen)
            grid.density.data = self._initial_density(grid)
        self.grid = grid
        with torch.random.fork_rng(devices=[]):  # the seed, not the global random state, decides the init
            torch.manual_seed(seed)
            self.decoder = ColorDecoder(cfg.feature_dim, cfg.hidden, cfg.layers, cfg.sh_degree)

    def _initial_density(self, grid: SparseVoxelGrid) -> torch.Tensor:
        """(V,) raw density giving every sample step the same initial opacity, wherever the space makes steps
        longer: in a contracted shell a step stands for a long stretch of ray, and a uniform density there
        would start (and, behind opaque surfaces no gradient reaches, stay) occupied. The correction stops at
        MAX_INIT_STRETCH, so that the outermost cells can still learn in a few hundred steps."""
        g = grid.layout.slot_vertices().double() * grid.cell_size - 1
        stretch = self.space.world_step_scale(g) / self.space.world_step_scale(torch.zeros(1, 3)).double()
        sigma = F.softplus(torch.tensor(self.shift, dtype=torch.float64)) / stretch.clamp_max(MAX_INIT_STRETCH)
        return (torch.log(torch.expm1(sigma)) - self.shift).float()

    def activate(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw grid density -> sigma >= 0 (per unit of the ray's length: unit-box, or NDC in an NDC space)."""
        return F.softplus(raw + self.shift) * self.cfg.density_scale

    def density(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points -> (N,) sigma, float32."""
        return self.activate(self.grid.density_at(*self.grid.stencil(self.space.to_grid(x))))

    def color(self, x: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
        """(N, 3) unit-box points and unit directions -> (N, 3) rgb."""
        return self.color_at(*self.grid.stencil(self.space.to_grid(x)), dirs)

    def density_at(self, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """sigma (N,) from a grid stencil (rows, weights), each (N, 8)."""
        return self.activate(self.grid.density_at(rows, weights))

    def color_at(self, rows: torch.Tensor, weights: torch.Tensor, dirs: torch.Tensor,
                 amp_dtype: torch.dtype | None = None) -> torch.Tensor:
        """rgb (N, 3) from a grid stencil (rows, weights), each (N, 8), and unit directions (N, 3).

        Only the MLP runs under autocast (`amp_dtype`): the feature gather stays FP32, so the feature table is
        never cast (a (V, C) copy per call) and features keep full precision.
        """
        features = self.grid.features_at(rows, weights)
        autocast = torch.autocast(features.device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
        with autocast:
            return self.decoder(features, dirs)
