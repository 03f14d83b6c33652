"""Two processes x 1 thread against one process x 2 threads on lego_100 (CPU, gloo), for the same time budget.

Each configuration trains with `voxnerf train` (configs/cpu.yaml, --max-time BUDGET) and scores the test
views at a few training times (--eval-at; evaluation time is not counted). The script prints a Markdown table
of test PSNR against training time, steps, rays/s, samples/s and the time each run took to reach the PSNR all
reach, then the medians over repeats as multiples of one process's, and writes the numbers to OUT/ddp_cpu.json.

    python benchmarks/ddp_cpu.py                 # 300 s per configuration (plus evaluation time)
    python benchmarks/ddp_cpu.py --budget 20 --points 2 --every 50    # a smoke run (about 1.5 minutes)
    python benchmarks/ddp_cpu.py --budget 90 --points 2 --every 25 --repeats 3   # medians of 3 alternating pairs
    python benchmarks/ddp_cpu.py --budget 90 --points 2 --every 25 --ceiling      # and the no-communication ceiling

--ceiling adds a third configuration: two ordinary single-process runs of 1 thread each at the same time (seeds 0
and 1), which share nothing. Their summed throughput is what the machine's two cores give two processes with no
communication, no duplicated work and no waiting for each other: the most any 2-process data-parallel job could
reach here in samples/s (its rays/s also depend on how sharp each field is, which sets the samples per ray).

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
ONE_OMP_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}  # each run sets its own torch thread count (--threads)
CEILING = "2 independent processes x 1 thread"  # --ceiling: two single-process runs at once, no communication


def eval_times(budget: float, points: int) -> list[float]:
    """`points` evaluation times spread evenly over (0, budget], the last at the budget."""
    return [round(budget * (i + 1) / points, 1) for i in range(points)]


def command(out: Path, options: list[str], args: argparse.Namespace) -> list[str]:
    """The `voxnerf train` command of one run writing to `out`."""
    times = eval_times(args.budget, args.points)
    return [sys.executable, "-m", "voxnerf", "train", str(args.scene), "--config", "cpu", "--out", str(out),
            "--overwrite", "--quiet", "--device", "cpu", "--max-time", str(args.budget),
            "--eval-at", ",".join(map(str, times[:-1])), "--set", f"eval_every_view={args.every}", *options]


def train(name: str, options: list[str], args: argparse.Namespace, repeat: int) -> dict:
    """One `voxnerf train` run; its snapshots, final scores, steps and mean rays/s and samples/s."""
    out = args.out / f"{name.replace(' ', '')}_{repeat}"
    start = time.perf_counter()
    result = subprocess.run(command(out, options, args), capture_output=True, text=True, env=ONE_OMP_THREAD)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{name}: voxnerf train failed:\n{result.stderr}")
    return {"name": name, "options": options, **read_run(out), "wall_s": wall}


def train_independent(args: argparse.Namespace, repeat: int) -> dict:
    """CEILING: two single-process, 1-thread runs at once (seeds 0 and 1); throughputs summed, the rest averaged."""
    outs = [args.out / f"independent{seed}_{repeat}" for seed in (0, 1)]
    options = ["--threads", "1"]
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = [args.out / f"{out.name}.stderr" for out in outs]  # files, not pipes: neither run can block on its output
    processes = []
    for seed, (out, log) in enumerate(zip(outs, logs)):
        with open(log, "w") as stderr:
            processes.append(subprocess.Popen(command(out, [*options, "--set", f"seed={seed}"], args),
                                              env=ONE_OMP_THREAD, stdout=subprocess.DEVNULL, stderr=stderr))
    for process, log in zip(processes, logs):
        if process.wait() != 0:
            sys.exit(f"{CEILING}: voxnerf train failed:\n{log.read_text()}")
    wall = time.perf_counter() - start
    runs = [read_run(out) for out in outs]
    snapshots = [{"time": a["time"], "step": a["step"] + b["step"], "psnr": (a["psnr"] + b["psnr"]) / 2}
                 for a, b in zip(runs[0]["snapshots"], runs[1]["snapshots"])]
    return {"name": CEILING, "options": options, "snapshots": snapshots, "steps": sum(r["steps"] for r in runs),
            "rays_per_s": sum(r["rays_per_s"] for r in runs), "samples_per_s": sum(r["samples_per_s"] for r in runs),
            "wall_s": wall}


def read_run(out: Path) -> dict:
    """A finished run's snapshots (test PSNR at each --eval-at time and at the end), steps, and the means over its
    logged windows of rays/s and samples/s (rays/s x samples per ray)."""
    checkpoint = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    final = json.loads((out / "eval.json").read_text())["mean"]["psnr"]
    snapshots = [{"time": s["time"], "step": s["step"], "psnr": s["psnr"]} for s in checkpoint["snapshots"]]
    snapshots.append({"time": checkpoint["elapsed"], "step": checkpoint["step"], "psnr": final})
    with open(out / "metrics.csv") as f:
        rows = [(float(row["rays_per_s"]), float(row["samples_per_ray"])) for row in csv.DictReader(f)]
    return {"snapshots": snapshots, "steps": checkpoint["step"],
            "rays_per_s": statistics.fmean(r for r, _ in rows) if rows else 0.0,
            "samples_per_s": statistics.fmean(r * spr for r, spr in rows) if rows else 0.0}


def time_to(run: dict, psnr: float) -> float | None:
    """The first evaluation time at which the run's test PSNR reached `psnr` (None if it never did)."""
    return next((s["time"] for s in run["snapshots"] if s["psnr"] >= psnr), None)


