"""The occupancy estimator: its statistic, its floor, its refinement, and that it needs no particular field."""

import torch
from test_grid import sphere_model, strategy

from voxnerf.data.space import Box
from voxnerf.fields.bricks import CORNERS
from voxnerf.fields.dense import DenseGridConfig, DenseGridField
from voxnerf.render.occupancy import OccupancyConfig, OccupancyGrid
from voxnerf.train.strategy import refine


def test_occupancy_never_prunes_the_grid_empty():
    model = sphere_model(32)
    strat = strategy()
    with torch.no_grad():
        model.field.grid.density.fill_(-30.0)  # nothing anywhere reaches the threshold
    strat.update_occupancy(model)
    real = int(model.estimator.bricks.real_cells().sum())
    assert int(model.estimator.occupied.sum()) >= strat.occupancy.min_fraction * real > 0


def test_cell_density_is_the_largest_interpolated_density_in_the_cell_after_every_refinement():
    model = sphere_model(16)
    field, occupancy = model.field, model.estimator
    with torch.no_grad():
        field.grid.density.copy_(torch.randn(len(field.grid.density), generator=torch.Generator().manual_seed(3)))
    for resolution in (16, 32):
        strategy().update_occupancy(model)
        refine(occupancy, resolution, field.brick_modules())
        bricks = occupancy.bricks
        cells = torch.nonzero(bricks.real_cells()).squeeze(-1)
        corners = bricks.slot_vertices()[cells].unsqueeze(1) + CORNERS
        complete = (bricks.vertex_slots(corners) >= 0).all(-1)  # cells with a missing corner brick differ
        near_corners = bricks.slot_vertices()[cells][complete].unsqueeze(1) + CORNERS * 0.998 + 0.001
        x = near_corners.reshape(-1, 3) * occupancy.cell_size - 1  # points just inside each corner
        with torch.no_grad():
            sampled = field.density_at(x).view(-1, 8).amax(-1)
            ours = occupancy.cell_density(field.density_at)[cells][complete]
        assert bool((ours >= sampled - 1e-4).all()), "a point in the cell is denser than the cell's maximum"
        assert torch.allclose(ours, sampled, rtol=2e-2)


def test_shares_of_an_update_combined_by_max_give_the_update_of_one_process():
    """Rank k of n evaluates the k-th run of cells only (zeros elsewhere); the MAX over the ranks that a job's
    reduce_max takes gives every rank the whole statistic, the one a single process computes."""
    model = sphere_model(16)
    with torch.no_grad():
        model.field.grid.density.copy_(torch.randn(len(model.field.grid.density),
                                                   generator=torch.Generator().manual_seed(5)))
    full = model.estimator.cell_density(model.field.density_at)
    n = 3
    parts = [model.estimator.cell_density(model.field.density_at, slice(k * len(full) // n, (k + 1) * len(full) // n))
             for k in range(n)]
    assert all(int((part > 0).sum()) < int((full > 0).sum()) for part in parts)  # each rank does a part only
    assert torch.equal(torch.stack(parts).amax(0), full)
    seen = {}
    for k in (None, 1):  # one process, then rank 1 of 3: what each hands to reduce_max
        grid = OccupancyGrid(16, Box())
        grid.update(model.field.density_at, OccupancyConfig(), 0.5, lambda a, k=k: seen.setdefault(k, a),
                    (0, 1) if k is None else (k, n))
    run = slice(len(full) // n, 2 * len(full) // n)
    assert torch.equal(seen[1][run], seen[None][run]) and seen[1][run].any()
    assert not seen[1][:run.start].any() and not seen[1][run.stop:].any()


def test_refinement_keeps_the_occupied_cells_and_their_children_only():
    occupancy = OccupancyGrid(16, Box())
    centers = occupancy.bricks.cell_centers()
    occupancy.set_occupied(centers.norm(dim=-1) < 0.5)
    before = occupancy.occupied_cells()
    refine(occupancy, 32)
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


def test_the_occupied_box_bounds_the_occupied_cells_on_sparse_bricks():
    """The box the march clips rays to is the extent of the occupied cells' coordinates (computed per brick
    layer), after a refinement leaves only some bricks, and the whole cube when no cell is occupied."""
    model = sphere_model(16)
    strategy().update_occupancy(model)
    refine(model.estimator, 32, model.field.brick_modules())
    estimator = model.estimator
    gen = torch.Generator().manual_seed(4)
    for share in (0.001, 0.3):
        occupied = torch.rand(len(estimator.occupied), generator=gen) < share
        estimator.set_occupied(occupied)
        cells = estimator.bricks.slot_vertices()[estimator.occupied].float()
        expected = torch.stack([cells.amin(0), cells.amax(0) + 1]) * estimator.cell_size - 1
        assert len(cells) and torch.equal(estimator.bbox, expected)
    estimator.set_occupied(torch.zeros_like(estimator.occupied))
    assert torch.equal(estimator.bbox, torch.tensor([[-1.0] * 3, [1.0] * 3]))
