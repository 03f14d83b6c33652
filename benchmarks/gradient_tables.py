"""What keeping the grid's gradient tables from step to step saves a training step (issue 39 item 1;
voxnerf.fields.row_space.GradientTables): lego_100 trained briefly at 64^3, then refined by the strategy to 128^3 and
256^3 (as step_cost.py does), and at each size blocks of steps alternate in one process between the kept tables
(today) and a new zeroed table at every step (before), so that the machine's drift hits both arms alike.

    python benchmarks/gradient_tables.py            # about 5 minutes on 2 cores

Per size: rows of the grid, the median step of each arm and their ratio. A table above glibc's largest heap block
(32 MB: 0.67 M rows of 12 features) comes from `mmap` when it is allocated afresh, and its pages fault in again at
every step; a kept table is only zeroed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_name
from step_cost import DATA, lego_at_each_size


def new_each_step():
    """GradientTables as before them: a new zeroed table at every step."""
    import torch

    from voxnerf.fields.row_space import GradientTables

    class NewEachStep(GradientTables):
        def zeroed(self, name, table):
            return torch.zeros_like(table, memory_format=torch.contiguous_format)

    return NewEachStep()


def alternate(trainer, blocks: int, steps: int) -> dict[str, list[float]]:
    """Step times (s) of each arm over `blocks` alternating blocks of `steps` steps (a block's first step, which
    may allocate, is left out)."""
    from voxnerf.fields.row_space import GradientTables

    grid = trainer.model.field.grid
    arms = {"kept": GradientTables(), "new each step": new_each_step()}
    times = {arm: [] for arm in arms}
    for _ in range(blocks):
        for arm, tables in arms.items():
            grid.gradient_tables = tables
            for i in range(steps + 1):
                start = time.perf_counter()
                trainer.train_step()
                trainer.step += 1
                if i:
                    times[arm].append(time.perf_counter() - start)
    grid.gradient_tables = arms["kept"]
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warm-steps", type=int, default=300, help="steps at 64^3 before refining")
    p.add_argument("--blocks", type=int, default=8, help="alternating blocks per arm at each size")
    p.add_argument("--steps", type=int, default=5, help="timed steps per block")
    args = p.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found: {DATA} (the shared NeRF-Synthetic lego_100 folder)")
    from voxnerf.system.device import cpu_has_fast_bf16

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for resolution, trainer in lego_at_each_size({}, args.warm_steps, Path(tmp)):
            times = alternate(trainer, args.blocks, args.steps)
            rows.append((resolution, trainer.model.estimator.bricks.num_rows,
                         {arm: 1e3 * statistics.median(t) for arm, t in times.items()}))
    bf16 = "native bf16" if cpu_has_fast_bf16() else "no native bf16 (fp32)"
    print(f"{cpu_name()}, {bf16}, 2 threads; lego_100, medians of {args.blocks * args.steps} steps an arm, "
          f"alternating blocks of {args.steps}")
    print("| grid | rows | step, kept tables | step, a new table each step | kept / new |")
    print("|---|---|---|---|---|")
    for resolution, num_rows, ms in rows:
        print(f"| {resolution}^3 | {num_rows / 1e6:.2f} M | {ms['kept']:.1f} ms | {ms['new each step']:.1f} ms | "
              f"{ms['kept'] / ms['new each step']:.2f}x |")


if __name__ == "__main__":
    main()
