"""Time-to-PSNR on the toy real captures (issue 6) on the CPU: each toy capture written in each format, trained
with the preset `voxnerf train` picks for it, scored on its held-out views, and on their background pixels alone.

The toy captures (toy_scenes.CAPTURES) have known depth: the background (the unbounded scene's far shell, the
forward scene's wall) is every pixel whose ground-truth depth exceeds BACKGROUND_DEPTH, so "background PSNR"
says whether the far content was reconstructed or left as a haze. Each run trains in its own process.

    python benchmarks/captures_cpu.py                        # 2 scenes x 3 formats, 120 s each
    python benchmarks/captures_cpu.py --scenes forward --formats llff --budget 60
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
VIEWS, WIDTH = 48, 64  # 42 training and 6 test views of 64 x 48 pixels
BACKGROUND_DEPTH = 5.0  # world units: the shell (15) and the wall (6) lie beyond, every object nearer
CPU_OVERRIDES = [  # the auto-picked presets are sized for GPUs and large photos; a short CPU run stops at 128^3
    "levels=[{until: 0.15, resolution: 32, image_scale: 0.25}, {until: 0.4, resolution: 64, image_scale: 0.5},"
    " {until: 1.0, resolution: 128, image_scale: 1.0}]",
    "occupancy.warmup_steps=60",
    "optim.target_samples=65536",
]


def background_psnr(run_dir: Path, scene_dir: Path) -> float:
    """PSNR over the test views' background pixels (ground-truth depth > BACKGROUND_DEPTH) of a trained run."""
    from voxnerf.render.views import target_image
    from voxnerf.run.load import load_run

    run = load_run(run_dir, scene_root=scene_dir)
    scene = run.scene()
    errors = []
    for i in scene.split_indices("test"):
        view = run.render_view(scene.cameras, int(i))
        depth = np.load(scene_dir / "depth" / f"view_{int(i):03d}.npy")
        target = target_image(scene.images[i], np.zeros(3))
        errors.append(((view.rgb - target) ** 2)[depth > BACKGROUND_DEPTH])
    return float(-10 * np.log10(np.concatenate(errors).mean()))


def run_one(scene_name: str, fmt: str, budget: float, eval_at: list[float], threads: int, root: Path,
            extra: list[str]) -> dict:
    """Make the capture (once), train on it with the auto-picked preset, and measure."""
    import torch

    import voxnerf.scenes as toy_scenes
    from voxnerf.data import load_scene
    from voxnerf.train.presets import preset_for
    from voxnerf.train.session import train_run

    torch.set_num_threads(threads)
    scene_dir = root / f"{scene_name}_{fmt}"
    if not (scene_dir / "groundtruth.json").is_file():
        toy_scenes.make_capture(scene_name, scene_dir, fmt, n_views=VIEWS, width=WIDTH)
    preset, _, _ = preset_for(load_scene(scene_dir, with_images=False))
    outcome = train_run(scene_dir, None, root / f"run_{scene_name}_{fmt}", overwrite=True, device="cpu",
                        sets=CPU_OVERRIDES + extra, max_time=budget, max_steps=10**9, threads=threads,
                        eval_at=tuple(eval_at), quiet=True)
    return {"scene": scene_name, "format": fmt, "preset": preset, "snapshots": outcome.snapshots,
            "psnr": outcome.scores["mean"]["psnr"], "ssim": outcome.scores["mean"]["ssim"],
            "background_psnr": background_psnr(outcome.out, scene_dir), "steps": outcome.steps}


def table(rows: list[dict], eval_at: list[float]) -> str:
    head = ("| scene | format | preset | " + " | ".join(f"PSNR @{t:g} s" for t in eval_at)
            + " | final PSNR | SSIM | background PSNR |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        snaps = {s["time"]: s["psnr"] for s in r["snapshots"]}
        cells = " | ".join(f"{snaps[t]:.2f}" if t in snaps else "-" for t in eval_at)
        lines.append(f"| {r['scene']} | {r['format']} | {r['preset']} | {cells} | {r['psnr']:.2f} | "
                     f"{r['ssim']:.3f} | {r['background_psnr']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", default="unbounded,forward")
    parser.add_argument("--formats", default="nerfstudio,llff,colmap")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of training per run")
    parser.add_argument("--eval-at", default="30,60", help="extra scoring times (s) before the end")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench_runs" / "captures")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="extra config override")
    parser.add_argument("--one", nargs=2, metavar=("SCENE", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    eval_at = sorted({float(t) for t in args.eval_at.split(",") if t} | {args.budget})
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        result = run_one(*args.one, args.budget, eval_at, args.threads, args.out, args.sets)
        print(json.dumps(result))
        return
    rows = []
    for scene_name in args.scenes.split(","):
        for fmt in args.formats.split(","):
            cmd = [sys.executable, __file__, "--one", scene_name, fmt, "--budget", str(args.budget),
                   "--eval-at", args.eval_at, "--threads", str(args.threads), "--out", str(args.out)]
            cmd += [f"--set={s}" for s in args.sets]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(f"{scene_name} / {fmt}: {rows[-1]['psnr']:.2f} dB", file=sys.stderr)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    print(table(rows, eval_at))


if __name__ == "__main__":
    main()
