"""Each command's speed on a busy CPU (issues 16 and 26): lego_100 with the cpu preset, idle and beside one busy
low-priority process (`nice -n 19`, a Python busy loop pinned to no core, in its own session), in one invocation.

Each run is a `voxnerf` command in its own process; the busy loop starts before the run and is killed after it.
Runs alternate (idle, busy, idle, busy, ... for each command and thread setting) so that both conditions see the
same machine. Measured, per command:

- train: `--budget` seconds of training; the median rays/s of the second half of its metric rows, the steps and
  the final test PSNR (every 25th test view).
- eval: every `--eval-every`-th test view of a trained run; its rays/s as `voxnerf eval` reports it (rendering
  only, not the start-up).
- render: the test views (every one) and a `--frames`-frame orbit; the command's wall-clock seconds.
- export: a mesh at `--iso` and `--export-resolution`; the command's wall-clock seconds.
- side-by-side: a training and, beside it, renders one after another until it ends (two voxnerf processes, each
  seeing the other as the busy one): the training's rays/s and the renders' median seconds, against each alone.

Then per command and setting the median speed beside the load as a fraction of the idle one. The 1-minute load
average at the end of each run (other users' jobs show there) is printed as the runs go. eval, render, export and
side-by-side use one run trained idle for `--budget` seconds at the start (or a copy of `--run`).

    python benchmarks/contention_cpu.py                       # training, the default thread choice, 120 s each
    python benchmarks/contention_cpu.py --threads auto,1,2 --budget 60 --repeats 2
    python benchmarks/contention_cpu.py --commands eval,render,export,side-by-side --threads auto,2

Run it alone (e.g. under `flock /tmp/voxnerf-heavy.lock`): other jobs on the machine are part of the measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from machine import cpu_name

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
BUSY_LOOP = "while True: pass"
COMMANDS = ("train", "eval", "render", "export", "side-by-side")
CONDITIONS = {"side-by-side": ("alone", "side by side")}  # the others: idle, and beside the busy loop
IDLE_BUSY = ("idle", "busy")


def voxnerf(args: list[str], threads: str) -> list[str]:
    """`python -m voxnerf ARGS --device cpu` with `threads` ('auto': the default choice, or a count)."""
    return [sys.executable, "-m", "voxnerf", *args, "--device", "cpu"] + ([] if threads == "auto" else
                                                                          ["--threads", threads])


def seconds_of(command: list[str]) -> float:
    """Run `command` in the repository; its wall-clock seconds (SystemExit with its stderr when it fails)."""
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if result.returncode:
        raise SystemExit(f"{' '.join(command[2:4])} failed:\n{result.stderr}")
    return time.perf_counter() - start


def train_command(args: argparse.Namespace, out: Path, threads: str) -> list[str]:
    """A `voxnerf train` of `args.budget` seconds into `out` (overwritten)."""
    return voxnerf(["train", str(args.scene), "--config", "cpu", "--out", str(out), "--max-time", str(args.budget),
                    "--overwrite", "--quiet", "--set", "eval_every_view=25", "--set", "log_every=5"], threads)


def render_command(args: argparse.Namespace, out: Path, threads: str) -> list[str]:
    """A `voxnerf render` of the run's test views and a `args.frames`-frame orbit into `out`."""
    return voxnerf(["render", str(args.run), "--out", str(out), "--frames", str(args.frames), "--quiet"], threads)


def training_metrics(out: Path) -> dict[str, float]:
    """A finished training's median rays/s over the second half of its metric rows, steps and final PSNR."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tail = rows[len(rows) // 2:]
    return {"train rays/s": statistics.median(r["rays_per_s"] for r in tail), "steps": rows[-1]["step"],
            "final PSNR": json.loads((out / "eval.json").read_text())["mean"]["psnr"]}


def train(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """One `voxnerf train` run of `args.budget` seconds."""
    seconds_of(train_command(args, out, threads))
    return training_metrics(out)


def evaluate(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """`voxnerf eval` of every `args.eval_every`-th test view: the rendering's rays/s (RUN/eval.json)."""
    seconds_of(voxnerf(["eval", str(args.run), "--every", str(args.eval_every), "--quiet"], threads))
    scores = json.loads((args.run / "eval.json").read_text())
    return {"eval rays/s": scores["rays"] / scores["render_seconds"]}


