"""fp16 autocast with a GradScaler, end to end on the CPU as a stand-in for CUDA (where `precision: auto` picks it):
the MLP runs in fp16, density, transmittance and compositing stay in fp32, the loss scale settles and is logged,
and the toy sphere trains to the quality of an fp32 run.

fp16 matrix products have no fast path on a CPU (many times slower than fp32), so the scene is tiny and the runs
short: this checks correctness, not speed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import voxnerf.render.renderer as renderer
from voxnerf.data import load_scene
from voxnerf.run.config import load_config
from voxnerf.train.trainer import Trainer

STEPS = 200
WARMUP = 20  # steps in which the scaler halves its first scale (65536) until the fp16 gradients fit
CONFIG = {"levels": [{"until": 0.3, "resolution": 16, "image_scale": 0.5},
                     {"until": 1.0, "resolution": 32, "image_scale": 1.0}],
          "occupancy": {"warmup_steps": 50}, "log_every": 1, "max_steps": STEPS, "threads": 2,
          "optim": {"target_samples": 4096, "min_rays": 256, "max_rays": 1024}}
UNTRAINED_PSNR = 14.4  # dB, the sphere's test views rendered by a field before its first step


@pytest.fixture(scope="module")
def sphere(tmp_path_factory) -> Path:
    import voxnerf.scenes as toy_scenes

    return toy_scenes.make_scene("sphere", tmp_path_factory.mktemp("fp16") / "sphere", n_train=12, n_val=1,
                                 n_test=2, size=32, n_samples=64)


def trainer_for(sphere: Path, out: Path, precision: str) -> Trainer:
    return Trainer(load_scene(sphere), load_config(None, [CONFIG, {"precision": precision}]), out,
                   torch.device("cpu"), quiet=True)


def psnr_on_test_views(trainer: Trainer) -> float:
    return trainer.evaluate(with_lpips=False, write=False)["mean"]["psnr"]


@pytest.fixture(scope="module")
def fp16_run(sphere, tmp_path_factory):
    """An fp16 run, with the dtypes of the MLP's output and of the compositing's inputs and outputs seen in it."""
    dtypes: dict[str, set] = {"mlp": set(), "weights": set(), "opacity": set(), "rgb": set()}
    composite = renderer.composite

    def composited_seen(*args, **kwargs):
        out = composite(*args, **kwargs)
        for name in ("weights", "opacity", "rgb"):
            dtypes[name].add(getattr(out, name).dtype)
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(renderer, "composite", composited_seen)
        out = tmp_path_factory.mktemp("fp16-run")
        trainer = trainer_for(sphere, out, "fp16")
        trainer.model.field.decoder.mlp.register_forward_hook(lambda m, i, o: dtypes["mlp"].add(o.dtype))
        trainer.train()
    psnr = psnr_on_test_views(trainer)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return trainer, psnr, rows, dtypes


def test_fp16_runs_the_mlp_in_half_precision_and_composites_in_fp32(fp16_run):
    trainer, _, _, dtypes = fp16_run
    assert trainer.scaler.is_enabled() and trainer.amp_dtype == torch.float16
    assert dtypes == {"mlp": {torch.float16}, "weights": {torch.float32}, "opacity": {torch.float32},
                      "rgb": {torch.float32}}


def test_the_loss_scale_is_logged_beside_the_loss_and_few_steps_are_skipped_after_warm_up(fp16_run):
    """Each step the scaler skips (an inf or NaN gradient) halves the scale; none grows it in this run's length."""
    _, _, rows, _ = fp16_run
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    scales = [row["loss_scale"] for row in rows]
    assert all(math.isfinite(row["loss"]) for row in rows)
    assert all(scale == 2.0 ** round(math.log2(scale)) for scale in scales)  # 65536 halved (or doubled)
    skipped = sum(later < earlier for earlier, later in zip(scales[WARMUP - 1:], scales[WARMUP:]))
    assert skipped < 0.02 * (STEPS - WARMUP), scales


def test_fp16_trains_the_sphere_as_well_as_fp32_with_finite_parameters(fp16_run, sphere, tmp_path):
    trainer, psnr, _, _ = fp16_run
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    reference_run = trainer_for(sphere, tmp_path, "fp32")
    reference_run.train()
    reference = psnr_on_test_views(reference_run)
    assert reference > UNTRAINED_PSNR + 5 and abs(psnr - reference) < 0.5, (psnr, reference)
    first_layer = [run.model.field.decoder.mlp[0].weight for run in (trainer, reference_run)]
    assert not torch.equal(*first_layer)  # the fp16 run's arithmetic was its own
