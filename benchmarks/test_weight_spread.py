"""The self-check of benchmarks/weight_spread.py (run it with `python -m pytest benchmarks/test_weight_spread.py`):
the depth spread of a ray's compositing weights against closed forms, on slabs of known density."""

import math

import pytest
import torch
from weight_spread import weight_spread

from voxnerf.data.space import Box
from voxnerf.fields.voxels import SparseVoxelConfig, SparseVoxelField
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyGrid
from voxnerf.render.renderer import RenderConfig

EXACT = RenderConfig(alpha_min=0.0, transmittance_min=0.0, color_weight_min=0.0)


def slab_model(sigma: float, lo: float, hi: float, resolution: int = 64) -> Model:
    """A sparse voxel field of density `sigma` (per unit-box length) where lo <= x <= hi and none elsewhere."""
    field = SparseVoxelField(SparseVoxelConfig(feature_dim=3), resolution, Box())
    x = field.grid.bricks.slot_vertices()[:, 0].float() / resolution * 2 - 1
    density = torch.where((x >= lo - 1e-6) & (x <= hi + 1e-6), sigma, 1e-9)
    with torch.no_grad():
        field.grid.density.copy_(field.activate.inverse(density.double()).float())
    return Model(field, OccupancyGrid(resolution, Box()))


def test_weight_spread_of_a_fog_slab_is_its_beer_lambert_depth_spread():
    resolution, lo, hi, sigma = 64, -0.25, 0.25, 1.4
    origins = torch.tensor([[-2.0, y, z] for y in (-0.3, 0.0, 0.41) for z in (-0.2, 0.33)])
    dirs = torch.tensor([[1.0, 0.0, 0.0]]).expand_as(origins)
    spread = weight_spread(slab_model(sigma, lo, hi, resolution), origins, dirs, EXACT)
    length = hi - lo  # weights fall as exp(-sigma t) over the slab: a truncated exponential's standard deviation
    growth = math.exp(sigma * length)
    variance = 1 / sigma**2 - length**2 * growth / (growth - 1) ** 2
    cell = 2 / resolution
    assert spread.tolist() == pytest.approx([math.sqrt(variance) / cell] * len(origins), abs=0.3)


def test_weight_spread_of_an_opaque_wall_is_under_a_cell():
    origins = torch.tensor([[-2.0, 0.1, -0.2], [-2.0, -0.5, 0.4]])
    dirs = torch.tensor([[1.0, 0.0, 0.0]]).expand_as(origins)
    spread = weight_spread(slab_model(5000.0, 0.0, 0.5), origins, dirs, EXACT)
    assert (spread < 0.5).all()
