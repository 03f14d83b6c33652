"""The operations a training step dispatches and the host syncs it forces, by phase.

Every operation a step dispatches is a kernel launch on CUDA and some microseconds of dispatch on a CPU, so their
count bounds what a step can cost however fast the arithmetic. A TorchDispatchMode counts them on the CPU (the
proxy for CUDA launches; the autograd engine's backward ops included), with the ops that would make the host wait
on a CUDA device (tests/test_host_sync.py's `forces_sync`). Each op is charged to the phase of the step that
dispatched it: the phases are the trainer's own calls, wrapped for the count (the outermost phase wins, so the
march's density queries count as the march). Views (slices, reshapes, detaches: ops that launch no kernel on
CUDA) are counted among the ops and also on their own, so that ops less views is the count of launches:

- sample: drawing the batch of rays (train.ray_sampler)
- march: the space's march rays and the estimator's march (empty-space skipping, early termination)
- field: the field's differentiable density and color at the kept samples
- composite + loss: weights, compositing, loss and regularizers, and the rest of the step's own code
- backward, optimizer (GradScaler step and update), exchange (the gradient all-reduce: one process
  here), occupancy (the strategy after the step: occupancy update every `occupancy.update_every` steps, shown per
  step, and the level schedule)

Steps are counted after a warm-up at the row's finest grid (occupancy in use, skipping on), over a multiple of the
occupancy update's period. The counts do not depend on the machine or on what else runs; the sample counts do on
the scene.

    python benchmarks/step_ops.py                 # the three rows below, a few minutes on 2 cores
    python benchmarks/step_ops.py --rows cpu-128  # one row

Rows: `sphere` (the demo's toy sphere, configs/cpu.yaml at its 128^3 level), `cpu-128` (lego_100, the preset plain
`voxnerf train` picks on a CPU, at 128^3), `gpu-256` (lego_100, configs/blender.yaml's GPU sizes, 262k samples a
step, at 256^3, run on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from machine import cpu_name
from revisions import REPO

sys.path.insert(0, str(REPO / "tests"))
from test_host_sync import forces_sync  # noqa: E402  (the one definition of a host-syncing op)

import voxnerf.scenes as vs  # noqa: E402
from voxnerf.data import load_scene  # noqa: E402
from voxnerf.run.config import compose_presets, load_config  # noqa: E402
from voxnerf.train.trainer import Trainer  # noqa: E402

LEGO = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
CONFIGS = REPO / "configs"
PHASES = ("sample", "march", "field", "composite + loss", "backward", "optimizer", "exchange", "occupancy")
ROWS = {  # name: (scene, presets, finest resolution)
    "sphere": ("sphere", ["cpu"], 128),
    "cpu-128": ("lego_100", ["blender", "cpu"], 128),
    "gpu-256": ("lego_100", ["blender"], 256),
}


def is_view(func) -> bool:
    """Whether an op only makes a view of its input (view, slice, expand, detach, ...: every output aliases an
    input and none is written), or is `_unsafe_view`: no kernel runs for it on a CUDA device."""
    returns = func._schema.returns
    return func is torch.ops.aten._unsafe_view.default or bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns)


class OpCounter(TorchDispatchMode):
    """Counts dispatched ops, the views among them and host-syncing ops per phase while active; `phase(name)` names
    the phase of the code it wraps (an outer phase keeps ops of calls nested in it)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.current = "composite + loss"
        self.nested = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops[self.current] += 1
        if is_view(func):
            self.views[self.current] += 1
        if forces_sync(func, args, kwargs):
            self.syncs[self.current] += 1
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def phase(self, name: str):
        outer, self.nested = self.nested, self.nested + 1
        if not outer:
            self.current = name
        try:
            yield
        finally:
            self.nested = outer
            if not outer:
                self.current = "composite + loss"

    def wrap(self, owner, attribute: str, name: str) -> None:
        """Charge every call of owner.attribute to phase `name` (an instance attribute shadows the method)."""
        method = getattr(owner, attribute)

        def charged(*args, **kwargs):
            with self.phase(name):
                return method(*args, **kwargs)

        setattr(owner, attribute, charged)


