"""Training end to end on a toy scene: learned occupancy against ground truth, and resuming after SIGKILL."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from scipy.ndimage import binary_fill_holes
from test_device import tensors_in

import voxnerf.scenes as vs
from voxnerf.data import load_scene
from voxnerf.errors import VoxnerfError
from voxnerf.fields.interpolate import weighted_row_sum
from voxnerf.render.model import STATE_VERSION
from voxnerf.run.checkpoint import CHECKPOINT, save_atomic
from voxnerf.run.config import load_config
from voxnerf.run.load import load_run
from voxnerf.train.session import train_run
from voxnerf.train.trainer import Trainer

TOY_CONFIG = {
    "levels": [
        {"until": 0.2, "resolution": 16, "image_scale": 0.5},
        {"until": 0.5, "resolution": 32, "image_scale": 1.0},
        {"until": 1.0, "resolution": 64, "image_scale": 1.0},
    ],
    "occupancy": {"warmup_steps": 50},
    "optim": {"target_samples": 32768, "min_rays": 512, "max_rays": 2048},
    "max_steps": 500,
    "log_every": 50,
    "checkpoint_every": 100,
    "threads": 2,
}


@pytest.fixture(scope="module")
def sphere_scene(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy") / "sphere"
    return vs.make_scene("sphere", out, n_train=40, n_val=2, n_test=4, size=48, n_samples=256)


@pytest.fixture(scope="module")
def trained(sphere_scene, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("runs") / "sphere"
    trainer = Trainer(load_scene(sphere_scene), load_config(None, [TOY_CONFIG]), out, torch.device("cpu"), quiet=True)
    trainer.train()
    return out, trainer.evaluate(with_lpips=False)


SOLID_DENSITY = 0.6931  # sigma (per unit-box length) at which a ray crossing half the box is half opaque


def learned_solid_cells(run_dir: Path, resolution: int) -> torch.Tensor:
    """(R, R, R) bool: cells whose center has learned density above SOLID_DENSITY."""
    model = load_run(run_dir).model
    idx = torch.stack(torch.meshgrid(*[torch.arange(resolution)] * 3, indexing="ij"), -1).reshape(-1, 3).float()
    with torch.no_grad():
        sigma = model.field.density_at((idx + 0.5) * (2.0 / resolution) - 1)
    return (sigma > SOLID_DENSITY).reshape(resolution, resolution, resolution)


def test_training_reconstructs_the_sphere_views(trained):
    _, scores = trained
    assert scores["mean"]["psnr"] > 28.0


def test_learned_occupancy_matches_ground_truth_iou_above_0_9(trained):
    """Rays never see inside a closed object, so the learned solid is compared with its enclosed interior filled."""
    run_dir, _ = trained
    run = load_run(run_dir)
    learned = torch.from_numpy(binary_fill_holes(learned_solid_cells(run_dir, 32).numpy()))
    idx = torch.stack(torch.meshgrid(*[torch.arange(32)] * 3, indexing="ij"), -1).reshape(-1, 3).float()
    centers = torch.as_tensor(run.to_world(((idx + 0.5) / 32 * 2 - 1).numpy()), dtype=torch.float32)
    half_diagonal = 0.5 * (2.0 / 32 / run.scale) * 3**0.5
    truth = (vs.get("sphere").sdf(centers) <= half_diagonal).reshape(32, 32, 32)  # cells the solid reaches
    core = (vs.get("sphere").sdf(centers) <= -half_diagonal).reshape(32, 32, 32)  # cells wholly inside
    iou = float((learned & truth).sum() / (learned | truth).sum())
    assert iou >= 0.9, f"occupancy IoU {iou:.3f}"
    assert bool(learned[core].all()), "a cell wholly inside the sphere is not occupied"


def test_the_silhouette_loss_fits_ray_opacity_to_the_photos_alpha(sphere_scene, tmp_path):
    """A short run with the default `optim.alpha_weight`: the test views' opacity covers the pixels their alpha
    covers. (The same run fitted to the inverted alpha reads IoU 0.96, mean error 0.086.)"""
    scene = load_scene(sphere_scene)
    config = load_config(None, [TOY_CONFIG, {"max_steps": 300}])
    assert config.optim.alpha_weight > 0
    trainer = Trainer(scene, config, tmp_path / "run", torch.device("cpu"), quiet=True)
    trainer.train()
    test = scene.split_indices("test")
    run = trainer.as_run()
    opacity = np.stack([run.render_view(scene.cameras, i).opacity for i in test])
    alpha = np.stack([scene.rgba(i)[..., 3] / 255.0 for i in test])
    opaque, truth = opacity > 0.5, alpha > 0.5
    assert (opaque & truth).sum() / (opaque | truth).sum() > 0.98
    assert np.abs(opacity - alpha).mean() < 0.06


def test_a_checkpoint_of_another_version_with_options_this_one_lacks_still_loads(trained, tmp_path):
    """Options saved by another version (one since removed, one not yet known) are left out at every level of the
    run's config and of the field's own: the run loads, keeps every option it knows, and renders as before."""
    run_dir, _ = trained
    ckpt = torch.load(run_dir / CHECKPOINT, weights_only=False)
    ckpt["config"] = {**ckpt["config"], "removed_option": 1,
                      "optim": {**ckpt["config"]["optim"], "view_count_lr": True},
                      "field": {**ckpt["config"]["field"], "detail_kind": "octree"},
                      "levels": [{**level, "split": 0.05} for level in ckpt["config"]["levels"]]}
    ckpt["model"]["field"]["config"] = {**ckpt["model"]["field"]["config"], "detail_kind": "octree"}
    save_atomic(ckpt, tmp_path / CHECKPOINT)
    old, new = load_run(run_dir), load_run(tmp_path)
    assert new.config == old.config
    scene = old.scene()
    np.testing.assert_array_equal(new.render_view(scene.cameras, 0).rgb, old.render_view(scene.cameras, 0).rgb)


def test_a_run_as_the_release_before_wrote_it_loads_and_resumes(trained, sphere_scene, tmp_path):
    """The release before wrote a version of its own beside the model state's ("version": 1 at the top) and the
    options it has since dropped (appearance codes, row-sparse Adam) at their defaults, in the checkpoint and in
    config.yaml: such a run still renders as before and resumes."""
    run_dir, _ = trained
    older = tmp_path / "run"
    shutil.copytree(run_dir, older)
    ckpt = torch.load(older / CHECKPOINT, weights_only=False)
    config = {**ckpt["config"], "optim": {**ckpt["config"]["optim"], "lr_appearance": 0.01, "row_sparse": False},
              "field": {**ckpt["config"]["field"], "appearance_dim": 0}}
    ckpt.update(version=1, config=config)
    ckpt["model"]["field"]["config"] = {**ckpt["model"]["field"]["config"], "appearance_dim": 0}
    for group in ckpt["optimizer"]["param_groups"]:
        group["row_sparse"] = group["name"] != "decoder"
    save_atomic(ckpt, older / CHECKPOINT)
    (older / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    old, new = load_run(run_dir), load_run(older)
    assert new.config == old.config
    scene = old.scene()
    np.testing.assert_array_equal(new.render_view(scene.cameras, 0).rgb, old.render_view(scene.cameras, 0).rgb)
    outcome = train_run(sphere_scene, None, older, device="cpu", resume=True, max_steps=ckpt["step"] + 5, quiet=True)
    assert outcome.steps == ckpt["step"] + 5 and outcome.scores is not None


def test_a_checkpoint_of_another_model_version_is_refused_in_one_line(trained, tmp_path):
    run_dir, _ = trained
    ckpt = torch.load(run_dir / CHECKPOINT, weights_only=False)
    ckpt["model"]["version"] = 1
    save_atomic(ckpt, tmp_path / CHECKPOINT)
    with pytest.raises(VoxnerfError) as refused:
        load_run(tmp_path)
    assert str(refused.value) == (f"{tmp_path / CHECKPOINT}: a checkpoint of version 1; this release reads version "
                                  f"{STATE_VERSION} only (train the scene again)")


def test_a_checkpoint_whose_tensors_do_not_fit_this_field_is_refused_in_one_line(trained, tmp_path):
    """A field trained with an option since removed (per-image codes widened the color MLP's input) holds tensors
    of other shapes: loading it names the file and says so in one line, not a traceback."""
    run_dir, _ = trained
    ckpt = torch.load(run_dir / CHECKPOINT, weights_only=False)
    tensors = ckpt["model"]["field"]["tensors"]
    name = next(k for k, v in tensors.items() if k.startswith("decoder.") and v.ndim == 2)
    tensors[name] = torch.cat([tensors[name], torch.zeros(len(tensors[name]), 8)], dim=1)
    save_atomic(ckpt, tmp_path / CHECKPOINT)
    with pytest.raises(VoxnerfError) as refused:
        load_run(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / CHECKPOINT}: its tensors do not fit this release's field (")
    assert "\n" not in message and name.removeprefix("decoder.") in message


def _train_cmd(scene: Path, out: Path, extra: list[str]) -> list[str]:
    sets = ["--set", "occupancy.warmup_steps=50",
            "--set", "levels=" + json.dumps(TOY_CONFIG["levels"]),
            "--set", "optim=" + json.dumps(TOY_CONFIG["optim"]), "--set", "checkpoint_every=25"]
    return [sys.executable, "-m", "voxnerf", "train", str(scene), "--out", str(out), "--max-steps", "300",
            "--device", "cpu", "--threads", "1", "--quiet", *sets, *extra]


def test_a_topology_change_in_the_middle_of_a_run_carries_every_per_row_table(sphere_scene, tmp_path):
    """One owner of topology (voxnerf.train.strategy): refined between two steps of a run, every per-row tensor the
    model, the optimizer and the strategy hold has the new bricks' rows, values and moments follow their vertices,
    and training goes on."""
    cfg = load_config(None, [{**TOY_CONFIG, "occupancy": {"warmup_steps": 5}}])
    trainer = Trainer(load_scene(sphere_scene), cfg, tmp_path / "run", torch.device("cpu"), quiet=True)
    for _ in range(20):
        trainer.train_step()
        trainer.step += 1
    model, optimizer, strategy = trainer.model, trainer.optimizer, trainer.strategy
    strategy.update_occupancy(model)
    grid, estimator = model.field.grid, model.estimator
    before = estimator.bricks.num_rows

    def per_row(rows: int) -> list[str]:
        return sorted(path for path, t in tensors_in((model, optimizer, strategy), "run") if t.dim() and len(t) == rows)

    declared = per_row(before)
    for name in ("density", "features", "score", "occupied", "exp_avg", "exp_avg_sq", "gradient_tables"):
        assert any(name in path for path in declared), f"no per-row {name} before the change: {declared}"
    probe = estimator.occupied_cells()[::7].float().add(0.5) * estimator.cell_size - 1  # inside kept cells

    def at_probe() -> list[torch.Tensor]:
        stencil = grid.stencil(probe)
        with torch.no_grad():
            return [grid.density_at(*stencil), grid.features_at(*stencil),
                    *(weighted_row_sum(optimizer.state[p][k], *stencil) for p in (grid.density, grid.features)
                      for k in ("exp_avg", "exp_avg_sq"))]

    values = at_probe()
    strategy.refine(model, 2 * estimator.resolution, optimizer)
    grid = model.field.grid
    assert estimator.bricks.num_rows != before and not per_row(before), "a per-row table kept the old rows"
    assert len(per_row(estimator.bricks.num_rows)) >= 6
    assert torch.equal(grid.brick_coords, estimator.brick_coords)
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} >= {id(grid.density), id(grid.features)}
    for old, new in zip(values, at_probe()):
        assert torch.allclose(old, new, atol=1e-5)
    assert torch.isfinite(trainer.train_step()["loss"])


def test_a_run_killed_with_sigkill_resumes_to_the_same_quality(sphere_scene, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    whole = tmp_path / "whole"
    subprocess.run(_train_cmd(sphere_scene, whole, []), check=True, env=env, capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(sphere_scene, killed, []), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not _checkpoint_step_at_least(killed, 100):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoint.pt").is_file(), "the last checkpoint must survive SIGKILL"
    step_at_kill = load_run(killed).step
    assert 100 <= step_at_kill < 300
    subprocess.run(_train_cmd(sphere_scene, killed, ["--resume"]), check=True, env=env, capture_output=True)
    assert load_run(killed).step == 300
    psnr_whole = json.loads((whole / "eval.json").read_text())["mean"]["psnr"]
    psnr_resumed = json.loads((killed / "eval.json").read_text())["mean"]["psnr"]
    assert abs(psnr_whole - psnr_resumed) <= 0.3


def _checkpoint_step_at_least(run: Path, step: int) -> bool:
    try:
        return load_run(run).step >= step
    except Exception:  # not written yet
        return False
