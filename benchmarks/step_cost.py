"""What a training step costs against the rows of the grid (issue 39 item 1): lego_100 trained briefly at 64^3, then
refined to 128^3 and 256^3 (the strategy's own refinement: pruned to the occupied cells, then subdivided), and
timed at the same samples per step (the trainer's `optim.target_samples` holds them) at each size. (Until
2026-12 it also timed a row-sparse Adam, `optim.row_sparse`; no preset chose it and it was deleted in issue 84.)

    python benchmarks/step_cost.py            # about 6 minutes on 2 cores

Per size: rows of the grid, samples per step, median step time, and the parts that scale with the table rather
than with the samples: the optimizer step, `zero_grad`, and the occupancy update (every `occupancy.update_every`
steps, shown per step). The last line says what a doubling of the rows costs a step:
(t_256 / t_128) ** (1 / log2(rows_256 / rows_128)); issue 39 asks for at most 1.3.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_name
from revisions import REPO

DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
CONFIG = {"levels": [{"until": 1.0, "resolution": 64, "image_scale": 1.0}], "occupancy": {"warmup_steps": 16},
          "max_steps": 10**9, "checkpoint_every": 10**9, "threads": 2}
CPU_BATCH = {"target_samples": 32768, "min_rays": 256, "max_rays": 2048}  # configs/cpu.yaml's step


class Timed:
    """Wraps a callable and keeps the duration of each call."""

    def __init__(self, fn):
        self.fn, self.times = fn, []

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.times.append(time.perf_counter() - start)


def lego_at_each_size(warm_steps: int, out: Path):
    """lego_100 trained `warm_steps` steps at 64^3 with the CPU preset's step, writing to `out`, then
    refined by the strategy to 128^3 and to 256^3: yields (resolution, trainer) at each size."""
    import torch

    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train.trainer import Trainer

    config = {**CONFIG, "optim": CPU_BATCH}
    trainer = Trainer(load_scene(DATA), load_config(None, [config]), out, torch.device("cpu"), quiet=True)
    for _ in range(warm_steps):
        trainer.train_step()
        trainer.step += 1
    for resolution in (128, 256):
        trainer.strategy.update_occupancy(trainer.model)
        trainer.strategy.refine(trainer.model, resolution, trainer.optimizer)
        yield resolution, trainer


def measure(trainer, steps: int) -> dict:
    """Median step time of `steps` steps (after 5 to settle), its optimizer step and zero_grad, and the occupancy
    update's time per step."""
    for _ in range(5):
        trainer.train_step()
        trainer.step += 1
    optimizer = trainer.optimizer
    step_fn, zero_fn = Timed(optimizer.step), Timed(optimizer.zero_grad)
    optimizer.step, optimizer.zero_grad = step_fn, zero_fn
    times, samples = [], []
    try:
        for _ in range(steps):
            start = time.perf_counter()
            stats = trainer.train_step()
            times.append(time.perf_counter() - start)
            samples.append(stats["samples_per_ray"] * stats["rays"])
            trainer.step += 1
    finally:
        del optimizer.step, optimizer.zero_grad
    every = trainer.strategy.occupancy.update_every  # a step after warm-up that updates occupancy
    update = Timed(lambda: trainer.strategy.step_post_backward(every * 100 - 1, 0.0, trainer.model, trainer.optimizer))
    for _ in range(3):
        trainer.train_step()
        trainer.step += 1
        update()
    return {"rows": trainer.model.estimator.bricks.num_rows, "samples": statistics.median(samples),
            "step_ms": 1e3 * statistics.median(times), "adam_ms": 1e3 * statistics.median(step_fn.times),
            "zero_grad_ms": 1e3 * statistics.median(zero_fn.times),
            "occupancy_ms": 1e3 * statistics.median(update.times) / every}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warm-steps", type=int, default=300, help="steps at 64^3 before refining")
    p.add_argument("--steps", type=int, default=30, help="timed steps at each size")
    args = p.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found: {DATA} (the shared NeRF-Synthetic lego_100 folder)")
    from voxnerf.system.device import cpu_has_fast_bf16

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for resolution, trainer in lego_at_each_size(args.warm_steps, Path(tmp)):
            results[resolution] = measure(trainer, args.steps)
    bf16 = "native bf16" if cpu_has_fast_bf16() else "no native bf16 (fp32)"
    print(f"{cpu_name()}, {bf16}, 2 threads; lego_100, medians of {args.steps} steps")
    print("| grid | rows | samples/step | step | optimizer step | zero_grad | occupancy update (per step) |")
    print("|---|---|---|---|---|---|---|")
    for resolution, r in results.items():
        print(f"| {resolution}^3 | {r['rows'] / 1e6:.2f} M | {r['samples'] / 1e3:.0f}k | "
              f"{r['step_ms']:.1f} ms | {r['adam_ms']:.1f} ms | {r['zero_grad_ms']:.1f} ms | "
              f"{r['occupancy_ms']:.1f} ms |")
    small, large = results[128], results[256]
    doublings = math.log2(large["rows"] / small["rows"])
    ratio = (large["step_ms"] + large["occupancy_ms"]) / (small["step_ms"] + small["occupancy_ms"])
    print(f"rows x{large['rows'] / small['rows']:.2f}, step (with its share of occupancy updates) "
          f"x{ratio:.2f}: x{ratio ** (1 / doublings):.2f} a step per doubling of the rows (issue 39: <= 1.3)")


if __name__ == "__main__":
    main()
