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
import statistics
import subprocess
import sys
from pathlib import Path

from revisions import checkout
from variant import train_and_measure

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego_100"
VIEW_STRIDE = 25  # test views r_0, r_25, ..., r_175

ABLATIONS = {
    "default": [],
    "no progressive resolution": ["levels=[{until: 1.0, resolution: 128, image_scale: 1.0}]"],
    "fp32 (no bf16 autocast)": ["precision=fp32"],
    "gradient checkpointing": ["render.checkpoint_chunk=16384"],
}

EARLIER_KEYS = {  # a checkout before benchmarks/variant.py names its results so
    "final_psnr": "psnr", "final_ssim": "ssim", "wall_seconds_incl_eval": "wall_seconds",
    "rays_per_s_median": "rays_per_s", "samples_per_ray_median": "samples_per_ray", "skipped_fraction_median": "skipped",
}


def plain_preset(out: Path) -> Path:
    """What plain `voxnerf train` picks for lego_100 on this machine's CPU (configs/blender.yaml + configs/cpu.yaml,
    and configs/cpu-fp32.yaml where bf16 is not native), composed into one preset file under `out` that every
    variant and every checkout of --baseline reads: the benchmark scores what the plain command trains."""
    import torch
    import yaml

    from voxnerf.data import load_scene
    from voxnerf.run.config import compose_presets
    from voxnerf.train.presets import default_config

    preset, overlays = default_config(load_scene(DATA), out, False, torch.device("cpu"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "preset.yaml"
    path.write_text(f"# {' + '.join(p.name for p in (preset, *overlays))}\n"
                    + yaml.safe_dump(compose_presets([preset, *overlays]), sort_keys=False))
    return path


def run_variant(config: str, budget: float, eval_at: list[float], overrides: list[str], threads: int, out: Path) -> dict:
    """Train one variant in this process and return its measurements (variant.train_and_measure)."""
    import torch

    torch.set_num_threads(threads)
    return train_and_measure(DATA, config, overrides, budget, "cpu", out, eval_at, VIEW_STRIDE)


def spawn_variant(args, name: str, overrides: list[str], code: Path = REPO) -> dict:
    """Train one variant in a child process, with the voxnerf package and configs of the checkout `code`."""
    out = Path(args.out) / name.replace(" ", "_").replace("(", "").replace(")", "")
    script = code / "benchmarks" / Path(__file__).name  # each checkout's own script: it imports its own modules
    cmd = [sys.executable, str(script), "--single", "--config", args.config, "--budget", str(args.budget),
           "--eval-at", ",".join(str(t) for t in args.eval_at), "--threads", str(args.threads), "--out", str(out)]
    for o in overrides:
        cmd += ["--set", o]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(code)})
    result = json.loads((out / "bench.json").read_text())
    return {EARLIER_KEYS.get(key, key): value for key, value in result.items()}


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
    psnr = statistics.median(r["psnr"] for r in runs)
    rays = statistics.median(r["rays_per_s"] for r in runs)
    return f"{prefix}: median final PSNR {psnr:.2f} dB, median rays/s {rays:.0f}"


def table(results: dict[str, dict], eval_at: list[float]) -> str:
    head = "| variant | " + " | ".join(f"PSNR @ {t:g} s" for t in eval_at) + \
        " | final PSNR | steps | rays/s | samples/ray | skipped | peak RSS |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in results.items():
        at = {s["time"]: s["psnr"] for s in r["snapshots"]}
        cells = [f"{at[t]:.2f}" if t in at else "—" for t in eval_at]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {r['psnr']:.2f} | {r['steps']} | "
                     f"{r['rays_per_s']:.0f} | {r['samples_per_ray']:.1f} | "
                     f"{r['skipped']:.0%} | {r['peak_rss_gib']:.2f} GiB |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="a preset file (default: what plain `voxnerf train` picks for lego_100 here)")
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
    args.config = args.config or str(plain_preset(Path(args.out)))
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
