"""A training step's time on the CPU, this tree against an earlier revision, side by side on one real scene of each
layout: lego_100 (synthetic), ethiopianHead_8 with its masks (object), beer (unbounded), flower (forward), each with
the presets plain `voxnerf train` picks on a CPU, at a 128^3 grid.

Per run: a process of one tree trains `--warmup` steps at the row's grid (occupancy in use, skipping on), then
times `--steps` steps; the median counts. The trees alternate within each row (`--pairs` times), so the machine's
drift hits both; the ratio of the medians of the runs' medians is the figure. Run it on a quiet machine.

    python benchmarks/step_time.py --before c8908f5          # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import cpu_name
from revisions import REPO, checkout

DATA = REPO.parent / "shared" / "data"
ROWS = {  # name: (scene folder, presets)
    "lego_100": (DATA / "nerf_synthetic" / "lego_100", "blender,cpu"),
    "ethiopianHead_8 object": (DATA / "captures" / "ethiopianHead_8", "object-masked,cpu"),
    "beer unbounded": (DATA / "captures" / "beer", "360,cpu"),
    "flower forward": (DATA / "captures" / "flower", "llff,cpu"),
}


def time_steps(scene: Path, presets: str, warmup: int, steps: int) -> dict:
    """Median step time (ms) after `warmup` steps, with the step's rays and samples per ray (in this process's tree)."""
    import time

    import torch

    from voxnerf.data import load_scene
    from voxnerf.run.config import compose_presets, load_config
    from voxnerf.train.presets import preset_path
    from voxnerf.train.trainer import Trainer

    torch.set_num_threads(2)
    data = compose_presets([preset_path(p) for p in presets.split(",")])
    cfg = load_config(None, [data, {"levels": [{"until": 1.0, "resolution": 128, "image_scale": 1.0}],
                                    "max_steps": 10**9, "max_time": 0, "checkpoint_every": 10**9, "threads": 2}])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(load_scene(scene), cfg, Path(tmp), torch.device("cpu"), quiet=True)
        for _ in range(warmup):
            trainer.train_step()
            trainer.step += 1
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            stats = trainer.train_step()
            trainer.step += 1
            times.append(time.perf_counter() - start)
    return {"ms": 1e3 * statistics.median(times), "rays": stats["rays"], "spr": stats["samples_per_ray"]}


def run(tree: Path, row: str, args: argparse.Namespace) -> dict:
    """`time_steps` of `row` in a process that imports voxnerf from `tree`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(Path(__file__).parent)])}
    cmd = [sys.executable, __file__, "--one", row, "--warmup", str(args.warmup), "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="an earlier revision to time beside this tree")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=2, help="runs of each tree per row, alternating")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(time_steps(*ROWS[args.one], args.warmup, args.steps)))
        return
    missing = [str(ROWS[r][0]) for r in args.rows.split(",") if not ROWS[r][0].is_dir()]
    if missing:
        sys.exit(f"not found: {', '.join(missing)} (the rows need ../shared/data)")
    print(f"# {cpu_name()}, 2 threads, median of {args.steps} steps after {args.warmup}, {args.pairs} runs a tree")
    print("| row | rays/step | samples/ray | before (ms) | this tree (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    with checkout(args.before or "HEAD") as before:
        for row in args.rows.split(","):
            runs: dict[str, list[dict]] = {"before": [], "after": []}
            for _ in range(args.pairs):
                runs["before"].append(run(before, row, args))
                runs["after"].append(run(REPO, row, args))
            b, a = (statistics.median(r["ms"] for r in runs[k]) for k in ("before", "after"))
            last = runs["after"][-1]
            print(f"| {row} | {last['rays']} | {last['spr']:.1f} | {b:.1f} | {a:.1f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
