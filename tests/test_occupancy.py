"""The occupancy estimator: its statistic, its floor, its refinement, and that it needs no particular field."""

import torch

from voxnerf.config import OccupancyConfig
from voxnerf.fields.dense import DenseGridConfig, DenseGridField
from voxnerf.occupancy import OccupancyGrid
from voxnerf.space import Box
from voxnerf.sparse_grid import CORNERS

from test_grid import sphere_model, strategy


def test_occupancy_never_prunes_the_grid_empty():
    model = sphere_model(32)
    strat = strategy()
    with torch.no_grad():
        model.field.grid.density.fill_(-30.0)  # nothing anywhere reaches the threshold
    strat.update_occupancy(model)
    real = int(model.estimator.layout.real_cells().sum())
    assert int(model.estimator.occupied.sum()) >= strat.occupancy.min_fraction * real > 0


def test_cell_density_is_the_largest_interpolated_density_in_the_cell_after_every_refinement():
    model = sphere_model(16)
    field, occupancy = model.field, model.estimator
    with torch.no_grad():
        field.grid.density.copy_(torch.randn(len(field.grid.density), generator=torch.Generator().manual_seed(3)))
    for resolution in (16, 32):
        strategy().update_occupancy(model)
        field.refine(resolution, occupancy.is_occupied, None)
        occupancy.refine(resolution)
        layout = occupancy.layout
        cells = torch.nonzero(layout.real_cells()).squeeze(-1)
        corners = layout.slot_vertices()[cells].unsqueeze(1) + CORNERS
        complete = (layout.vertex_slots(corners) >= 0).all(-1)  # cells with a missing corner brick differ
        near_corners = layout.slot_vertices()[cells][complete].unsqueeze(1) + CORNERS * 0.998 + 0.001
        x = near_corners.reshape(-1, 3) * occupancy.cell_size - 1  # points just inside each corner
        with torch.no_grad():
            sampled = field.density_at(x).view(-1, 8).amax(-1)
            ours = occupancy.cell_density(field.density_at)[cells][complete]
        assert bool((ours >= sampled - 1e-4).all()), "a point in the cell is denser than the cell's maximum"
        assert torch.allclose(ours, sampled, rtol=2e-2)


def test_refinement_keeps_the_occupied_cells_and_their_children_only():
    occupancy = OccupancyGrid(16, Box())
    centers = occupancy.layout.cell_centers()
    occupancy.set_occupied(centers.norm(dim=-1) < 0.5)
    before = occupancy.occupied_cells()
    occupancy.refine(32)
    assert occupancy.resolution == 32
    after = occupancy.occupied_cells()
    expected = (2 * before.unsqueeze(1) + CORNERS).reshape(-1, 3)
    assert sorted(map(tuple, after.tolist())) == sorted(map(tuple, expected.tolist()))


def test_the_estimator_asks_any_field_for_density():
    field = DenseGridField(DenseGridConfig(vertices=9, feature_dim=3), 16, Box())
    with torch.no_grad():
        field.density_volume.fill_(-30.0)
        field.density_volume[..., 4, 4, 4] = 5.0  # one dense vertex at the center
    occupancy = OccupancyGrid(16, Box())
    occupancy.update(field.density_at, OccupancyConfig(threshold=1e-2, min_fraction=0.0), step_ratio=0.5)
    cells = occupancy.occupied_cells()
    assert 0 < len(cells) <= 64
    assert bool(((cells >= 6) & (cells <= 9)).all()), "only cells around the center vertex are occupied"
