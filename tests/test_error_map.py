"""Error-map ray sampling (`optim.error_share`): rays drawn in proportion to a running loss per tile of each photo."""

from __future__ import annotations

import torch

from voxnerf.data.space import Space
from voxnerf.train.error_map import ErrorMap
from voxnerf.train.ray_sampler import RaySampler


def test_a_drawn_pixel_lies_in_its_tile_at_every_scale():
    errors = ErrorMap(5, 4, 0.25, torch.device("cpu"))
    errors.loss = torch.rand(len(errors.loss))
    generator = torch.Generator().manual_seed(0)
    for size in ((37, 53), (456, 456), (4, 4)):
        img, v, u, tile = errors.draw(20000, size, generator)
        assert 0 <= int(v.min()) and int(v.max()) < size[0] and 0 <= int(u.min()) and int(u.max()) < size[1]
        # each pixel's tile, from its coordinates, holds the row and column fractions the pixel was drawn in
        t = errors.tiles
        assert torch.equal(tile // (t * t), img)
        top, left = (tile // t % t) * size[0] / t, (tile % t) * size[1] / t
        assert bool(((v >= top.floor()) & (v < top + size[0] / t)).all())
        assert bool(((u >= left.floor()) & (u < left + size[1] / t)).all())


def test_tiles_are_drawn_in_proportion_to_their_loss():
    errors = ErrorMap(3, 2, 0.25, torch.device("cpu"))
    errors.loss = torch.tensor([1.0] * 11 + [9.0])  # the last tile: 9 in 20 of the weight
    img, v, u, tile = errors.draw(40000, (10, 10), torch.Generator().manual_seed(1))
    assert torch.equal(errors.tile_of(img, v, u, (10, 10)), tile)  # 5 pixels a tile: each center in its own
    share = (tile == 11).float().mean().item()
    assert abs(share - 9 / 20) < 0.01, share


def test_a_first_hit_sets_a_tile_and_later_hits_move_it_by_the_rate():
    errors = ErrorMap(1, 2, 0.25, torch.device("cpu"))
    errors.record(torch.tensor([0, 0, 3]), torch.tensor([0.1, 0.3, 0.4]))
    assert torch.allclose(errors.loss, torch.tensor([0.2, 1.0, 1.0, 0.4]))  # the mean of its rays; 1, 2 unseen
    errors.record(torch.tensor([0]), torch.tensor([1.0]))
    assert torch.allclose(errors.loss, torch.tensor([0.2 + 0.25 * 0.8, 1.0, 1.0, 0.4]))


def test_the_sampler_draws_its_share_where_the_loss_is(general_scene):
    """With half of each batch drawn by the map, a photo whose rays missed their targets gets about half the rays;
    with no share the batch has no tiles and every photo gets its uniform share."""
    scene = general_scene
    indices = scene.split_indices("train")
    sampler = RaySampler(scene, indices, torch.device("cpu"), Space(), error_share=0.5)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):  # every tile seen: the photo 0 missed by 1 in every channel, the others by 0.01
        batch = sampler.sample(4096, 0.5, generator)
        miss = torch.where(batch["image"] == 0, 1.0, 0.1)[:, None]
        sampler.record(batch, batch["target"] + miss)
    batch = sampler.sample(4096, 1.0, generator)  # another scale: the same tiles
    on_first = (batch["image"] == 0).float().mean().item()
    uniform = 1 / len(indices)
    expected = 0.5 * uniform + 0.5 * 1 / (1 + 0.01 * (len(indices) - 1))
    assert abs(on_first - expected) < 0.05, (on_first, expected)
    plain = RaySampler(scene, indices, torch.device("cpu"), Space()).sample(4096, 1.0, generator)
    assert plain["tile"] is None and (plain["image"] == 0).float().mean().item() < uniform + 0.05
