"""The detail level (issue 39 item 2): a finer sparse grid added to the field on the bricks whose cells carry the
largest training gradients, grown by the owner of topology, saved and restored with the run."""

import numpy as np
import pytest
import torch

from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras, look_at
from voxnerf.data.footprint import pixel_footprint
from voxnerf.data.space import Box
from voxnerf.fields.base import field_from_state
from voxnerf.fields.bricks import BRICK, BrickIndex, grown
from voxnerf.fields.voxels import SparseVoxelConfig, SparseVoxelField, plus_detail
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyConfig, OccupancyGrid
from voxnerf.run.config import Level, load_config
from voxnerf.train.strategy import FixedPointsDensity, TopologyStrategy
from voxnerf.train.trainer import Trainer

from test_train import TOY_CONFIG, sphere_scene  # noqa: F401 - the module's toy scene fixture


def test_grown_bricks_keep_the_old_rows_and_start_the_new_ones_at_zero():
    old = BrickIndex(32, torch.tensor([[0, 0, 0], [1, 2, 3]]))
    table = torch.arange(old.num_rows * 2, dtype=torch.float32).view(-1, 2) + 1
    change = grown(old, 32, torch.tensor([[1, 2, 3], [3, 3, 3], [0, 1, 0]]))  # one already there
    assert len(change.bricks.brick_coords) == 4
    new = change.interpolate(table)
    vertices = old.slot_vertices()
    assert torch.equal(new[change.bricks.vertex_slots(vertices)], table)  # every old vertex keeps its values
    fresh = change.bricks.vertex_slots(torch.tensor([[24, 24, 24], [0, 8, 0]]))
    assert (fresh >= 0).all() and not new[fresh].any()
    flags = change.inherit(torch.ones(old.num_rows, dtype=torch.bool))
    assert flags.sum() == old.num_rows and len(flags) == change.bricks.num_rows
    # an empty grid grows at any resolution; a grid with bricks only at its own
    assert grown(BrickIndex(16, torch.zeros(0, 3, dtype=torch.int64)), 64, torch.tensor([[7, 7, 7]])).bricks.resolution == 64
    with pytest.raises(ValueError):
        grown(old, 64, torch.tensor([[0, 0, 0]]))


def detail_model(share: float = 0.5) -> Model:
    """A 16^3 field with random density and features, an empty detail level, and an all-occupied estimator."""
    gen = torch.Generator().manual_seed(0)
    field = SparseVoxelField(SparseVoxelConfig(feature_dim=4, detail_share=share), 16, Box())
    with torch.no_grad():
        field.grid.density.copy_(torch.randn(len(field.grid.density), generator=gen))
        field.grid.features.copy_(torch.randn(field.grid.features.shape, generator=gen))
    return Model(field, OccupancyGrid(16, Box()))


def grow_two_bricks(field: SparseVoxelField) -> None:
    """Give `field`'s detail level two bricks at 32^3 with random density and features (4 channels)."""
    gen = torch.Generator().manual_seed(1)
    change = grown(field.detail.bricks, 32, torch.tensor([[1, 1, 1], [2, 1, 3]]))
    field.detail.density = torch.nn.Parameter(torch.randn(change.bricks.num_rows, generator=gen))
    field.detail.features = torch.nn.Parameter(torch.randn(change.bricks.num_rows, 4, generator=gen))
    field.detail.set_bricks(change.bricks)


def test_the_detail_level_grows_where_the_gradients_are_and_leaves_the_field_as_it_was():
    """Gradients only from points with x > 0.1: every brick of the detail level (32^3, bricks 0.5 wide) lies at
    x >= 0, its rows are `detail_share` of the grid's at most, the field is unchanged (the new level starts at zero),
    and the optimizer holds its tables and trains them from the next step on."""
    model = detail_model(share=0.5)
    field = model.field
    optimizer = torch.optim.Adam([g for group in field.param_groups(load_config(None).optim)
                                  for g in group["params"]], lr=0.05)
    gen = torch.Generator().manual_seed(1)
    points = torch.rand(20000, 3, generator=gen) * 2 - 1
    points[:, 0] = points[:, 0].abs() * 0.9 + 0.1

    def train_step():
        optimizer.zero_grad()
        lookup = field.lookup(points)
        (field.color(lookup, torch.nn.functional.normalize(points, dim=-1)).sum()
         + field.density(lookup).sum()).backward()
        optimizer.step()

    train_step()
    probe = torch.rand(3000, 3, generator=gen) * 2 - 1
    dirs = torch.nn.functional.normalize(torch.randn(3000, 3, generator=gen), dim=-1)
    with torch.no_grad():
        before = field.density_at(probe), field.color_at(probe, dirs)
    TopologyStrategy(OccupancyConfig(), [Level(1.0, 16, 1.0)], 0.5).grow_detail(model, field.detail, optimizer)
    detail = field.detail
    assert detail.resolution == 32 and detail.num_bricks > 0
    assert detail.bricks.num_rows <= 0.5 * model.estimator.bricks.num_rows
    assert (detail.brick_coords[:, 0] * BRICK * 2 / 32 - 1 >= 0).all(), "a detail brick where no gradient was"
    with torch.no_grad():
        after = field.density_at(probe), field.color_at(probe, dirs)
    assert torch.allclose(before[0], after[0]) and torch.allclose(before[1], after[1])
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert {id(detail.density), id(detail.features)} <= held
    train_step()
    assert detail.features.abs().sum() > 0 and detail.density.abs().sum() > 0
    assert optimizer.state[detail.features]["exp_avg_sq"].shape == detail.features.shape


