"""Time-to-PSNR on NeRF-Synthetic lego at 100x100 on the CPU (the issue-3 benchmark), with ablations.

Each variant trains in its own process (so peak memory is its own) for `--budget` seconds of training time and is
scored on the test views r_0, r_25, ..., r_175 (white background) at each `--eval-at` time; evaluation time is
not counted. Prints a Markdown table and writes JSON next to it.

    python benchmarks/lego_cpu.py                          # main run: 60/120/300 s
    python benchmarks/lego_cpu.py --ablations --budget 120 # progressive on/off, bf16 vs fp32, checkpointing
    python benchmarks/lego_cpu.py --baseline HEAD~3 --repeats 2 --budget 120   # before/after, alternating runs

With --baseline, the revision is checked out into a temporary git worktree and its code trains with the working
tree's preset, in alternation with the working tree's code (baseline, current, baseline, current, ...), so that
both see the same machine and the same options; the table then has one row per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from revisions import checkout

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
VIEW_STRIDE = 25  # test views r_0, r_25, ..., r_175

ABLATIONS = {
    "default": [],
    "no progressive resolution": ["levels=[{until: 1.0, resolution: 128, image_scale: 1.0}]"],
    "fp32 (no bf16 autocast)": ["precision=fp32"],
    "gradient checkpointing": ["render.checkpoint_chunk=16384"],
}


def run_variant(config: str, budget: float, eval_at: list[float], overrides: list[str], threads: int, out: Path) -> dict:
    """Train one variant in this process and return its measurements."""
    import torch

    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config, parse_override
    from voxnerf.train.trainer import Trainer

    torch.set_num_threads(threads)
    cfg = load_config(config, [{"max_time": budget, "max_steps": 10**9, "checkpoint_every": 10**9,
                                "eval_every_view": VIEW_STRIDE, "log_every": 25}]
                      + [parse_override(o) for o in overrides])
    scene = load_scene(DATA)
    trainer = Trainer(scene, cfg, out, torch.device("cpu"), eval_at=tuple(eval_at), quiet=True)
    wall = time.perf_counter()
    summary = trainer.train()
    wall = time.perf_counter() - wall
    final = trainer.evaluate(every=VIEW_STRIDE, with_lpips=False, write=False)["mean"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tail = rows[len(rows) // 2:] or rows
    median = lambda key: sorted(r[key] for r in tail)[len(tail) // 2]  # noqa: E731
    return {
        "snapshots": summary["snapshots"],
        "final_psnr": final["psnr"],
        "final_ssim": final["ssim"],
        "steps": summary["step"],
        "train_seconds": summary["elapsed"],
        "wall_seconds_incl_eval": wall,
        "rays_per_s_median": median("rays_per_s"),
        "samples_per_ray_median": median("samples_per_ray"),
        "skipped_fraction_median": median("skipped"),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def spawn_variant(args, name: str, overrides: list[str], code: Path = REPO) -> dict:
    """Train one variant in a child process, with the voxnerf package and configs of the checkout `code`."""
    out = Path(args.out) / name.replace(" ", "_").replace("(", "").replace(")", "")
    script = code / "benchmarks" / Path(__file__).name  # each checkout's own script: it imports its own modules
    cmd = [sys.executable, str(script), "--single", "--config", args.config, "--budget", str(args.budget),
           "--eval-at", ",".join(str(t) for t in args.eval_at), "--threads", str(args.threads), "--out", str(out)]
    for o in overrides:
        cmd += ["--set", o]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(code)})
    return json.loads((out / "bench.json").read_text())


def side_by_side(args) -> dict[str, dict]:
    """Alternating runs of the baseline revision and the working tree (see the module docstring)."""
    results = {}
    with checkout(args.baseline) as baseline:
        for k in range(1, args.repeats + 1):
            results[f"baseline {args.baseline} #{k}"] = spawn_variant(args, f"baseline_{k}", args.set, baseline)
            results[f"this tree #{k}"] = spawn_variant(args, f"current_{k}", args.set)
    return results


def medians(results: dict[str, dict], prefix: str) -> str:
    """Median final PSNR and rays/s of the runs whose name starts with `prefix`."""
    runs = [r for name, r in results.items() if name.startswith(prefix)]
    psnr = statistics.median(r["final_psnr"] for r in runs)
    rays = statistics.median(r["rays_per_s_median"] for r in runs)
    return f"{prefix}: median final PSNR {psnr:.2f} dB, median rays/s {rays:.0f}"


def table(results: dict[str, dict], eval_at: list[float]) -> str:
    head = "| variant | " + " | ".join(f"PSNR @ {t:g} s" for t in eval_at) + \
        " | final PSNR | steps | rays/s | samples/ray | skipped | peak RSS |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in results.items():
        at = {s["time"]: s["psnr"] for s in r["snapshots"]}
        cells = [f"{at[t]:.2f}" if t in at else "—" for t in eval_at]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {r['final_psnr']:.2f} | {r['steps']} | "
                     f"{r['rays_per_s_median']:.0f} | {r['samples_per_ray_median']:.1f} | "
                     f"{r['skipped_fraction_median']:.0%} | {r['peak_rss_gib']:.2f} GiB |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs" / "cpu.yaml"))
    p.add_argument("--budget", type=float, default=300.0, help="training seconds per variant")
    p.add_argument("--eval-at", type=lambda s: [float(t) for t in s.split(",")], default=[60.0, 120.0, 300.0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (all variants)")
    p.add_argument("--ablations", action="store_true", help="also run the ablation variants")
    p.add_argument("--baseline", help="a git revision to run side by side with the working tree")
    p.add_argument("--repeats", type=int, default=1, help="with --baseline: runs of each")
    p.add_argument("--out", default=str(REPO / "runs" / "bench"))
    p.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found: {DATA} (the shared NeRF-Synthetic lego_100 folder)")
    args.eval_at = [t for t in args.eval_at if t <= args.budget]
    if args.single:
        out = Path(args.out)
        result = run_variant(args.config, args.budget, args.eval_at, args.set, args.threads, out)
        (out / "bench.json").write_text(json.dumps(result, indent=2))
        return
    if args.baseline:
        results = side_by_side(args)
    else:
        variants = ABLATIONS if args.ablations else {"default": []}
        results = {name: spawn_variant(args, name, args.set + extra) for name, extra in variants.items()}
    report = {"machine": f"{platform.processor() or platform.machine()}, {args.threads} threads",
              "config": args.config, "overrides": args.set, "budget": args.budget, "results": results}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps(report, indent=2))
    print(table(results, args.eval_at))
    if args.baseline:
        print(medians(results, "baseline"))
        print(medians(results, "this tree"))


if __name__ == "__main__":
    main()
