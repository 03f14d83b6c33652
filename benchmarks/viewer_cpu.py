"""The web viewer on the CPU (issue 15): how long one view takes to render at the viewer's image sizes, and how
much a watching browser slows training.

Render times: a trained lego_100 run (RUN, or a fresh 60 s run with configs/cpu.yaml) renders `--views` cameras on an orbit
around the scene at the training cameras' distance and field of view, square images of each `--sizes` side, the
way the viewer renders a browser's view (`Run.render_view` on one camera). Prints the median per size.

Training slowdown (`--training STEPS`): STEPS cpu-preset steps on lego_100 without a viewer and with `--viewer`
watched by headless Chromium (via playwright), alternating, `--repeats` times each; prints rays/s and the ratio.

    flock /tmp/voxnerf-heavy.lock python benchmarks/viewer_cpu.py --run runs/lego_100 --threads 2
    flock /tmp/voxnerf-heavy.lock python benchmarks/viewer_cpu.py --run runs/lego_100 --training 300
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"


def train(out: Path, threads: int, extra: list[str] = ()) -> subprocess.CompletedProcess:
    """`voxnerf train` lego_100 with the cpu preset into `out`."""
    command = [sys.executable, "-m", "voxnerf", "train", DATA, "--config", "cpu", "--out", out, "--threads",
               str(threads), "--quiet", "--overwrite", *extra]
    return subprocess.run(list(map(str, command)), capture_output=True, text=True, check=True)


def render_times(run_dir: Path, sizes: list[int], views: int, threads: int) -> dict[int, list[float]]:
    """Seconds per view of each square size, rendered as the viewer renders a browser's view (`Run.render_view`
    on one camera)."""
    import torch

    from voxnerf.data.cameras import focal_from_fov
    from voxnerf.run.load import load_run
    from voxnerf.view.paths import orbit_cameras

    torch.set_num_threads(threads)
    run = load_run(run_dir)
    cameras = run.training_cameras()
    orbit = orbit_cameras(cameras, run.record.bbox.mean(0), views)
    times = {}
    for side in sizes:
        fy = focal_from_fov(cameras.vertical_fov()[0], side)
        orbit.intrinsics[:] = [fy, fy, side / 2, side / 2]
        orbit.sizes[:] = side
        run.render_view(orbit, 0)  # warm-up
        times[side] = []
        for i in range(views):
            start = time.perf_counter()
            run.render_view(orbit.subset([i]), 0)
            times[side].append(time.perf_counter() - start)
    return times


def training_rays_per_second(steps: int, threads: int, watch: bool) -> float:
    """Mean training rays/s over wall time (metrics.jsonl: between log rows, viewer work included, load and
    scoring excluded), with a viewer watched by headless Chromium when `watch`."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        extra = ["--max-steps", str(steps), "--max-time", "100000", "--set", "log_every=25",
                 "--set", "eval_every_view=50"]  # 4 test views scored at the end
        if not watch:
            train(out, threads, extra)
        else:
            train_watched(out, threads, extra)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.mean(r["rays_per_s"] for r in rows[1:])


def train_watched(out: Path, threads: int, extra: list[str]) -> None:
    """Train with --viewer while headless Chromium watches; stop the viewer (SIGTERM) once training is scored."""
    import signal

    from playwright.sync_api import sync_playwright

    command = [sys.executable, "-m", "voxnerf", "train", DATA, "--config", "cpu", "--out", out, "--threads",
               str(threads), "--quiet", "--overwrite", "--viewer", "--viewer-port", "0", *extra]
    server = subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE, text=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 800, "height": 600})
        for line in server.stdout:
            if line.startswith("viewer ") and "http" in line and "Ctrl-C" not in line:
                page.goto(line.split()[1])
            if "shows the trained field" in line:
                break
        browser.close()
    server.send_signal(signal.SIGTERM)
    server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="a trained lego_100 run (default: train one for 60 s)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="64,128,200,256")
    parser.add_argument("--views", type=int, default=12)
    parser.add_argument("--training", type=int, default=0, help="also measure the training slowdown over this "
                                                                "many steps")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run
        if run_dir is None:
            run_dir = Path(tmp) / "lego_100"
            train(run_dir, args.threads, ["--max-time", "60"])
        times = render_times(run_dir, [int(s) for s in args.sizes.split(",")], args.views, args.threads)
    print(f"| view (px) | median s | min s | max s | µs per ray |  ({args.views} orbit views, {args.threads} threads)")
    print("|---|---|---|---|---|")
    for side, t in times.items():
        print(f"| {side}x{side} | {statistics.median(t):.3f} | {min(t):.3f} | {max(t):.3f} | "
              f"{1e6 * statistics.median(t) / side**2:.0f} |")
    if args.training:
        rates = {False: [], True: []}
        for _ in range(args.repeats):
            for watch in (False, True):
                rates[watch].append(training_rays_per_second(args.training, args.threads, watch))
        plain, watched = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"training rays/s: no viewer {[round(r) for r in rates[False]]} (median {plain:.0f}); watched "
              f"{[round(r) for r in rates[True]]} (median {watched:.0f}); ratio {watched / plain:.3f}")


if __name__ == "__main__":
    main()
