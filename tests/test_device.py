"""Device moves: a model moved to another device (the meta device stands in for CUDA) keeps no tensor behind, in
its parameters, buffers or any attribute (index tables, cached layouts, bounding boxes)."""

import torch
from torch import nn

from voxnerf.config import OccupancyConfig
from voxnerf.fields.dense import DenseGridConfig
from voxnerf.fields.voxels import SparseVoxelConfig
from voxnerf.model import Model
from voxnerf.space import Box, Contract


def tensors_in(obj, path: str = "model", seen: set | None = None):
    """Yield (path, tensor) for every tensor reachable from `obj` through attributes, dicts, lists and tuples."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors_in(v, f"{path}[{k!r}]", seen)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors_in(v, f"{path}[{i}]", seen)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith(("voxnerf", "torch.nn")):
        for k, v in vars(obj).items():
            yield from tensors_in(v, f"{path}.{k}", seen)


def refined_model(field_cfg, space) -> Model:
    """A model after an occupancy update and one refinement, with the layouts' cached tables computed."""
    model = Model.build(field_cfg, 16, space)
    model.estimator.update(model.field.density_at, OccupancyConfig(), 0.5)
    model.field.refine(32, model.estimator.is_occupied, None)
    model.estimator.refine(32)
    model.estimator.update(model.field.density_at, OccupancyConfig(), 0.5)
    return model


def test_moving_a_model_leaves_no_tensor_behind():
    for field_cfg, space in ((SparseVoxelConfig(feature_dim=4), Box()), (DenseGridConfig(vertices=9), Contract())):
        model = refined_model(field_cfg, space)
        assert any(t.device.type == "cpu" for _, t in tensors_in(model))
        model.to("meta")
        left = [p for p, t in tensors_in(model) if t.device.type != "meta"]
        assert not left, f"left on the CPU after .to('meta'): {left}"
        assert isinstance(model, nn.Module) and model.estimator.bbox.device.type == "meta"


def test_the_preset_follows_the_device(general_scene, tmp_path):
    """A plain `voxnerf train` sizes the run for where it trains: the layout's preset on CUDA (2^18 samples per step,
    a grid up to 256^3, fp16 autocast), with configs/cpu.yaml over it on a CPU."""
    from voxnerf.device import amp_dtype_for
    from voxnerf.session import build_config, default_config

    said = []
    gpu_path, gpu_overlays = default_config(general_scene, tmp_path, False, torch.device("cuda"), said.append)
    gpu = build_config(gpu_path, [], None, None, None, gpu_overlays)
    assert gpu.optim.target_samples >= 2**18 and gpu.levels[-1].resolution >= 256
    assert amp_dtype_for(gpu.precision, torch.device("cuda")) == torch.float16
    cpu_path, cpu_overlays = default_config(general_scene, tmp_path, False, torch.device("cpu"), said.append)
    cpu = build_config(cpu_path, [], None, None, None, cpu_overlays)
    assert cpu_path == gpu_path and [p.name for p in cpu_overlays] == ["cpu.yaml"]
    assert cpu.optim.target_samples <= 2**16 and cpu.levels[-1].resolution == 128 and cpu.max_time > 0
    assert "cpu.yaml" in said[1] and "cpu.yaml" not in said[0]