def test_a_field_with_a_detail_level_is_restored_from_its_state():
    field = detail_model().field
    grow_two_bricks(field)
    restored = field_from_state(field.state(), Box())
    probe = torch.rand(2000, 3) * 2 - 1
    with torch.no_grad():
        assert torch.equal(field.density_at(probe), restored.density_at(probe))
        assert restored.detail.num_bricks == 2 and restored.detail.resolution == 32
        # and the detail level matters: without it the density differs
        assert not torch.allclose(field.density_at(probe), field.activate(field.grid.density_at(*field.grid.stencil(probe))))
    assert len(restored.param_groups(load_config(None).optim)) == 3


def test_training_grows_the_detail_level_where_its_cells_cover_a_pixel_scores_as_the_grid_alone_and_resumes(
        sphere_scene, tmp_path):  # noqa: F811
    """48-pixel photos. On a 16^3 grid the level (32^3: cells of ~1.7 pixels) grows to at most its share of rows,
    scores within 0.5 dB of the grid alone, and resumes; on a 64^3 grid its 128^3 cells would cover half a pixel,
    and it gets no bricks."""
    coarse = [{"until": 1.0, "resolution": 16, "image_scale": 1.0}]
    psnr, trainers = {}, {}
    for name, levels, share in (("alone", coarse, 0.0), ("detail", coarse, 0.5),
                                ("fine", TOY_CONFIG["levels"], 0.5)):
        cfg = load_config(None, [{**TOY_CONFIG, "levels": levels, "max_steps": 300,
                                  "field": {"detail_share": share, "detail_at": 0.6}}])
        trainers[name] = Trainer(load_scene(sphere_scene), cfg, tmp_path / name, torch.device("cpu"), quiet=True)
        trainers[name].train()
        psnr[name] = trainers[name].evaluate(with_lpips=False, write=False)["mean"]["psnr"]
    assert trainers["alone"].model.field.detail is None
    assert trainers["fine"].model.field.detail.resolution == 128 and trainers["fine"].model.field.detail.num_bricks == 0
    model = trainers["detail"].model
    detail = model.field.detail
    assert detail.resolution == 32 and 0 < detail.bricks.num_rows <= 0.5 * model.estimator.bricks.num_rows
    assert psnr["detail"] > psnr["alone"] - 0.5, psnr
    resumed = Trainer(load_scene(sphere_scene), trainers["detail"].cfg, tmp_path / "detail", torch.device("cpu"),
                      resume=True, quiet=True)
    assert torch.equal(resumed.model.field.detail.brick_coords, detail.brick_coords)
    assert torch.equal(resumed.model.field.detail.features, detail.features)


def test_the_detail_level_read_at_the_samples_inside_its_bricks_equals_a_read_at_every_sample():
    """`plus_detail` reads the level only where a sample's stencil touches its bricks: values and gradients are
    those of the read at every sample (the rest add zero)."""
    field = detail_model().field
    grow_two_bricks(field)
    rows, weights = field.detail.stencil(torch.rand(3000, 3) * 2 - 1)
    assert 0 < weights.any(-1).sum() < len(weights)  # some samples inside, some outside
    for read, table in ((field.detail.density_at, field.detail.density), (field.detail.features_at, field.detail.features)):
        base = torch.randn(len(rows), *table.shape[1:], requires_grad=True)
        results = []
        for out in (plus_detail(base, read, rows, weights), base + read(rows, weights)):
            table.grad = base.grad = None
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
            results.append((out.detach(), table.grad.clone(), base.grad.clone()))
        for compact, full in zip(*results):
            assert torch.allclose(compact, full, atol=1e-6)


