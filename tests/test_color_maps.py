"""Per-photo color maps: photos of one scene taken at different exposures train into one field whose color maps
carry each photo's exposure; views not trained on render with the map of the photos near them where the maps follow
the cameras (the identity where they do not)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import voxnerf.scenes as vs
from voxnerf.data import load_scene
from voxnerf.fields.color_maps import ColorMaps
from voxnerf.render.model import Model
from voxnerf.render.views import render_view, target_image
from voxnerf.run.config import load_config
from voxnerf.run.metrics import psnr
from voxnerf.train.trainer import Trainer

CONFIG = {"levels": [{"until": 0.3, "resolution": 16, "image_scale": 1.0},
                     {"until": 1.0, "resolution": 32, "image_scale": 1.0}],
          "occupancy": {"warmup_steps": 30}, "optim": {"target_samples": 16384, "min_rays": 512, "max_rays": 2048},
          "max_steps": 300, "threads": 2}


@pytest.fixture(scope="module")
def exposures(tmp_path_factory):
    """The toy sphere with each training photo at its own exposure (gains 0.6-1.4, mean 1), test photos at 1."""
    root = vs.make_scene("sphere", tmp_path_factory.mktemp("exposures") / "sphere", n_train=24, n_val=1, n_test=3,
                         size=32, n_samples=64)
    scene = load_scene(root)
    train = set(scene.split_indices("train").tolist())
    gains = dict(zip(sorted(train), np.linspace(0.6, 1.4, len(train))))  # the cameras stand in random directions
    return exposed(scene, gains), gains


def exposed(scene, gains: dict):
    """The scene with image i's color scaled by gains[i] (1 where absent)."""
    images = []
    for i in range(len(scene.image_paths)):
        image = scene.images[i].astype(np.float64)
        image[..., :3] *= gains.get(i, 1.0)
        images.append(image.clip(0, 255).astype(np.uint8))
    return dataclasses.replace(scene, images=images)


@pytest.fixture(scope="module")
def trained(exposures, tmp_path_factory) -> dict:
    """Trainers of the exposed sphere: plain and with color maps."""
    scene, _ = exposures
    runs = {}
    for name, field in {"plain": {}, "maps": {"color_maps": True}}.items():
        cfg = load_config(None, [CONFIG, {"field": field}])
        trainer = Trainer(scene, cfg, tmp_path_factory.mktemp(name), torch.device("cpu"), quiet=True)
        trainer.train()
        runs[name] = trainer
    return runs


def train_views_psnr(trainer: Trainer, scene, gains: dict, own_map: bool) -> float:
    """Mean PSNR of the training views against their (exposed) photos, each under its own map or a novel view's."""
    train = scene.split_indices("train")
    scores = []
    for k, i in enumerate(train[::4]):
        view = render_view(trainer.model, scene.cameras, int(i), scene.render_background, trainer.cfg.render,
                           trainer.device, image=int(k * 4) if own_map else None)
        scores.append(psnr(view.rgb, target_image(scene.images[int(i)], scene.render_background)))
    return float(np.mean(scores))


def brightness_per_map(trainer: Trainer, scene) -> np.ndarray:
    """(n_train,) each training view's subject rendered under its own map, over its brightness as a novel view."""
    ratios = []
    for k, i in enumerate(scene.split_indices("train")):
        own, fixed = (render_view(trainer.model, scene.cameras, int(i), scene.render_background, trainer.cfg.render,
                                  trainer.device, image=image).rgb for image in (k, None))
        subject = np.abs(fixed - fixed[0, 0]).sum(-1) > 0.05  # the corner pixel is background
        ratios.append(own[subject].mean() / fixed[subject].mean())
    return np.asarray(ratios)


def test_color_maps_carry_each_photos_exposure(exposures, trained):
    scene, gains = exposures
    plain = train_views_psnr(trained["plain"], scene, gains, own_map=False)
    own = train_views_psnr(trained["maps"], scene, gains, own_map=True)
    assert own > plain + 1.0, (own, plain)  # one field cannot be both dark and bright; the maps can
    ratios = brightness_per_map(trained["maps"], scene)
    exposure = [gains[int(i)] for i in scene.split_indices("train")]
    assert np.corrcoef(ratios, exposure)[0, 1] > 0.8, ratios  # each map brightens as its photo's gain
    test_plain = trained["plain"].evaluate(with_lpips=False, write=False)["mean"]["psnr"]
    test_own = trained["maps"].evaluate(with_lpips=False, write=False)["mean"]["psnr"]
    assert test_own > test_plain - 1.0, (test_own, test_plain)  # the identity renders the mean exposure


