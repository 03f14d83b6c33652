"""The Field interface: a second, deliberately small field (a dense grid) trains, renders and exports through the
same trainer, renderer and export code as the sparse voxel field, selected by its config entry alone."""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import voxnerf.scenes as vs
from voxnerf.data import load_scene
from voxnerf.errors import VoxnerfError
from voxnerf.export import export_mesh
from voxnerf.fields import FIELDS
from voxnerf.fields.decoder import SIZES_PER_OCTAVE, ColorDecoder, GridFieldConfig, bucketed_rows
from voxnerf.fields.dense import DenseGridConfig, DenseGridField
from voxnerf.ranges import Range
from voxnerf.run.config import load_config
from voxnerf.run.load import load_run
from voxnerf.train.trainer import Trainer

DENSE = {
    "field": {"kind": "dense_grid", "vertices": 33},
    "levels": [{"until": 0.3, "resolution": 16, "image_scale": 0.5}, {"until": 1.0, "resolution": 32, "image_scale": 1.0}],
    "occupancy": {"warmup_steps": 40},
    "optim": {"target_samples": 16384, "min_rays": 256, "max_rays": 1024},
    "max_steps": 250, "log_every": 50, "threads": 2,
}


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory) -> tuple[Path, dict]:
    scene = vs.make_scene("sphere", tmp_path_factory.mktemp("toy") / "sphere", n_train=30, n_val=0, n_test=3,
                          size=32, n_samples=128)
    out = tmp_path_factory.mktemp("runs") / "dense"
    trainer = Trainer(load_scene(scene), load_config(None, [DENSE]), out, torch.device("cpu"), quiet=True)
    trainer.train()
    return out, trainer.evaluate(with_lpips=False)


def test_fields_register_by_name_and_configs_pick_them():
    assert {"sparse_grid", "dense_grid"} <= set(FIELDS)
    assert load_config(None, [DENSE]).field.vertices == 33
    with pytest.raises(VoxnerfError, match="field.kind 'hash'"):
        load_config(None, [{"field": {"kind": "hash"}}])
    with pytest.raises(VoxnerfError, match="unknown option 'vertices'"):
        load_config(None, [{"field": {"vertices": 33}}])  # an option of another field kind


@pytest.fixture
def sharp_field_kind():
    """A field kind registered for one test (and removed after it): a dense grid with a numeric option of its own,
    `sharpness` in (0, 10], whose range its Config declares."""

    @dataclass
    class SharpConfig(DenseGridConfig):
        kind: str = "sharp_dense_grid"
        sharpness: float = 1.0

        RANGES: ClassVar[dict[str, Range]] = {**DenseGridConfig.RANGES, "sharpness": Range(0, 10, low_open=True)}

    class SharpField(DenseGridField):
        name = "sharp_dense_grid"
        Config = SharpConfig

    yield SharpField
    del FIELDS[SharpField.name]


def test_a_new_field_kind_declares_the_ranges_of_its_own_numeric_options(sharp_field_kind):
    """Nothing outside the field's module lists its options: the config loads it and checks its ranges."""
    cfg = load_config(None, [{"field": {"kind": "sharp_dense_grid", "sharpness": 2.5, "vertices": 17}}])
    assert isinstance(cfg.field, sharp_field_kind.Config) and cfg.field.sharpness == 2.5
    with pytest.raises(VoxnerfError, match=r"^config: field.sharpness = 0: expected in \(0, 10\]"):
        load_config(None, [{"field": {"kind": "sharp_dense_grid", "sharpness": 0}}])
    with pytest.raises(VoxnerfError, match=r"^config: field.vertices = 1: expected in \[2, 1024\]"):
        load_config(None, [{"field": {"kind": "sharp_dense_grid", "vertices": 1}}])
    sharp_field_kind.Config.RANGES = DenseGridConfig.RANGES  # a kind that declares no range for an option of its own
    assert load_config(None, [{"field": {"kind": "sharp_dense_grid", "sharpness": 50}}]).field.sharpness == 50
    with pytest.raises(VoxnerfError, match=r"^config: field.sharpness = nan: expected a finite number"):
        load_config(None, [{"field": {"kind": "sharp_dense_grid", "sharpness": float("nan")}}])


