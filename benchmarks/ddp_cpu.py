"""Two processes x 1 thread against one process x 2 threads on lego_100 (CPU, gloo), for the same time budget.

Each configuration trains with `voxnerf train` (configs/cpu.yaml, --max-time BUDGET) and scores the test
views at a few training times (--eval-at; evaluation time is not counted). The script prints a Markdown table
of test PSNR against training time, steps, rays/s and the time each run took to reach the PSNR both reach, and
writes the numbers to OUT/ddp_cpu.json.

    python benchmarks/ddp_cpu.py                 # 300 s per configuration (plus evaluation time)
    python benchmarks/ddp_cpu.py --budget 20 --points 2 --every 50    # a smoke run (about 1.5 minutes)
    python benchmarks/ddp_cpu.py --budget 90 --points 2 --every 25 --repeats 3   # medians of 3 alternating pairs

Run it on an otherwise idle machine: with the two cores shared with other jobs, a 2-thread process slowed down
by more than 10x in our trials (threads waiting on each other), which says nothing about either configuration.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
LEGO = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
CONFIGURATIONS = {  # name -> `voxnerf train` options; both use the machine's 2 cores
    "2 processes x 1 thread": ["--nproc", "2", "--threads", "2"],
    "1 process x 2 threads": ["--threads", "2"],
}
BASELINE = "1 process x 2 threads"


def eval_times(budget: float, points: int) -> list[float]:
    """`points` evaluation times spread evenly over (0, budget], the last at the budget."""
    return [round(budget * (i + 1) / points, 1) for i in range(points)]


def train(name: str, options: list[str], args: argparse.Namespace, repeat: int) -> dict:
    """One `voxnerf train` run; its snapshots, final scores, steps and mean rays/s."""
    out = args.out / f"{name.replace(' ', '')}_{repeat}"
    times = eval_times(args.budget, args.points)
    command = [sys.executable, "-m", "voxnerf", "train", str(args.scene), "--config", "cpu", "--out", str(out),
               "--overwrite", "--quiet", "--device", "cpu", "--max-time", str(args.budget),
               "--eval-at", ",".join(map(str, times[:-1])), "--set", f"eval_every_view={args.every}", *options]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{name}: voxnerf train failed:\n{result.stderr}")
    checkpoint = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    final = json.loads((out / "eval.json").read_text())["mean"]["psnr"]
    snapshots = [{"time": s["time"], "step": s["step"], "psnr": s["psnr"]} for s in checkpoint["snapshots"]]
    snapshots.append({"time": checkpoint["elapsed"], "step": checkpoint["step"], "psnr": final})
    with open(out / "metrics.csv") as f:
        rays_per_s = [float(row["rays_per_s"]) for row in csv.DictReader(f)]
    return {"name": name, "options": options, "snapshots": snapshots, "steps": checkpoint["step"],
            "rays_per_s": sum(rays_per_s) / max(len(rays_per_s), 1), "wall_s": wall}


def time_to(run: dict, psnr: float) -> float | None:
    """The first evaluation time at which the run's test PSNR reached `psnr` (None if it never did)."""
    return next((s["time"] for s in run["snapshots"] if s["psnr"] >= psnr), None)


def table(runs: list[dict]) -> str:
    """Markdown: test PSNR at each evaluation time per run, steps, rays/s, time to the common PSNR."""
    common = min(run["snapshots"][-1]["psnr"] for run in runs)
    times = [f"{s['time']:.0f} s" for s in runs[0]["snapshots"]]
    lines = [f"| configuration | {' | '.join(times)} | steps | rays/s | time to {common:.2f} dB |",
             "|---|" + "---|" * (len(times) + 3)]
    for run in runs:
        psnrs = " | ".join(f"{s['psnr']:.2f}" for s in run["snapshots"])
        reached = time_to(run, common)
        lines.append(f"| {run['name']} | {psnrs} | {run['steps']} | {run['rays_per_s'] / 1e3:.1f}k | "
                     f"{'-' if reached is None else f'{reached:.0f} s'} |")
    return "\n".join(lines)


def medians(runs: list[dict]) -> str:
    """Per configuration: the median rays/s and final test PSNR over its repeats, and its rays/s as a multiple of
    one process's (BASELINE)."""
    rates = {name: statistics.median(r["rays_per_s"] for r in runs if r["name"] == name) for name in CONFIGURATIONS}
    lines = [f"| configuration | median rays/s | median final PSNR | rays/s ratio to {BASELINE} |", "|---|---|---|---|"]
    for name, rate in rates.items():
        psnr = statistics.median(r["snapshots"][-1]["psnr"] for r in runs if r["name"] == name)
        lines.append(f"| {name} | {rate / 1e3:.1f}k | {psnr:.2f} | {rate / rates[BASELINE]:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, default=LEGO, help="a NeRF-Synthetic scene folder")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training per configuration")
    parser.add_argument("--points", type=int, default=5, help="evaluations per run, evenly spaced, one at the end")
    parser.add_argument("--every", type=int, default=4, help="score every k-th test view")
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of each configuration")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench" / "ddp_cpu")
    args = parser.parse_args()
    if not args.scene.is_dir():
        sys.exit(f"{args.scene}: scene not found (--scene)")
    runs = [train(name, options, args, repeat) for repeat in range(args.repeats)
            for name, options in CONFIGURATIONS.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "torch": torch.__version__}
    (args.out / "ddp_cpu.json").write_text(json.dumps({"budget_s": args.budget, "machine": machine, "runs": runs},
                                                      indent=2))
    print(f"lego_100, configs/cpu.yaml, {args.budget:g} s of training each, test PSNR (dB) at training time:\n")
    print(table(runs))
    print()
    print(medians(runs))
    print(f"\nnumbers in {args.out / 'ddp_cpu.json'}")


if __name__ == "__main__":
    main()