def instrument(trainer: Trainer, counter: OpCounter) -> contextlib.ExitStack:
    """Wrap the trainer's calls in the counter's phases; undone when the returned stack closes."""
    stack = contextlib.ExitStack()
    model = trainer.model
    counter.wrap(trainer.sampler, "sample", "sample")
    counter.wrap(model.estimator.space, "march_rays", "march")
    counter.wrap(model.estimator, "march", "march")
    counter.wrap(model.field, "density", "field")
    counter.wrap(model.field, "color", "field")
    counter.wrap(trainer.world, "all_reduce_gradients", "exchange")
    counter.wrap(trainer.scaler, "step", "optimizer")
    counter.wrap(trainer.scaler, "update", "optimizer")
    counter.wrap(trainer.strategy, "step_post_backward", "occupancy")
    backward = torch.Tensor.backward

    def charged_backward(tensor, *args, **kwargs):
        with counter.phase("backward"):
            return backward(tensor, *args, **kwargs)

    torch.Tensor.backward = charged_backward
    stack.callback(setattr, torch.Tensor, "backward", backward)
    return stack


def scene_folder(name: str, tmp: Path) -> Path:
    if name == "sphere":
        return vs.make_scene("sphere", tmp / "sphere", n_train=24, n_val=1, n_test=1, size=64, n_samples=64)
    if not LEGO.is_dir():
        raise SystemExit(f"{LEGO}: not found (the lego rows need ../shared/data/nerf_synthetic/lego_100)")
    return LEGO


def count_row(name: str, warmup: int, steps: int, tmp: Path) -> dict:
    """Ops and syncs per step by phase for row `name`, with its samples per step."""
    scene_name, presets, resolution = ROWS[name]
    data = compose_presets([CONFIGS / f"{p}.yaml" for p in presets])
    cfg = load_config(None, [data, {"levels": [{"until": 1.0, "resolution": resolution, "image_scale": 1.0}],
                                    "max_steps": 10**9, "max_time": 0, "checkpoint_every": 10**9, "threads": 2,
                                    "occupancy": {"warmup_steps": warmup // 2}}])
    trainer = Trainer(load_scene(scene_folder(scene_name, tmp)), cfg, tmp / name, torch.device("cpu"), quiet=True)
    for _ in range(warmup):
        trainer.train_step()
        trainer.step += 1
    counter = OpCounter()
    samples = 0
    with instrument(trainer, counter), counter:
        for _ in range(steps):
            stats = trainer.train_step()
            trainer.step += 1
            samples += stats["samples_per_ray"] * stats["rays"]
    per_step = {p: counter.ops[p] / steps for p in PHASES}
    return {"row": name, "steps": steps, "samples_per_step": samples / steps,
            "ops": per_step, "ops_total": sum(per_step.values()),
            "views_total": sum(counter.views.values()) / steps,
            "syncs": {p: counter.syncs[p] / steps for p in PHASES if counter.syncs[p]},
            "syncs_total": sum(counter.syncs.values()) / steps}


def table(results: list[dict]) -> str:
    head = "| row | samples/step | " + " | ".join(PHASES) + " | ops/step | of which views | syncs/step |"
    lines = [head, "|" + "---|" * (len(PHASES) + 5)]
    for r in results:
        cells = " | ".join(f"{r['ops'][p]:.0f}" for p in PHASES)
        syncs = ", ".join(f"{p} {v:g}" for p, v in r["syncs"].items())
        lines.append(f"| {r['row']} | {r['samples_per_step'] / 1000:.1f}k | {cells} | {r['ops_total']:.0f} | "
                     f"{r['views_total']:.0f} | {r['syncs_total']:.2f} ({syncs}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    parser.add_argument("--warmup", type=int, default=120, help="steps at the finest grid before counting")
    parser.add_argument("--steps", type=int, default=32, help="steps counted (a multiple of occupancy.update_every)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"# {cpu_name()}, torch {torch.__version__}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.rows.split(","):
            results.append(count_row(name, args.warmup, args.steps, Path(tmp)))
            print(json.dumps(results[-1]), flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