def test_a_dense_grid_field_trains_on_the_toy_sphere(dense_run):
    out, scores = dense_run
    assert scores["mean"]["psnr"] > 22, scores["mean"]
    run = load_run(out)
    assert isinstance(run.model.field, DenseGridField)
    assert run.model.estimator.resolution == 32  # the schedule refined the occupancy; the field kept its grid
    truth = vs.get("sphere").occupancy(32)
    centers = (torch.nonzero(truth).float() + 0.5) / 32 * 2 - 1
    assert float(run.model.estimator.is_occupied(centers).float().mean()) > 0.95


def test_a_dense_grid_field_exports_a_mesh_of_the_sphere(dense_run, tmp_path):
    run = load_run(dense_run[0])
    mesh = export_mesh(run, tmp_path / "dense.ply", iso=0.3, hidden=True)
    vertices = np.asarray(mesh.vertices)
    assert len(mesh.triangles) > 100
    distance = vs.get("sphere").sdf(torch.as_tensor(vertices)).abs()
    assert float(distance.median()) < 2 * 2.0 / 32 / run.scale, "the mesh should lie on the sphere"


def test_the_color_mlps_written_out_backward_is_autograds():
    """Its gradients pass gradcheck in float64, and in bf16 they are the bits autograd gives through autocast."""
    torch.manual_seed(0)
    mlp = ColorDecoder(6, 16, 2, sh_degree=0).mlp.double()  # 6 features + 1 SH band 0 -> 16 -> 16 -> 3
    torch.nn.init.normal_(mlp[-1].weight)  # a last layer that passes gradients on (it starts at zero)
    names = [name for name, _ in mlp.named_parameters()]
    params = [p.detach().requires_grad_() for p in mlp.parameters()]
    x = torch.randn(20, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *p: torch.func.functional_call(mlp, dict(zip(names, p)), (x,)),
                                    (x, *params))

    mlp = ColorDecoder(6, 64, 2, sh_degree=0).mlp
    torch.nn.init.normal_(mlp[-1].weight)
    autocast_reference = torch.nn.Sequential(*mlp)  # the same parameters, autograd's backward through autocast
    x, pull = torch.randn(40_000, 7, requires_grad=True), torch.randn(40_000, 3)  # a training step's rows
    grads = []
    for autocast in (False, True):
        x.grad = None
        mlp.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = autocast_reference(x) if autocast else mlp(x, torch.bfloat16)
        (y.float() * pull).sum().backward()
        grads.append([y.detach(), x.grad, *(p.grad for p in mlp.parameters())])
    assert grads[0][0].dtype == torch.bfloat16 and grads[0][1].dtype == torch.float32
    for ours, autograds in zip(*grads):
        assert torch.equal(ours, autograds)


def test_the_color_mlp_under_autocast_sees_few_row_counts_and_padding_changes_no_color():
    """oneDNN caches a primitive per matmul shape (bf16 on a CPU): the decoder pads its rows to a few sizes per
    octave, and the padded rows change none of the real rows' colors."""
    decoder = ColorDecoder.seeded(GridFieldConfig(), seed=0)
    torch.nn.init.normal_(decoder.mlp[-1].weight, std=0.5)  # a non-trivial last layer (it starts at zero)
    seen = set()
    decoder.mlp.register_forward_hook(lambda module, inputs, output: seen.add(len(inputs[0])))
    features, dirs = torch.randn(4096, 12), F.normalize(torch.randn(4096, 3), dim=-1)
    whole = decoder(features, dirs, torch.bfloat16)
    counts = range(2048, 4097, 7)  # one octave
    for n in counts:
        part = decoder(features[:n], dirs[:n], torch.bfloat16)
        assert part.shape == (n, 3)
        torch.testing.assert_close(part, whole[:n], atol=1e-2, rtol=0)  # bf16 rounding; rows stay their own
    assert len(seen) <= SIZES_PER_OCTAVE + 1, sorted(seen)
    assert min(seen) == 2048 and all(n <= bucketed_rows(n) <= n * (1 + 1 / SIZES_PER_OCTAVE) for n in counts)
    seen.clear()
    decoder(features[:2049], dirs[:2049])  # fp32: no padding
    assert seen == {2049}