def test_total_variation_smooths_the_grid_and_leaves_the_detail_level_free():
    """TV regularizes the grid's rows only: the detail level holds what the grid is too coarse for."""
    from voxnerf.run.config import OptimConfig

    field = detail_model().field
    grow_two_bricks(field)
    field.regularization(OptimConfig(tv_density=1.0, tv_features=1.0, tv_vertices=4096),
                         torch.Generator().manual_seed(1)).backward()
    assert field.grid.density.grad.abs().sum() > 0 and field.grid.features.grad.abs().sum() > 0
    assert field.detail.density.grad is None and field.detail.features.grad is None


def one_camera(distance: float, look: float = 1.0, focal: float = 100.0, size: int = 100) -> Cameras:
    """A pinhole camera `distance` from the origin on the -z axis, looking at it (look = 1) or away (-1), `size`
    pixels square."""
    eye = np.array([0.0, 0.0, -distance])
    c2w = look_at(eye, eye + [0.0, 0.0, look], np.array([0.0, 1.0, 0.0]))
    return Cameras(c2w[None], np.array([[focal, focal, size / 2, size / 2]]), np.array([[size, size]]), np.zeros((1, 4)))


def test_a_cells_pixel_footprint_is_its_edge_over_its_depth_in_focal_lengths_and_zero_where_unseen():
    """A cell of edge 0.02 at the origin, 2 units from a camera of focal 100 px: 1 px; through a space that doubles
    every length, 2 px; behind the camera or outside its image: 0."""
    g = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, -0.99], [0.9, 0.9, -0.9]])
    pixels = pixel_footprint(one_camera(2.0), Box(), g, 0.02)
    assert pixels[0] == pytest.approx(1.0, rel=0.02) and pixels[2] == 0  # the corner point falls outside the image
    assert pixels[1] == pytest.approx(100 * 0.02 / 1.01, rel=0.02)  # nearer the camera: larger
    assert pixel_footprint(one_camera(2.0), Box(scale=0.5), g[:1], 0.02)[0] == pytest.approx(2.0, rel=0.02)
    assert pixel_footprint(one_camera(2.0, look=-1.0), Box(), g[:1], 0.02)[0] == 0  # the camera looks away


def test_the_detail_level_grows_only_where_its_cells_cover_a_training_pixel():
    """With every cell's footprint below a pixel the level gets no bricks; with the left half's above, only there."""
    grown_bricks = {}
    for name, footprint in (("none wide", lambda g, cell: torch.full((len(g),), 0.9)),
                            ("left wide", lambda g, cell: torch.where(g[:, 0] < 0, 2.0, 0.5))):
        model = detail_model(share=8.0)
        strategy = TopologyStrategy(OccupancyConfig(), [Level(1.0, 16, 1.0)], 0.5, footprint=footprint)
        strategy.grow_detail(model, model.field.detail, None)
        grown_bricks[name] = model.field.detail.brick_coords
    assert len(grown_bricks["none wide"]) == 0
    left = grown_bricks["left wide"]
    assert len(left) > 0 and (left[:, 0] * BRICK * 2 / 32 - 1 < 0).all()


def test_the_density_at_the_grids_vertices_is_read_from_their_rows_with_the_detail_level_added():
    """`vertex_density` (what an occupancy update reads at every vertex, no stencil) is what a lookup of the
    vertices gives, with and without a detail level; an update through it marks the same cells as one through the
    field's trilinear lookup."""
    field = detail_model().field
    within = (field.grid.bricks.slot_vertices() <= field.grid.resolution).all(-1)  # rows beyond R name no vertex
    points = field.grid.bricks.vertex_points()
    for grow in (False, True):
        if grow:
            grow_two_bricks(field)
        with torch.no_grad():
            expected = field.density_at(points)
        assert torch.allclose(field.vertex_density()[within], expected[within], rtol=1e-5, atol=1e-6), grow
    assert not torch.allclose(field.vertex_density(), detail_model().field.vertex_density())  # the level adds
    updated = {}
    for name in ("rows", "stencil"):
        estimator = OccupancyGrid(16, Box())  # on the field's bricks, rows aligned
        density = FixedPointsDensity(field, estimator.vertices()) if name == "rows" else field.density_at
        estimator.update(density, OccupancyConfig(threshold=0.5), step_ratio=0.5)
        updated[name] = estimator.occupied
    assert torch.equal(updated["rows"], updated["stencil"]) and 0 < int(updated["rows"].sum()) < len(points)