def table(runs: list[dict]) -> str:
    """Markdown: test PSNR at each evaluation time per run, steps, rays/s, samples/s, time to the common PSNR (the
    CEILING's PSNR is the mean of its two runs, its steps and throughputs their sums)."""
    common = min(run["snapshots"][-1]["psnr"] for run in runs)
    times = [f"{s['time']:.0f} s" for s in runs[0]["snapshots"]]
    lines = [f"| configuration | {' | '.join(times)} | steps | rays/s | samples/s | time to {common:.2f} dB |",
             "|---|" + "---|" * (len(times) + 4)]
    for run in runs:
        psnrs = " | ".join(f"{s['psnr']:.2f}" for s in run["snapshots"])
        reached = time_to(run, common)
        lines.append(f"| {run['name']} | {psnrs} | {run['steps']} | {run['rays_per_s'] / 1e3:.1f}k | "
                     f"{run['samples_per_s'] / 1e3:.0f}k | {'-' if reached is None else f'{reached:.0f} s'} |")
    return "\n".join(lines)


def medians(runs: list[dict]) -> str:
    """Per configuration: the medians over its repeats of rays/s, samples/s and final test PSNR, and its rays/s and
    samples/s as multiples of one process's (BASELINE)."""
    names = dict.fromkeys(r["name"] for r in runs)
    median = {name: {key: statistics.median(r[key] for r in runs if r["name"] == name)
                     for key in ("rays_per_s", "samples_per_s")} for name in names}
    lines = [f"| configuration | median rays/s | median samples/s | median final PSNR | rays/s ratio | "
             f"samples/s ratio |", "|---|---|---|---|---|---|"]
    base = median[BASELINE]
    for name, m in median.items():
        psnr = statistics.median(r["snapshots"][-1]["psnr"] for r in runs if r["name"] == name)
        lines.append(f"| {name} | {m['rays_per_s'] / 1e3:.1f}k | {m['samples_per_s'] / 1e3:.0f}k | {psnr:.2f} | "
                     f"{m['rays_per_s'] / base['rays_per_s']:.2f} | {m['samples_per_s'] / base['samples_per_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, default=LEGO, help="a NeRF-Synthetic scene folder")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training per configuration")
    parser.add_argument("--points", type=int, default=5, help="evaluations per run, evenly spaced, one at the end")
    parser.add_argument("--every", type=int, default=4, help="score every k-th test view")
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of each configuration")
    parser.add_argument("--ceiling", action="store_true",
                        help=f"also run '{CEILING}' (two single-process runs at once, no communication)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench" / "ddp_cpu")
    args = parser.parse_args()
    if not args.scene.is_dir():
        sys.exit(f"{args.scene}: scene not found (--scene)")
    runs = []
    for repeat in range(args.repeats):
        runs += [train(name, options, args, repeat) for name, options in CONFIGURATIONS.items()]
        if args.ceiling:
            runs.append(train_independent(args, repeat))
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
