"""View-count learning rates (`optim.view_count_lr`, voxnerf.train.view_rates): the count of cameras that look at a
grid point, and the grid's steps scaled by it."""

import numpy as np
import torch
from test_train import TOY_CONFIG, sphere_scene  # noqa: F401 (a fixture)

from voxnerf.data import load_scene
from voxnerf.data.cameras import Cameras, look_at
from voxnerf.data.footprint import views_seeing
from voxnerf.data.space import Space
from voxnerf.run.config import load_config
from voxnerf.train.trainer import Trainer


def test_views_seeing_counts_the_cameras_whose_image_holds_a_point_past_its_near_bound():
    """Two cameras 2 units either side of the origin, looking at it (90 degrees across), nearest content 1 unit away."""
    up = np.array([0.0, 0.0, 1.0])
    c2w = [look_at(np.array([x, 0.0, 0.0]), np.zeros(3), up) for x in (2.0, -2.0)]
    cameras = Cameras(np.stack(c2w), [[16.0, 16.0, 16.0, 16.0]] * 2, [[32, 32]] * 2, np.zeros((2, 4)),
                      near=np.array([1.0, 1.0]))
    points = torch.tensor([
        [0.0, 0.0, 0.0],  # the middle: both
        [2.5, 0.0, 0.0],  # behind the first camera: the second only
        [1.5, 0.0, 0.0],  # nearer the first camera than its near bound: the second only
        [0.0, 0.0, 0.9],  # 24 degrees off both axes: both
        [0.0, 0.0, 3.0],  # 56 degrees off both axes, outside both images: none
    ])
    space = Space(scale=0.25)  # the box: grid points are unit-box points, a quarter of world ones
    assert views_seeing(cameras, space, points * 0.25).tolist() == [2.0, 1.0, 1.0, 2.0, 0.0]


def test_each_grid_row_steps_its_view_count_share_of_the_optimizers_step(sphere_scene):  # noqa: F811
    """One step of two runs alike but for the option: with it, every grid row moves by its scale (its views over the
    most any row has) times the row's move without it."""
    moves, rates = {}, None
    for on in (False, True):
        cfg = load_config(None, [{**TOY_CONFIG, "optim": {**TOY_CONFIG["optim"], "view_count_lr": on}}])
        trainer = Trainer(load_scene(sphere_scene), cfg, sphere_scene.parent / f"vc_{on}", torch.device("cpu"),
                          quiet=True)
        grid = trainer.model.field.grid
        before = [grid.density.detach().clone(), grid.features.detach().clone()]
        trainer.train_step()
        moves[on] = [p.detach() - b for p, b in zip((grid.density, grid.features), before)]
        rates = trainer.view_rates
    scale = rates.scale
    assert scale.max() == 1 and (scale < 0.5).any(), "every row seen alike: the test would show nothing"
    assert (moves[False][0][scale < 1].abs() > 0).any(), "no row the option slows moved"
    for plain, scaled in zip(moves[False], moves[True]):
        s = scale.reshape(-1, *[1] * (plain.dim() - 1))
        assert torch.allclose(scaled, s * plain, atol=1e-6)
