"""The sparse voxel grid and its field: lookup, interpolation and its gradients, subdivision, pruning, memory,
optimizer state."""

import pytest
import torch
import torch.nn.functional as F

import voxnerf.scenes as vs
from voxnerf.data.space import Box
from voxnerf.fields.bricks import BRICK_VOLUME, CORNERS, BrickIndex, pruned, subdivided
from voxnerf.fields.interpolate import weighted_row_sum
from voxnerf.fields.sparse_grid import SparseVoxelGrid
from voxnerf.fields.total_variation import total_variation
from voxnerf.fields.voxels import SparseVoxelConfig, SparseVoxelField
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyConfig, OccupancyGrid
from voxnerf.run.config import Level
from voxnerf.train.strategy import TopologyStrategy, change_bricks, refine


def random_grid(resolution=16, channels=3, seed=0) -> SparseVoxelGrid:
    gen = torch.Generator().manual_seed(seed)
    grid = SparseVoxelGrid.dense(resolution, channels, 0.0, 1.0, generator=gen)
    with torch.no_grad():
        grid.density.copy_(torch.randn(len(grid.density), generator=gen))
    return grid


def dense_volume(grid: SparseVoxelGrid, table: torch.Tensor) -> torch.Tensor:
    """(C, R+1, R+1, R+1) vertex values of a fully allocated grid, for torch's own trilinear sampler."""
    r = grid.resolution
    v = torch.stack(torch.meshgrid(*[torch.arange(r + 1)] * 3, indexing="ij"), -1).reshape(-1, 3)
    values = table.detach()[grid.bricks.vertex_slots(v)]
    return values.reshape(r + 1, r + 1, r + 1, -1).permute(3, 0, 1, 2)