def render(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """`voxnerf render` of the test views and an orbit: its seconds."""
    return {"render s": seconds_of(render_command(args, out, threads))}


def export(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """`voxnerf export --mesh`: its seconds."""
    extra = ["--resolution", str(args.export_resolution)] if args.export_resolution else []
    return {"export s": seconds_of(voxnerf(["export", str(args.run), "--mesh", str(out / "mesh.ply"), "--iso",
                                            args.iso, *extra], threads))}


def side_by_side(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """A training and, beside it, renders one after another until it ends: rays/s and median render seconds."""
    log = out / "train.log"
    with log.open("w") as stderr:
        training = subprocess.Popen(train_command(args, out / "train", threads), stdout=subprocess.DEVNULL,
                                    stderr=stderr, cwd=REPO)
        renders = []
        while training.poll() is None:
            renders.append(seconds_of(render_command(args, out / "renders", threads)))
    if training.returncode:
        raise SystemExit(f"training failed:\n{log.read_text()}")
    return {**training_metrics(out / "train"), "render s": statistics.median(renders)}


def alone(args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """What `side_by_side` measures, the training and a render each run alone."""
    return {**train(args, out / "train", threads), **render(args, out / "renders", threads)}


MEASURES: dict[str, Callable[[argparse.Namespace, Path, str], dict[str, float]]] = {
    "train": train, "eval": evaluate, "render": render, "export": export}


@contextlib.contextmanager
def busy_loop() -> Iterator[None]:
    """A `nice -n 19` Python busy loop in a session of its own, as a job started from another terminal runs, for
    the duration of the block. (Linux's autogroup scheduling shares the CPU between sessions first: started from
    this session the busy loop's nice value would make it all but vanish, 95% of idle training throughput with 2
    threads.)"""
    busy = subprocess.Popen(["setsid", "nice", "-n", "19", sys.executable, "-c", BUSY_LOOP])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


def measure(command: str, loaded: bool, args: argparse.Namespace, out: Path, threads: str) -> dict[str, float]:
    """One run of `command`, idle or (`loaded`) beside the busy loop; side-by-side: alone or side by side."""
    out.mkdir(parents=True)
    if command == "side-by-side":
        return (side_by_side if loaded else alone)(args, out, threads)
    with busy_loop() if loaded else contextlib.nullcontext():
        return MEASURES[command](args, out, threads)


def speed_ratio(metric: str, loaded: float, idle: float) -> str:
    """The loaded run's speed as a fraction of the idle one's (rays/s divide, seconds invert); '' for the others."""
    if metric.endswith("rays/s"):
        return f"{loaded / idle:.0%}"
    return f"{idle / loaded:.0%}" if metric.endswith(" s") else ""


def trained_run(args: argparse.Namespace, folder: Path) -> Path:
    """The run that eval, render, export and side-by-side measure: a copy of `args.run`, else one trained idle."""
    run = folder / "run"
    if args.run is not None:
        shutil.copytree(args.run, run)
    else:
        print(f"training the measured run ({args.budget:g} s) ...", flush=True)
        seconds_of(train_command(args, run, "auto"))
    return run


def print_table(args: argparse.Namespace, results: dict[tuple[str, str], dict[str, list[dict]]]) -> None:
    """One row per command, thread setting, condition and metric: the median of the runs, and the speed ratio."""
    print(f"\n{args.scene.name}, configs/cpu.yaml, {args.budget:g} s of training per run, {cpu_name()}\n")
    print("| command | threads | condition | metric | median of runs | loaded / idle speed |")
    print("|---|---|---|---|---|---|")
    for (command, threads), runs in results.items():
        idle_rows, loaded_rows = runs.values()
        for condition, rows in runs.items():
            for metric in rows[0]:
                value = statistics.median(r[metric] for r in rows)
                idle = statistics.median(r[metric] for r in idle_rows)
                ratio = speed_ratio(metric, value, idle) if rows is loaded_rows else ""
                print(f"| {command} | {threads} | {condition} | {metric} | {value:.4g} | {ratio} |")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commands", default="train", help=f"comma-separated, of: {', '.join(COMMANDS)}")
    p.add_argument("--budget", type=float, default=120.0, help="training seconds per training run")
    p.add_argument("--threads", default="auto", help="comma-separated thread settings: auto (the default) or N")
    p.add_argument("--repeats", type=int, default=1, help="runs of each command, setting and condition")
    p.add_argument("--scene", type=Path, default=DATA, help="the scene trained on (default: lego_100)")
    p.add_argument("--run", type=Path, default=None, help="a trained run for eval, render, export (copied)")
    p.add_argument("--eval-every", type=int, default=5, help="eval scores every k-th test view")
    p.add_argument("--frames", type=int, default=24, help="frames of render's orbit")
    p.add_argument("--iso", default="auto", help="export's --iso")
    p.add_argument("--export-resolution", type=int, default=None, help="export's --resolution (default: the grid's)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    args.commands = args.commands.split(",")
    unknown = set(args.commands) - set(COMMANDS)
    if unknown:
        p.error(f"--commands: unknown {', '.join(sorted(unknown))} (known: {', '.join(COMMANDS)})")
    if not args.scene.is_dir():
        p.error(f"scene not found: {args.scene} (default: the shared NeRF-Synthetic lego_100 folder)")
    return args


def main() -> None:
    args = parse_args()
    results: dict[tuple[str, str], dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if set(args.commands) - {"train"}:
            args.run = trained_run(args, Path(tmp))
        for k in range(args.repeats):
            for command in args.commands:
                for threads in args.threads.split(","):
                    conditions = CONDITIONS.get(command, IDLE_BUSY)
                    runs = results.setdefault((command, threads), {c: [] for c in conditions})
                    for loaded, condition in enumerate(conditions):
                        out = Path(tmp) / f"{command}-{threads}-{condition.replace(' ', '-')}-{k}"
                        runs[condition].append(measure(command, bool(loaded), args, out, threads))
                        print(f"{command} threads {threads} #{k + 1} {condition}: {runs[condition][-1]} (load "
                              f"average at the end {os.getloadavg()[0]:.1f})", flush=True)
    print_table(args, results)
    if args.json:
        rows = {f"{command} {threads}": runs for (command, threads), runs in results.items()}
        args.json.write_text(json.dumps({"cpu": cpu_name(), "budget": args.budget, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
