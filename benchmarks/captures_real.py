"""Real photo captures on the CPU (issue 14): `voxnerf train` with the preset it picks and no overrides, 2 threads,
300 s, on a capture and on variants of it that exercise the other spaces.

Per run: test PSNR at --eval-at times and at the end, training rays/s and samples per ray (medians over the second
half of training), the scoring speed of the end-of-training evaluation (rays/s), the wall time of the whole run,
and the peak RSS of its process.

Variants of one LLFF-style capture (folders of links under --out; nothing is copied):
  as-is     the capture itself (ethiopianHead_8: masks, so an object capture in box space)
  no-masks  without its masks: the 360-degree capture as an unbounded scene (contract space)
  forward   only the photos within FORWARD_DEGREES of the middle photo's view direction: a forward-facing sweep
            (NDC space)

With --appearance VARIANTS, those variants train a second time with per-image appearance codes
(`field.appearance_dim=APPEARANCE_DIM`), right after the first. With --before VARIANTS and --before-set KEY=VALUE
(repeatable), those variants also train with the overrides that restore an earlier preset, side by side with
today's. With --repeats N every run is made N times, in rounds (all runs once, then again), and the table shows
the medians of each column.

    python benchmarks/captures_real.py                          # ethiopianHead_8, the three variants, 300 s each
    python benchmarks/captures_real.py PATH --variants no-masks --budget 120
    python benchmarks/captures_real.py --appearance as-is,no-masks
    python benchmarks/captures_real.py --repeats 2 --before as-is --before-set optim.distortion_weight=0
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CAPTURE = REPO.parent / "shared" / "data" / "captures" / "ethiopianHead_8"
VARIANTS = ("as-is", "no-masks", "forward")
FORWARD_DEGREES = 20.0
APPEARANCE_DIM = 8


def link_variant(capture: Path, variant: str, root: Path) -> Path:
    """The folder a variant trains on: the capture itself, or a folder of links to its parts."""
    if variant == "as-is":
        return capture
    out = root / f"{capture.name}_{variant}"
    if out.exists():
        return out
    out.mkdir(parents=True)
    if variant == "no-masks":
        for entry in capture.iterdir():
            if entry.name.lower() != "masks":
                (out / entry.name).symlink_to(entry.resolve())
        return out
    poses = np.load(capture / "poses_bounds.npy")
    forward = -poses[:, :15].reshape(-1, 3, 5)[:, :, 2]  # LLFF columns: down, right, backwards
    forward /= np.linalg.norm(forward, axis=1, keepdims=True)
    middle = forward[np.argmax(forward @ forward.mean(0))]
    keep = np.degrees(np.arccos(np.clip(forward @ middle, -1, 1))) <= FORWARD_DEGREES
    np.save(out / "poses_bounds.npy", poses[keep])
    (out / "images").mkdir()
    images = sorted(p for p in (capture / "images").iterdir() if p.is_file())
    for image, kept in zip(images, keep):
        if kept:
            (out / "images" / image.name).symlink_to(image.resolve())
    return out


def run_one(scene_dir: Path, out: Path, budget: float, eval_at: list[float], threads: int, sets: list[str]) -> dict:
    """Train with the auto-picked preset (and `sets`) in this process and measure."""
    from voxnerf.data import load_scene
    from voxnerf.train.session import preset_for, train_run

    preset, overlays, _ = preset_for(load_scene(scene_dir, with_images=False))
    preset = " + ".join([preset, *overlays])
    start = time.perf_counter()
    outcome = train_run(scene_dir, None, out, overwrite=True, device="cpu", max_time=budget, threads=threads,
                        eval_at=tuple(t for t in eval_at if t < budget), quiet=True, sets=sets)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    late = [r for r in rows if r["time"] >= budget / 2]
    scores = outcome.scores
    return {"scene": scene_dir.name, "preset": preset, "steps": outcome.steps, "psnr": scores["mean"]["psnr"],
            "snapshots": outcome.snapshots,
            "samples_per_ray": float(np.median([r["samples_per_ray"] for r in late])),
            "rays_per_s": float(np.median([r["rays_per_s"] for r in late])),
            "scoring_rays_per_s": scores["rays"] / scores["render_seconds"], "scoring_s": scores["render_seconds"],
            "wall_s": wall, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}


def table(rows: list[dict], eval_at: list[float]) -> str:
    head = ("| variant | preset | " + " | ".join(f"PSNR @{t:g} s" for t in eval_at) + " | steps | rays/s | "
            "samples/ray | scoring rays/s | wall | peak RSS |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        snaps = {s["time"]: s["psnr"] for s in r["snapshots"]}
        snaps[max(eval_at)] = r["psnr"]
        cells = " | ".join(f"{snaps[t]:.2f}" if t in snaps else "-" for t in eval_at)
        lines.append(f"| {r['variant']} | {r['preset']} | {cells} | {r['steps']:.0f} | {r['rays_per_s'] / 1e3:.1f}k | "
                     f"{r['samples_per_ray']:.1f} | {r['scoring_rays_per_s'] / 1e3:.1f}k | {r['wall_s']:.0f} s | "
                     f"{r['peak_rss_gb']:.2f} GB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("capture", type=Path, nargs="?", default=DEFAULT_CAPTURE)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training per run")
    parser.add_argument("--eval-at", default="150", help="extra scoring times (s) before the end")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench_runs" / "captures_real")
    parser.add_argument("--appearance", default="", help="variants to train again with appearance codes")
    parser.add_argument("--before", default="", help="variants to train again with the --before-set overrides")
    parser.add_argument("--before-set", action="append", default=[], help="an override of the earlier preset")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each (the table shows medians)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--set", dest="sets", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    eval_at = sorted({float(t) for t in args.eval_at.split(",") if t} | {args.budget})
    if args.one:
        result = run_one(args.one, args.out, args.budget, eval_at, args.threads, args.sets)
        print(json.dumps(result))
        return
    if not (args.capture / "poses_bounds.npy").is_file():
        sys.exit(f"{args.capture}: not an LLFF-style capture (no poses_bounds.npy); pass one as the first argument")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []  # (variant, the run's name in the table, its overrides)
    for v in args.variants.split(","):
        runs.append((v, v, []))
        if v in args.appearance.split(","):
            runs.append((v, v + " + appearance codes", [f"field.appearance_dim={APPEARANCE_DIM}"]))
        if v in args.before.split(","):
            runs.append((v, f"{v} (before: {', '.join(args.before_set)})", args.before_set))
    rows = []
    for _ in range(args.repeats):
        for variant, name, sets in runs:
            scene_dir = link_variant(args.capture.resolve(), variant, args.out)
            cmd = [sys.executable, __file__, "--one", str(scene_dir), "--out", str(args.out / f"run_{len(rows)}"),
                   "--budget", str(args.budget), "--eval-at", args.eval_at, "--threads", str(args.threads)]
            out = subprocess.run(cmd + [f"--set={s}" for s in sets], check=True, capture_output=True, text=True).stdout
            rows.append({"variant": name, **json.loads(out.strip().splitlines()[-1])})
            print(f"{name}: {rows[-1]['psnr']:.2f} dB", file=sys.stderr)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    print(table([median_row([r for r in rows if r["variant"] == name]) for _, name, _ in runs], eval_at))


def median_row(rows: list[dict]) -> dict:
    """One run's row with every number replaced by its median over `rows` (repeats of that run)."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)):
            out[key] = float(np.median([r[key] for r in rows]))
    times = [s["time"] for s in rows[0]["snapshots"]]
    out["snapshots"] = [{"time": t, "psnr": float(np.median([s["psnr"] for r in rows for s in r["snapshots"]
                                                             if s["time"] == t]))} for t in times]
    out["runs"] = len(rows)
    return out


if __name__ == "__main__":
    main()
