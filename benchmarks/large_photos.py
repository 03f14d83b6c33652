"""Photos as users bring them (issue 41): large photos train as well as their downscaled copy, in bounded memory.

Two parts, each run in its own process (its peak RSS is its own), plain `voxnerf train` as captures_real.py runs it:

1. quality: ethiopianHead_8 (500 px) beside a 4000 x 4000 stand-in of the full-size capture (its photos and masks
   upsampled 8x, focal and sizes x8), both trained for --budget seconds. The stand-in's run picks its training
   size itself; both are scored at the size they trained at (printed), PSNR, SSIM, peak RSS, wall time.
2. many: a capture of --photos 12-megapixel photos (4000 x 3000 JPEG, with masks, cameras on a circle around the
   subject) trained for a short budget: the peak RSS of decoding, the pyramid, training and scoring.

Usage:
    python benchmarks/large_photos.py                      # both parts, 300 s runs, 500 photos
    python benchmarks/large_photos.py --parts many --photos 500 --many-budget 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from machine import cpu_name

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO.parent / "shared" / "data" / "captures" / "ethiopianHead_8"
FACTOR = 8  # the stand-in's photos are this many times larger than ethiopianHead_8's: the original camera's size
MANY_SIZE = (4000, 3000)  # width, height of the many-photos capture: 12 megapixels


def upsampled_capture(capture: Path, out: Path, factor: int) -> Path:
    """An LLFF capture `factor` times larger than `capture`: photos (bicubic) and masks (bilinear) upsampled and
    written as JPEG, the poses' height, width and focal scaled. Made once."""
    if (out / "poses_bounds.npy").is_file():
        return out
    for folder in ("images", "masks"):
        (out / folder).mkdir(parents=True, exist_ok=True)
        for path in sorted((capture / folder).iterdir()):
            with Image.open(path) as im:
                big = im.resize((im.width * factor, im.height * factor),
                                Image.BICUBIC if folder == "images" else Image.BILINEAR)
                big.save(out / folder / path.name, quality=95)
    table = np.load(capture / "poses_bounds.npy")
    table[:, [4, 9, 14]] *= factor  # LLFF's hwf column: height, width, focal
    np.save(out / "poses_bounds.npy", table)
    return out


def many_photos_capture(capture: Path, out: Path, count: int, size: tuple[int, int]) -> Path:
    """An LLFF capture of `count` photos of `size` (width, height), with masks: `capture`'s photos and masks
    stretched to that size (each written once, the rest hard links: the files decode like distinct photos), seen
    from cameras on a circle around the origin. Only memory and time are measured on it. Made once."""
    if (out / "poses_bounds.npy").is_file():
        return out
    sources = {folder: sorted((capture / folder).iterdir()) for folder in ("images", "masks")}
    for folder, paths in sources.items():
        (out / folder).mkdir(parents=True, exist_ok=True)
        made = []
        for i in range(count):
            target = out / folder / f"photo_{i:04d}.jpg"
            if i < len(paths):
                with Image.open(paths[i]) as im:
                    im.convert("RGB" if folder == "images" else "L").resize(size, Image.BICUBIC).save(target,
                                                                                                      quality=90)
                made.append(target)
            else:
                os.link(made[i % len(made)], target)
    np.save(out / "poses_bounds.npy", circle_poses(count, size))
    return out


def circle_poses(count: int, size: tuple[int, int], radius: float = 4.0) -> np.ndarray:
    """(count, 17) LLFF rows of cameras on a circle of `radius` around the origin, looking at it, with the
    height, width and a 60 degree field of view for `size`, and near / far bounds around the origin."""
    width, height = size
    focal = 0.5 * width / np.tan(np.radians(30))
    rows = []
    for angle in np.linspace(0, 2 * np.pi, count, endpoint=False):
        center = radius * np.array([np.cos(angle), np.sin(angle), 0.3])
        backwards = center / np.linalg.norm(center)
        right = np.cross([0.0, 0.0, 1.0], backwards)
        right /= np.linalg.norm(right)
        down = np.cross(right, backwards)
        pose = np.stack([down, right, backwards, center, [height, width, focal]], 1)  # LLFF: down, right, back
        rows.append(np.concatenate([pose.reshape(-1), [radius - 1.5, radius + 1.5]]))
    return np.array(rows)


def train(scene: Path, out: Path, budget: float, threads: int) -> dict:
    """A plain `voxnerf train` of `scene` in its own process, measured as captures_real.py measures a row, and the
    size its test views were scored at."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "captures_real.py"), "--one", str(scene), "--out", str(out),
           "--budget", str(budget), "--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{scene} failed:\n{done.stderr[-3000:]}")
    scores = json.loads((out / "eval.json").read_text())
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "size": scores["size"],
            "downscale": scores["downscale"]}


def row(name: str, result: dict) -> str:
    return (f"| {name} | {result['size'][0]}x{result['size'][1]} (1/{result['downscale']}) | {result['psnr']:.2f} | "
            f"{result['ssim']:.3f} | {result['steps']} | {result['rays_per_s'] / 1e3:.1f}k | "
            f"{result['peak_rss_gb']:.2f} GB | {result['wall_s']:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="quality,many", help="quality, many or both (comma-separated)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training, quality part")
    parser.add_argument("--photos", type=int, default=500, help="photos of the many-photos capture")
    parser.add_argument("--many-budget", type=float, default=20.0, help="seconds of training, many part")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench_runs" / "large_photos")
    args = parser.parse_args()
    if not CAPTURE.is_dir():
        sys.exit(f"{CAPTURE}: not found (the benchmark needs ../shared/data/captures/ethiopianHead_8)")
    parts = set(args.parts.split(","))
    print(f"{cpu_name()}, {args.threads} threads")
    print("| run | scored at | PSNR | SSIM | steps | rays/s | peak RSS | wall |")
    print("|---|---|---|---|---|---|---|---|")
    if "quality" in parts:
        big = upsampled_capture(CAPTURE, args.out / "scenes" / "ethiopianHead_4000", FACTOR)
        print(row(f"{CAPTURE.name} (500 px), {args.budget:g} s", train(CAPTURE, args.out / "small", args.budget,
                                                                          args.threads)), flush=True)
        print(row(f"4000 px stand-in, {args.budget:g} s", train(big, args.out / "big", args.budget, args.threads)),
              flush=True)
    if "many" in parts:
        many = many_photos_capture(CAPTURE, args.out / "scenes" / f"many_{args.photos}", args.photos, MANY_SIZE)
        result = train(many, args.out / "many", args.many_budget, args.threads)
        print(row(f"{args.photos} photos of {MANY_SIZE[0]}x{MANY_SIZE[1]}, {args.many_budget:g} s", result))


if __name__ == "__main__":
    main()
