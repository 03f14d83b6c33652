"""Device moves: a model moved to another device (the meta device stands in for CUDA) keeps no tensor behind, in
its parameters, buffers or any attribute (index tables, cached layouts, bounding boxes)."""

import dataclasses

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from voxnerf.data.space import Box, Contract
from voxnerf.fields.dense import DenseGridConfig
from voxnerf.fields.voxels import SparseVoxelConfig
from voxnerf.render.model import Model
from voxnerf.run.config import load_config
from voxnerf.render.occupancy import OccupancyConfig
from voxnerf.train.strategy import carried_modules, refine


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
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith(("voxnerf", "torch.nn", "torch.optim", "torch.amp")):
        for k, v in vars(obj).items():
            yield from tensors_in(v, f"{path}.{k}", seen)


def refined_model(field_cfg, space) -> Model:
    """A model after an occupancy update and one refinement, with the layouts' cached tables computed."""
    model = Model.build(field_cfg, 16, space)
    model.estimator.update(model.field.density_at, OccupancyConfig(), 0.5)
    refine(model.estimator, 32, carried_modules(model.field))
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


def test_the_preset_follows_the_device(general_scene, tmp_path, monkeypatch):
    """A plain `voxnerf train` sizes the run for where it trains: the layout's preset on CUDA (2^18 samples per step,
    a grid up to 256^3, fp16 autocast), with configs/cpu.yaml over it on a CPU with native bf16; for an object scene
    there configs/blender.yaml + configs/cpu.yaml, which the lego benchmark composes into the one preset its runs read
    (issue 15: the plain command scores what the benchmark scores)."""
    from voxnerf.system.device import amp_dtype_for
    from voxnerf.train import presets
    from voxnerf.train.presets import build_config, default_config

    monkeypatch.setattr(presets, "cpu_has_fast_bf16", lambda: True)
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
    from voxnerf.run.config import compose_presets, config_to_dict

    object_scene = dataclasses.replace(general_scene, masks=None, background=np.ones(3))
    path, overlays = default_config(object_scene, tmp_path, False, torch.device("cpu"))
    assert [p.name for p in (path, *overlays)] == ["blender.yaml", "cpu.yaml"]
    composed = tmp_path / "composed.yaml"  # what benchmarks/lego_cpu.py hands its runs
    composed.write_text(yaml.safe_dump(compose_presets([path, *overlays])))
    plain = build_config(path, [], None, 120.0, None, overlays)
    assert config_to_dict(build_config(composed, [], None, 120.0, None)) == config_to_dict(plain)
    monkeypatch.setattr(presets, "cpu_has_fast_bf16", lambda: False)  # fp32 steps: the overlay where it was kept
    unbounded_scene = dataclasses.replace(general_scene, masks=None)
    for scene, names in ((object_scene, ["cpu.yaml", "cpu-fp32.yaml"]), (general_scene, ["cpu.yaml"]),
                         (unbounded_scene, ["cpu.yaml"])):
        assert [p.name for p in default_config(scene, tmp_path, False, torch.device("cpu"))[1]] == names


TOY = {"levels": [{"until": 1.0, "resolution": 32, "image_scale": 1.0}], "occupancy": {"warmup_steps": 2},
       "optim": {"target_samples": 4096, "min_rays": 128, "max_rays": 512}, "max_steps": 100, "threads": 2}


@pytest.fixture(scope="module")
def sphere(tmp_path_factory):
    import voxnerf.scenes as toy_scenes

    return toy_scenes.make_scene("sphere", tmp_path_factory.mktemp("device") / "sphere", n_train=8, n_val=1,
                                 n_test=1, size=24, n_samples=32)


def trained_for(trainer, steps: int):
    for _ in range(steps):
        trainer.train_step()
        trainer.step += 1
    trainer.checkpoint()
    return trainer


def test_a_checkpoint_written_on_the_cpu_resumes_on_another_device_with_nothing_left_behind(sphere, tmp_path,
                                                                                         monkeypatch):
    """Resume on the meta device (the stand-in for CUDA): the model, the optimizer's moments, the training images
    and cameras all land there. A random stream cannot live on the meta device: the stand-in keeps it on the CPU,
    and a stream saved on another kind of device restarts fresh (CPU and CUDA generator states differ)."""
    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train.distributed import World
    from voxnerf.train.trainer import Trainer

    scene, cfg = load_scene(sphere), load_config(None, [TOY])
    trained_for(Trainer(scene, cfg, tmp_path, torch.device("cpu"), quiet=True), 3)
    generator = World.generator
    monkeypatch.setattr(World, "generator", lambda self, seed, state=None, step=0, device="cpu":
                        generator(self, seed, state, step, "cpu" if str(device) == "meta" else device))
    resumed = Trainer(scene, cfg, tmp_path, torch.device("meta"), resume=True, quiet=True)
    resumed.sampler.at_scale(1.0)
    found = list(tensors_in(resumed, "trainer"))
    assert any("optimizer.state" in p for p, _ in found) and any("sampler._pyramid" in p for p, _ in found)
    left = [p for p, t in found if t.device.type != "meta"]
    assert not left, f"left off the device after resuming: {left}"
    assert resumed.step == 3