def grid_sample_reference(volume: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Trilinear values (N, C) of a (C, D, H, W) volume indexed [x, y, z] at unit-box points (N, 3)."""
    coords = x[:, [2, 1, 0]].view(1, -1, 1, 1, 3)  # grid_sample reads (x, y, z) as (W, H, D)
    return F.grid_sample(volume[None], coords, align_corners=True).view(volume.shape[0], -1).T


def test_interpolation_matches_torch_trilinear_sampling():
    grid = random_grid()
    x = torch.rand(3000, 3) * 2 - 1
    rows, w = grid.stencil(x)
    ref_density = grid_sample_reference(dense_volume(grid, grid.density[:, None]), x)[:, 0]
    ref_features = grid_sample_reference(dense_volume(grid, grid.features), x)
    assert torch.allclose(grid.density_at(rows, w), ref_density, atol=1e-5)
    assert torch.allclose(grid.features_at(rows, w), ref_features, atol=1e-5)


def test_interpolation_gradients_match_plain_autograd():
    grid = random_grid(channels=4)
    x = torch.rand(500, 3) * 2 - 1
    rows, w = grid.stencil(x)
    upstream = torch.randn(500, 4)
    (grid.features_at(rows, w) * upstream).sum().backward()
    ours = grid.features.grad.clone()
    table = grid.features.detach().clone().requires_grad_()
    ((table[rows] * w[..., None]).sum(1) * upstream).sum().backward()
    assert torch.allclose(ours, table.grad, atol=1e-5)
    assert ours.abs().sum() > 0


def test_missing_bricks_contribute_nothing():
    grid = random_grid(16)
    keep = grid.bricks.slot_vertices()[:, 0] < 4  # cells with x index < 4: only brick 0 stays along x
    change_bricks([grid], pruned(grid.bricks, keep))
    far_side = torch.tensor([[0.9, 0.0, 0.0]])
    rows, w = grid.stencil(far_side)
    assert float(w.sum()) == 0.0


def test_a_point_reads_every_allocated_corner_of_its_cell_also_where_the_cell_has_no_row():
    grid = random_grid(32)
    keep = grid.bricks.slot_vertices()[:, 0] >= 12  # cells with x >= 12: the bricks below x = 8 are freed
    change_bricks([grid], pruned(grid.bricks, keep))
    bricks = grid.bricks
    x = torch.rand(5000, 3) * 2 - 1
    rows, w = grid.stencil(x)
    p = bricks.vertex_coords(x)
    cell = p.floor().clamp(0, bricks.resolution - 1)
    corner_rows = bricks.vertex_slots(cell.long().unsqueeze(1) + CORNERS)  # (N, 8), -1 where absent
    f = (p - cell).unsqueeze(1)
    expected = torch.where(CORNERS.bool(), f, 1 - f).prod(-1) * (corner_rows >= 0)
    assert torch.equal(rows, corner_rows.clamp_min(0))
    assert torch.allclose(w, expected, atol=1e-6)
    # the layer of cells just below the first kept brick (x = 7): corners in that brick, no row of their own
    rowless = (corner_rows[:, 0] < 0) & (corner_rows >= 0).any(-1)
    assert rowless.sum() > 0 and float(w[rowless].sum()) > 0


def test_axis_stencils_are_the_next_vertex_along_each_axis_also_on_the_grid_faces():
    grid = random_grid(32)
    change_bricks([grid], pruned(grid.bricks, grid.bricks.slot_vertices()[:, 0] >= 12))  # no bricks below x = 8
    bricks = grid.bricks
    rows = torch.arange(bricks.num_rows)
    v = bricks.slot_vertices()
    stencils = bricks.axis_stencils(rows)
    assert torch.equal(stencils[:, 0], rows)
    for axis in range(3):
        step = torch.zeros(3, dtype=torch.long)
        step[axis] = 1
        n = v + step
        expected = torch.where((n <= 32).all(-1), bricks.vertex_slots(n.clamp_max(32)), -1)  # rows past R: none
        assert (expected < 0).any()  # some missing: the vertex stands in for them
        assert torch.equal(stencils[:, 1 + axis], torch.where(expected >= 0, expected, rows))
    faces = (v == 32).any(-1)  # the far faces: no cell of their own, neighbours along the face all the same
    assert faces.sum() > 0 and (stencils[faces, 1:] != rows[faces, None]).any()


def test_subdivision_preserves_the_field():
    grid = random_grid(16)
    x = torch.rand(2000, 3) * 2 - 1
    before = grid.density_at(*grid.stencil(x)).detach(), grid.features_at(*grid.stencil(x)).detach()
    change_bricks([grid], subdivided(grid.bricks, torch.ones(len(grid.density), dtype=torch.bool)))
    assert grid.resolution == 32
    after = grid.density_at(*grid.stencil(x)).detach(), grid.features_at(*grid.stencil(x)).detach()
    assert torch.allclose(before[0], after[0], atol=1e-5)
    assert torch.allclose(before[1], after[1], atol=1e-5)


def sphere_model(resolution: int) -> Model:
    """A sparse voxel field whose grid holds the toy sphere's density (exact at the vertices), with an all-occupied
    estimator at the same resolution."""
    field = SparseVoxelField(SparseVoxelConfig(feature_dim=3), resolution, Box())
    grid = field.grid
    x = grid.bricks.slot_vertices().float() / resolution * 2 - 1
    sigma = vs.get("sphere").density(x).clamp_min(1e-6)
    raw = torch.log(torch.expm1(sigma / field.cfg.density_scale).clamp_min(1e-30)) - field.activate.shift
    with torch.no_grad():
        grid.density.copy_(raw)
    return Model(field, OccupancyGrid(resolution, Box()))


def strategy(threshold=1e-2) -> TopologyStrategy:
    return TopologyStrategy(OccupancyConfig(warmup_steps=0, threshold=threshold), [Level(1.0, 64, 1.0)], 0.5)


def test_pruning_keeps_every_voxel_the_sphere_touches():
    model = sphere_model(32)
    strategy().update_occupancy(model)
    before = model.field.grid.num_bricks
    refine(model.estimator, 64, model.field.brick_modules())
    assert model.field.grid.num_bricks < 8 * before
    truth = vs.get("sphere").occupancy(64)
    centers = (torch.nonzero(truth).float() + 0.5) / 64 * 2 - 1
    assert bool(model.estimator.is_occupied(centers).all()), "a cell the sphere touches was pruned"
    rows, w = model.field.grid.stencil(centers)
    assert bool((w.sum(-1) > 0.999).all()), "the grid freed a brick around a cell the sphere touches"
    occupied = int(model.estimator.occupied.sum())
    assert occupied < 1.6 * int(truth.sum()), "pruning kept far more than the sphere"


def test_memory_grows_with_occupied_volume_not_resolution_cubed():
    grid = sphere_model(32).field.grid
    rows = []
    for _ in range(3):  # 32 -> 64 -> 128 -> 256
        # keep only the shell: cells near the sphere's surface
        x = grid.bricks.slot_vertices().float() / grid.resolution * 2 - 1
        shell = vs.get("sphere").sdf(x + grid.cell_size / 2).abs() < 2 * grid.cell_size
        kept = pruned(grid.bricks, shell)
        change_bricks([grid], kept)
        change_bricks([grid], subdivided(grid.bricks, kept.inherit(shell)))
        rows.append(len(grid.density))
    growth = [b / a for a, b in zip(rows, rows[1:])]
    assert all(g < 5.5 for g in growth), f"rows grew by {growth} per doubling (a surface should give ~4x, not 8x)"
    assert rows[-1] * 4 < 257**3, "the 256^3 grid should hold far fewer rows than a dense one"


def test_brick_index_reaches_1024_cubed_in_megabytes():
    coords = torch.tensor([[0, 0, 0], [64, 64, 64], [128, 128, 128]])
    bricks = BrickIndex(1024, coords)
    assert bricks.index.numel() * bricks.index.element_size() < 10 * 2**20
    v = torch.tensor([[513, 515, 519], [1024, 1024, 1024], [8, 0, 0]])
    slots = bricks.vertex_slots(v)
    assert slots.tolist() == [1 * BRICK_VOLUME + (1 * 8 + 3) * 8 + 7, 2 * BRICK_VOLUME, -1]


def test_topology_changes_carry_adam_moments_with_their_vertices():
    field = sphere_model(16).field
    opt = torch.optim.Adam([field.grid.density, field.grid.features], lr=0.1)
    x = torch.rand(4000, 3) * 1.6 - 0.8
    field.density_at(x).sum().backward()
    opt.step()
    moment = opt.state[field.grid.density]["exp_avg"]
    moment_field = dense_volume(field.grid, moment[:, None])
    everywhere = torch.ones(len(field.grid.density), dtype=torch.bool)
    change_bricks([field.grid], subdivided(field.grid.bricks, everywhere), opt)
    state = opt.state[field.grid.density]
    assert opt.param_groups[0]["params"][0] is field.grid.density
    assert state["exp_avg"].shape == field.grid.density.shape
    # new vertices carry the interpolated moments of their parents
    probe = torch.rand(500, 3) * 1.6 - 0.8
    expected = grid_sample_reference(moment_field, probe)[:, 0]
    got = weighted_row_sum(state["exp_avg"], *field.grid.stencil(probe))
    assert torch.allclose(got, expected, atol=1e-6)
    field.density_at(x).sum().backward()
    opt.step()  # and the optimizer keeps working on the new parameters


def test_total_variation_in_training_draws_its_vertices_where_the_step_read():
    """With the row spaces open (a training step), TV's gradient lands only on read rows and their +x/+y/+z
    neighbours: where the step's samples are, not on random cells of the whole grid."""
    from voxnerf.run.config import OptimConfig

    field = SparseVoxelField(SparseVoxelConfig(feature_dim=3), 16, Box())
    with torch.no_grad():
        field.grid.density.copy_(torch.randn(len(field.grid.density), generator=torch.Generator().manual_seed(0)))
    optim = OptimConfig(tv_density=1.0, tv_features=1.0, tv_vertices=512)
    x = torch.rand(4, 3) * 0.2 - 0.1  # a few points near the centre of the unit box
    with field.row_spaces() as (space,):
        field.density(field.lookup(x)).sum().backward()  # the step's read: 32 stencil rows
        read = torch.unique(torch.cat(space.rows))
        field.regularization(optim, torch.Generator().manual_seed(1)).backward()
    touched = torch.nonzero(field.grid.density.grad).squeeze(-1)
    v = field.grid.bricks.slot_vertices()[read]
    near = field.grid.bricks.vertex_slots((v[:, None] + torch.cat([torch.zeros(1, 3, dtype=torch.long),
                                                                  torch.eye(3, dtype=torch.long)])).reshape(-1, 3))
    assert len(read) <= 32 and len(touched) > len(read) // 2
    assert set(touched.tolist()) <= set(near[near >= 0].tolist())
    assert len(field.grid.bricks.real_cell_rows()) > 50 * len(touched)


def test_a_row_space_gather_adds_the_same_gradient_as_an_index_at_the_rows_read():
    """`RowSpace.gather` keeps its rows' gradient apart and adds it at close; beside a declared read of the same
    table, the tables' gradients are those of plain indexing (repeated rows summed)."""
    grid = random_grid(16)
    read = torch.randint(0, len(grid.density), (40,), generator=torch.Generator().manual_seed(2))
    few = torch.tensor([[3, 7, 7], [7, 11, 2]])  # (2, 3): a row twice, a row also read above

    def loss(features, gathered):
        return (features ** 2).sum() + (gathered["features"] * torch.arange(1.0, 4.0)).sum() \
            + gathered["density"].pow(3).sum()

    with grid.row_space_open() as space:
        loss(space.interpolate("features", read.unsqueeze(-1), torch.ones(40, 1)), space.gather(few)).backward()
    assert space.rows[-1].tolist() == few.reshape(-1).tolist()
    expected = random_grid(16)
    loss(expected.features[read], {"density": expected.density[few], "features": expected.features[few]}).backward()
    assert torch.allclose(grid.features.grad, expected.features.grad)
    assert torch.allclose(grid.density.grad, expected.density.grad)  # only the gather read density


def test_a_grid_keeps_its_gradient_tables_from_step_to_step_and_zeroes_them():
    """The row space's gradient tables are kept and zeroed rather than allocated at every step (a table of a
    million rows would fault its pages in again each time); gradients still accumulate when .grad is not reset."""
    grid = random_grid(16, channels=4)
    rows, w = grid.stencil(torch.rand(300, 3) * 2 - 1)

    def step():
        with grid.row_space_open():
            (grid.features_at(rows, w).pow(2).sum() + grid.density_at(rows, w).pow(2).sum()).backward()

    step()
    kept, expected = grid.features.grad, (grid.features.grad.clone(), grid.density.grad.clone())
    assert expected[0].abs().sum() > 0 and expected[1].abs().sum() > 0
    grid.features.grad = grid.density.grad = None  # what the trainer's zero_grad(set_to_none=True) does
    step()
    assert grid.features.grad is kept  # the same table, zeroed before the second step's gradient
    assert torch.equal(grid.features.grad, expected[0]) and torch.equal(grid.density.grad, expected[1])
    step()  # .grad not reset: the two steps' gradients add up, as autograd's would
    assert torch.allclose(grid.features.grad, 2 * expected[0]) and torch.allclose(grid.density.grad, 2 * expected[1])


def test_total_variation_is_zero_for_a_constant_grid_and_pulls_neighbours_together():
    grid = random_grid(16)
    rows = torch.arange(0, len(grid.density), 5)
    tv_density, tv_features = total_variation(grid, rows, 1.0, 0.0), total_variation(grid, rows, 0.0, 1.0)
    assert tv_density.item() > 0.5 and tv_features.item() > 0.5  # unit-variance noise: E[(a - b)^2] = 2
    assert total_variation(grid, rows, 2.0, 3.0).item() == pytest.approx(2 * tv_density.item() + 3 * tv_features.item())
    (tv_density + tv_features).backward()
    with torch.no_grad():
        grid.density -= 0.1 * grid.density.grad / grid.density.grad.abs().max()
    assert total_variation(grid, rows, 1.0, 0.0).item() < tv_density.item()
    with torch.no_grad():
        grid.density.fill_(3.0)
        grid.features.fill_(-1.0)
    assert total_variation(grid, rows).item() == 0.0


@pytest.mark.parametrize("weights", [(0.7, 0.3), (0.0, 0.3), (0.7, 0.0)])
def test_the_written_out_squared_differences_gradient_is_autograd_s(weights):
    from voxnerf.fields.total_variation import _SquaredDifferences

    g = torch.Generator().manual_seed(2)
    d = torch.randn(40, 4, dtype=torch.float64, generator=g, requires_grad=True)
    f = torch.randn(40, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    pairs = torch.tensor(37.0, dtype=torch.float64)
    ours = _SquaredDifferences.apply(d, f, pairs, *weights)
    theirs = sum(w * (x[:, :1] - x[:, 1:]).pow(2).sum() for x, w in zip((d, f), weights)) / pairs
    torch.testing.assert_close(ours, theirs)
    for x, w in zip((d, f), weights):
        if w:
            torch.testing.assert_close(torch.autograd.grad(3 * ours, x, retain_graph=True)[0],
                                       torch.autograd.grad(3 * theirs, x, retain_graph=True)[0])