def test_color_maps_are_centered_and_saved(trained):
    model = trained["maps"].model
    maps = model.color_maps.maps.detach()
    assert maps.abs().max() > 1e-3  # they learned something
    rgb, opacity = torch.rand(6, 3), torch.rand(6)
    images = torch.arange(len(maps)).repeat_interleave(6)
    mapped = model.color_maps(rgb.repeat(len(maps), 1), opacity.repeat(len(maps)), images).reshape(len(maps), 6, 3)
    torch.testing.assert_close(mapped.mean(0), rgb)  # the images' mean map is the identity
    restored = Model.from_state(model.state())
    torch.testing.assert_close(restored.color_maps.maps, maps)


def test_maps_that_do_not_follow_the_cameras_leave_views_not_trained_on_at_the_identity(trained):
    """The exposed sphere's gains go with the photos' order, not with where their cameras stand."""
    maps = trained["maps"].model.color_maps
    assert not maps.neighbours_predict()
    assert maps.novel_view(np.zeros(3)) is None


@pytest.fixture(scope="module")
def positional(tmp_path_factory):
    """The toy sphere with every photo's exposure set by where its camera stands (as a phone's is by what is in
    front of it): gains 0.65-1.35 along the world x axis, test photos included; and its color maps trained."""
    root = vs.make_scene("sphere", tmp_path_factory.mktemp("positional") / "sphere", n_train=24, n_val=1, n_test=3,
                         size=32, n_samples=64)
    scene = load_scene(root)
    centers = scene.cameras.centers
    gains = {i: 1.0 + 0.35 * c[0] / np.linalg.norm(c) for i, c in enumerate(centers)}
    cfg = load_config(None, [CONFIG, {"field": {"color_maps": True}}])
    trainer = Trainer(exposed(scene, gains), cfg, tmp_path_factory.mktemp("maps"), torch.device("cpu"), quiet=True)
    trainer.train()
    return trainer, gains


def test_a_view_not_trained_on_takes_the_map_of_the_photos_near_it_where_maps_follow_the_cameras(positional):
    """Against the identity (the photos' mean exposure), each test view whose photo is exposed away from the mean
    scores at least 0.5 dB higher in its neighbours' map, and the views' mean 0.3 dB higher (a view near the mean
    exposure may lose a little to the neighbours' noise: 24.2 -> 23.7 dB here)."""
    trainer, gains = positional
    maps = trainer.model.color_maps
    assert maps.neighbours_predict()
    near = [v["psnr"] for v in trainer.evaluate(with_lpips=False, write=False)["views"]]
    centers, maps.centers = maps.centers, None  # as a checkpoint without the cameras: the identity
    identity = [v["psnr"] for v in trainer.evaluate(with_lpips=False, write=False)["views"]]
    maps.centers = centers
    scores = [(gains[int(i)], a, b) for i, a, b in zip(trainer.scene.split_indices("test"), near, identity)]
    assert np.mean(near) > np.mean(identity) + 0.3, scores
    assert all(a > b + 0.5 for gain, a, b in scores if abs(gain - 1) > 0.1), scores


def test_a_novel_views_map_blends_the_nearest_cameras_maps_by_inverse_distance():
    """Cameras on a circle whose maps' offsets follow the angle: at a camera the view takes that camera's map; between
    two, a blend of the nearest three, weighted by inverse distance."""
    angle = torch.linspace(0, 2 * np.pi, 13)[:-1]
    centers = torch.stack([angle.cos(), angle.sin(), torch.zeros(12)], -1)
    maps = ColorMaps(12, centers)
    with torch.no_grad():
        maps.maps[:, :, 3] = 0.2 * angle.cos()[:, None]
    assert maps.neighbours_predict()
    torch.testing.assert_close(maps.novel_view(centers[4].numpy()), maps.centered()[4].detach())
    between = ((centers[0] + centers[1]) / 2).numpy()
    distance = torch.linalg.norm(centers - torch.as_tensor(between), dim=-1)
    nearest = distance.argsort()[:3]
    weights = 1 / distance[nearest]
    expected = (weights[:, None, None] * maps.centered()[nearest]).sum(0) / weights.sum()
    torch.testing.assert_close(maps.novel_view(between), expected.detach())
    with torch.no_grad():
        maps.maps[:, :, 3] = torch.tensor([0.2, -0.2]).repeat(6)[:, None]  # alternating: no neighbour predicts
    assert not maps.neighbours_predict() and maps.novel_view(between) is None


def test_color_maps_keep_their_cameras_through_a_checkpoint(positional):
    trainer, _ = positional
    state = trainer.model.state()
    torch.testing.assert_close(Model.from_state(state).color_maps.centers, trainer.model.color_maps.centers)
    older = {k: v for k, v in state.items() if k != "color_map_centers"}  # written before the maps kept them
    assert Model.from_state(older).color_maps.novel_view(np.zeros(3)) is None
