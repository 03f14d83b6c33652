"""The CUDA path is not launch-bound: a training step forces at most a few host syncs, in one process and in each of
two ranks (beyond the collectives themselves), and dispatches at most a budget of operations (launches on CUDA).

On CUDA, some ops make the host wait for the device: reading a value (`.item()`, `_local_scalar_dense`), ops whose
output size depends on the data (`nonzero`, boolean-mask indexing and index_put, `masked_select`, `unique`,
`repeat_interleave` without an output size, `bincount`). They are counted on the CPU with a TorchDispatchMode; the
difference between 2N and N steps is what one step costs, so set-up and the first batches don't count.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import voxnerf.scenes as vs
from voxnerf.data import load_scene
from voxnerf.run.config import load_config
from voxnerf.train.trainer import Trainer

SYNC_BUDGET = 4  # host syncs per training step (nerfacc + Instant-NGP: one or two); a rank adds the exchange's read
OP_BUDGET = 380  # operations per step of CONFIG's toy step (368 when set; benchmarks/step_ops.py counts the presets')

aten = torch.ops.aten
DATA_DEPENDENT = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
                  aten._unique2.default, aten.unique_consecutive.default, aten.unique_dim.default,
                  aten.bincount.default, aten.masked_scatter.default}


def forces_sync(func, args, kwargs) -> bool:
    """Whether a CUDA kernel launch of `func(*args, **kwargs)` would wait on the device."""
    if func in DATA_DEPENDENT:
        return True
    if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    if func is aten.repeat_interleave.Tensor:
        return kwargs.get("output_size") is None
    return False


class SyncCounter(TorchDispatchMode):
    """Counts host-syncing ops by name, and all ops, while active."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        if forces_sync(func, args, kwargs):
            self.count(str(func))
        return func(*args, **kwargs)

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class HostReadCounter(SyncCounter):
    """A SyncCounter that also counts the gradient exchange's read of its agreed byte buffer on the host
    (voxnerf.train.distributed._to_host: a device-to-host copy under NCCL, which the dispatcher does not see on the
    CPU). The collectives themselves are not counted."""

    def __enter__(self):
        import voxnerf.train.distributed as distributed

        read = distributed._to_host
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(distributed, "_to_host", lambda t: (self.count("exchange host read"), read(t))[1])
        return super().__enter__()

    def __exit__(self, *exc):
        self.patch.undo()
        return super().__exit__(*exc)


def syncs_over(trainer: Trainer, steps: int, counter_class: type = SyncCounter) -> SyncCounter:
    with counter_class() as counter:
        for _ in range(steps):
            trainer.train_step()
            trainer.step += 1
    return counter


@pytest.fixture(scope="module")
def sphere(tmp_path_factory) -> Path:
    return vs.make_scene("sphere", tmp_path_factory.mktemp("sync") / "sphere", n_train=12, n_val=1, n_test=1,
                         size=32, n_samples=64)


CONFIG = {
    "levels": [{"until": 1.0, "resolution": 64, "image_scale": 1.0}],
    "occupancy": {"warmup_steps": 2, "update_every": 8},
    "optim": {"target_samples": 8192, "min_rays": 256, "max_rays": 1024},
    "max_steps": 10_000,
    "log_every": 1000,
    "threads": 2,
}


def one_step(trainer: Trainer, counter_class: type = SyncCounter) -> tuple[SyncCounter, SyncCounter]:
    """Counters over N and 2N of `trainer`'s steps past the warm-up (occupancy in use, skipping on), N = 8 (one
    occupancy update): their difference is what N steps cost."""
    for _ in range(5):
        trainer.train_step()
        trainer.step += 1
    return syncs_over(trainer, 8, counter_class), syncs_over(trainer, 16, counter_class)


def syncs_per_step(trainer: Trainer, counter_class: type = SyncCounter) -> tuple[float, dict[str, float]]:
    """Host syncs of one of `trainer`'s steps past the warm-up, in all and by op."""
    one, two = one_step(trainer, counter_class)
    return (two.total - one.total) / 8, {k: (two.counts.get(k, 0) - one.counts.get(k, 0)) / 8 for k in two.counts}


def test_a_training_step_forces_at_most_the_sync_budget(sphere, tmp_path):
    trainer = Trainer(load_scene(sphere), load_config(None, [CONFIG]), tmp_path / "run", torch.device("cpu"),
                      quiet=True)
    per_step, detail = syncs_per_step(trainer)
    assert per_step <= SYNC_BUDGET, f"{per_step:.1f} host syncs per step (budget {SYNC_BUDGET}): {detail}"


def test_a_training_step_dispatches_at_most_the_op_budget(sphere, tmp_path):
    trainer = Trainer(load_scene(sphere), load_config(None, [CONFIG]), tmp_path / "run", torch.device("cpu"),
                      quiet=True)
    one, two = one_step(trainer)
    per_step = (two.ops - one.ops) / 8
    assert per_step <= OP_BUDGET, f"{per_step:.1f} operations per step (budget {OP_BUDGET})"


def syncs_on_rank(sphere: Path, out: Path) -> int:
    """Rank body: one rank of two trains the sphere and saves its host syncs per step (json)."""
    from voxnerf.train.distributed import world_from_env

    with world_from_env(torch.device("cpu")) as world:
        cfg = load_config(None, [CONFIG, {"threads": 1}])
        trainer = Trainer(load_scene(sphere), cfg, out / f"run{world.rank}", torch.device("cpu"), quiet=True,
                          world=world)
        world.copy_from_main(trainer.model)
        per_step, detail = syncs_per_step(trainer, HostReadCounter)
        (out / f"rank{world.rank}.json").write_text(json.dumps({"per_step": per_step, "detail": detail}))
    return 0


def test_a_step_of_two_ranks_forces_at_most_the_sync_budget_beyond_its_collectives(sphere, tmp_path):
    """Counted as one process is, with the exchange's own host read (the rows read, the flags, the statistics)."""
    from voxnerf.train.launch import launch_local

    assert launch_local(2, syncs_on_rank, sphere, tmp_path) == 0
    for rank in range(2):
        counted = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert counted["detail"]["exchange host read"] == 1
        assert counted["per_step"] <= SYNC_BUDGET + 1, f"rank {rank}: {counted} (budget {SYNC_BUDGET} + 1)"
