"""Training throughput on a busy CPU (issue 16): lego_100 with the cpu preset, idle and beside one busy
low-priority process (`nice -n 19`, a Python busy loop pinned to no core, in its own session), in one invocation.

Each run is `voxnerf train` in its own process for `--budget` seconds of training; the busy loop starts before
the run and is killed after it. Runs alternate (idle, busy, idle, busy, ... for each thread setting) so that both
conditions see the same machine. Reported: the median rays/s of the second half of each run's metric rows, the
steps, the final test PSNR (every 25th test view) and the 1-minute load average at the end of the run (other
users' jobs show there), then per setting the median busy/idle ratio.

    python benchmarks/contention_cpu.py                       # the default thread choice, 120 s each
    python benchmarks/contention_cpu.py --threads auto,1,2 --budget 60 --repeats 2

Run it alone (e.g. under `flock /tmp/voxnerf-heavy.lock`): other jobs on the machine are part of the measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
BUSY_LOOP = "while True: pass"


def cpu_name() -> str:
    """The CPU model and the cores this process may use."""
    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def train(out: Path, budget: float, threads: str) -> dict:
    """One `voxnerf train` run of `budget` seconds; `threads` is 'auto' (the default choice) or a count."""
    command = [sys.executable, "-m", "voxnerf", "train", str(DATA), "--config", "cpu", "--out", str(out),
               "--max-time", str(budget), "--device", "cpu", "--quiet", "--set", "eval_every_view=25", "--set", "log_every=5"]
    if threads != "auto":
        command += ["--threads", threads]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if result.returncode:
        raise SystemExit(f"training failed:\n{result.stderr}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tail = rows[len(rows) // 2:]
    return {"rays_per_s": statistics.median(r["rays_per_s"] for r in tail), "steps": rows[-1]["step"],
            "psnr": json.loads((out / "eval.json").read_text())["mean"]["psnr"], "load": os.getloadavg()[0]}


def train_beside_busy_loop(out: Path, budget: float, threads: str) -> dict:
    """`train` while a `nice -n 19` Python busy loop runs in a session of its own, as a job started from another
    terminal does. (Linux's autogroup scheduling shares the CPU between sessions first: started from this session
    the busy loop's nice value would make it all but vanish, 95% of idle throughput with 2 threads.)"""
    busy = subprocess.Popen(["setsid", "nice", "-n", "19", sys.executable, "-c", BUSY_LOOP])
    try:
        return train(out, budget, threads)
    finally:
        busy.kill()
        busy.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=120.0, help="training seconds per run")
    p.add_argument("--threads", default="auto", help="comma-separated thread settings: auto (the default) or N")
    p.add_argument("--repeats", type=int, default=1, help="runs of each setting and condition")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found: {DATA} (the shared NeRF-Synthetic lego_100 folder)")
    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            for threads in args.threads.split(","):
                runs = results.setdefault(threads, {"idle": [], "busy": []})
                runs["idle"].append(train(Path(tmp) / f"idle-{threads}-{k}", args.budget, threads))
                runs["busy"].append(train_beside_busy_loop(Path(tmp) / f"busy-{threads}-{k}", args.budget, threads))
                idle, busy = runs["idle"][-1], runs["busy"][-1]
                print(f"threads {threads} #{k + 1}: idle {idle['rays_per_s']:.0f} rays/s (load average at the end "
                      f"{idle['load']:.1f}), busy {busy['rays_per_s']:.0f} rays/s (load {busy['load']:.1f})",
                      flush=True)
    print(f"\nlego_100, configs/cpu.yaml, {args.budget:g} s per run, {cpu_name()}\n")
    print("| threads | condition | rays/s (median of runs) | steps | final PSNR | busy / idle |")
    print("|---|---|---|---|---|---|")
    for threads, runs in results.items():
        idle = statistics.median(r["rays_per_s"] for r in runs["idle"])
        for condition, rows in runs.items():
            rays = statistics.median(r["rays_per_s"] for r in rows)
            ratio = f"{rays / idle:.0%}" if condition == "busy" else ""
            print(f"| {threads} | {condition} | {rays:.0f} | {statistics.median(r['steps'] for r in rows):.0f} | "
                  f"{statistics.median(r['psnr'] for r in rows):.2f} | {ratio} |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "budget": args.budget, "results": results}, indent=2))


if __name__ == "__main__":
    main()