def test_the_loss_scale_of_an_fp16_run_survives_a_resume(sphere, tmp_path, monkeypatch):
    """The GradScaler's scale and growth tracker are in the checkpoint (a resumed fp16 run would otherwise restart
    at scale 65536 and skip steps finding it again). Checked with fp16 on the CPU, standing in for CUDA, and a scaler
    that grows every 3 steps."""
    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train import trainer as trainer_module

    scaler = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: scaler(device, enabled=enabled,
                                                                                init_scale=1024.0, growth_interval=3))
    scene, cfg = load_scene(sphere), load_config(None, [TOY, {"precision": "fp16"}])
    first = trained_for(trainer_module.Trainer(scene, cfg, tmp_path, torch.device("cpu"), quiet=True), 4)
    saved = first.scaler.state_dict()
    assert saved["scale"] == 2048.0 and saved["_growth_tracker"] == 1  # grew once after 3 steps, then 1 more
    resumed = trainer_module.Trainer(scene, cfg, tmp_path, torch.device("cpu"), resume=True, quiet=True)
    assert resumed.scaler.state_dict() == saved


def test_custom_autograd_functions_follow_autocast():
    """Every torch.autograd.Function in voxnerf declares how it runs under autocast (custom_fwd / custom_bwd), and
    the torch floor in pyproject is the release whose APIs the code uses (torch.amp.custom_fwd, fused CPU Adam)."""
    import importlib
    import pkgutil
    import re
    from pathlib import Path

    import voxnerf

    functions = set()
    for info in pkgutil.walk_packages(voxnerf.__path__, "voxnerf."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        functions |= {v for v in vars(module).values()
                      if isinstance(v, type) and issubclass(v, torch.autograd.Function) and v.__module__ == info.name}
    assert functions, "no custom autograd Function found (the walk is broken)"
    for fn in functions:
        assert hasattr(fn.forward, "__wrapped__") and hasattr(fn.backward, "__wrapped__"), fn
    pyproject = (Path(voxnerf.__file__).parents[1] / "pyproject.toml").read_text()
    floor = tuple(int(x) for x in re.search(r'"torch>=(\d+)\.(\d+)', pyproject).groups())
    assert floor >= (2, 4)


def test_the_gpu_presets_finest_grid_and_adams_state_fit_a_quarter_of_a_24_gb_card():
    """The default (GPU) preset's finest level with every cell occupied (the worst case: the grid only subdivides
    occupied cells), built on the meta device: parameters, their gradients and Adam's two moments, plus the
    buffers, take at most a quarter of a 24 GB card, leaving the rest to a step's samples and the photos."""
    cfg = load_config(None, [])
    with torch.device("meta"):
        model = Model.build(cfg.field, cfg.levels[-1].resolution, Box([0.0, 0.0, 0.0], 1.0))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert 4 * params + buffers <= 6e9, (params, buffers)  # 256^3: 3.8 + 0.1 GB; 512^3 would be 8x


@pytest.mark.parametrize("flags, native", [
    ("fpu sse2 avx2 fma", False),  # AVX2 only: oneDNN emulates bf16 and says so
    ("fpu avx2 avx512f avx512bw avx512vl avx512_vnni", False),  # an AVX512 Xeon without bf16: oneDNN says yes
    ("fpu avx2 avx512f avx512bw avx512_bf16", True),
    ("fpu avx2 avx512f amx_tile amx_bf16", True),
])
def test_bf16_autocast_is_picked_only_where_the_cpu_lists_bf16_instructions(flags, native, tmp_path, monkeypatch):
    from voxnerf.system import device

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nmodel\t\t: 1\nflags\t\t: {flags}\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert device.cpu_flags(str(cpuinfo)) == set(flags.split())  # the first CPU's line
    assert (device.cpu_info("model name", str(cpuinfo)), device.cpu_info("model", str(cpuinfo))) == ("a CPU", "1")
    monkeypatch.setattr(device, "cpu_flags", lambda: frozenset(flags.split()))
    device.cpu_has_fast_bf16.cache_clear()
    try:
        assert device.amp_dtype_for("auto", torch.device("cpu")) == (torch.bfloat16 if native else None)
    finally:
        device.cpu_has_fast_bf16.cache_clear()


def test_cpu_flags_of_a_system_without_cpuinfo_are_none(tmp_path):
    from voxnerf.system.device import cpu_flags

    assert cpu_flags(str(tmp_path / "missing")) == frozenset()
