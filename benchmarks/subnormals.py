"""What subnormal floats cost training on this CPU (voxnerf.system.denormals): two short runs of one scene side by
side, the CPU's FTZ/DAZ flags off (voxnerf before it set them) and on (today).

    python benchmarks/subnormals.py SCENE [--budget 90]      # about 4 minutes on 2 cores

Each arm trains the scene with its auto-picked preset for --budget seconds (no scoring), then counts the subnormal
entries of Adam's moments of every per-row table, then times --steps more steps (medians: the whole step and
Adam's step). Prints one row per arm and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_name
from step_cost import Timed


def subnormal_share(optimizer) -> float:
    """Share of the subnormal entries among the first moments of an optimizer's per-row tables (> 100k entries)."""
    import torch

    tiny = torch.finfo(torch.float32).tiny
    subnormal = total = 0
    for state in optimizer.state.values():
        moment = state.get("exp_avg")
        if moment is not None and moment.numel() > 100_000:
            subnormal += int(((moment != 0) & (moment.abs() < tiny)).sum())
            total += moment.numel()
    return subnormal / max(total, 1)


def median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def run_arm(scene_dir: Path, flush: bool, budget: float, steps: int) -> dict:
    """Train `budget` seconds with the flags as `flush` says, then time `steps` more steps."""
    import torch

    from voxnerf.train.session import prepare
    from voxnerf.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        scene, cfg = prepare(scene_dir, None, Path(out), False, [], max_time=budget, threads=2)
        trainer = Trainer(scene, cfg, Path(out), torch.device("cpu"), quiet=True)
        torch.set_flush_denormal(flush)  # the Trainer sets the flags; the "off" arm clears them again
        trainer.train()
        done, share = trainer.step, subnormal_share(trainer.optimizer)
        adam = trainer.optimizer.step = Timed(trainer.optimizer.step)
        step_times = []
        for _ in range(steps):
            start = time.perf_counter()
            trainer.train_step()
            trainer.step += 1
            step_times.append(time.perf_counter() - start)
    torch.set_flush_denormal(True)
    return {"steps": done, "subnormal": share, "step_ms": median_ms(step_times), "adam_ms": median_ms(adam.times)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scene", type=Path, help="a scene folder voxnerf trains on")
    p.add_argument("--budget", type=float, default=90.0, help="seconds of training per arm")
    p.add_argument("--steps", type=int, default=30, help="steps timed after the budget")
    args = p.parse_args()
    if not args.scene.is_dir():
        sys.exit(f"{args.scene}: not a folder (a scene voxnerf trains on)")
    arms = {flush: run_arm(args.scene.resolve(), flush, args.budget, args.steps) for flush in (False, True)}
    print(f"{cpu_name()}, 2 threads; {args.scene}, {args.budget:.0f} s a run")
    print("| FTZ/DAZ | steps in the budget | subnormal first moments | step | Adam step |")
    print("|---|---|---|---|---|")
    for flush, r in arms.items():
        print(f"| {'on (today)' if flush else 'off (before)'} | {r['steps']} | {100 * r['subnormal']:.1f}% | "
              f"{r['step_ms']:.1f} ms | {r['adam_ms']:.1f} ms |")
    off, on = arms[False], arms[True]
    print(f"flags on: x{on['steps'] / off['steps']:.2f} the steps, a step x{on['step_ms'] / off['step_ms']:.2f}, "
          f"Adam x{on['adam_ms'] / off['adam_ms']:.2f}")


if __name__ == "__main__":
    main()
