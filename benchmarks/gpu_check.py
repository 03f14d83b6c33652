"""The GPU path on a CUDA machine: the layout presets as `voxnerf train` picks them on a GPU (fp16 autocast with
GradScaler, 2^18 samples per step, grid up to 256^3), gradient checkpointing, fp32, and a one-process NCCL job
through torchrun. Each variant trains in its own process for `--budget` seconds and reports test PSNR, steps, training
rays/s, samples per ray, the final grid and the peak CUDA memory it allocated. Prints a Markdown table; writes JSON.

    python benchmarks/gpu_check.py --data data --out $OUT          # data/lego_200, data/ethiopianHead_8

Training needs neither open3d nor pycolmap nor viser, but the command line imports the exporters: where one of them
is not installed (a GPU machine's image), a placeholder module stands in for it, so that training runs as is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

from revisions import link_mapped_packages
from variant import train_and_measure

REPO = Path(__file__).resolve().parents[1]
VIEW_STRIDE = 25  # test views r_0, r_25, ... (every 25th test view of any scene)
OPTIONAL = ("open3d", "open3d.core", "pycolmap", "viser", "viser.transforms", "trimesh", "imageio_ffmpeg")

VARIANTS = {  # name -> (scene folder under --data, preset, overrides, share of the budget)
    "lego_200 blender (GPU preset)": ("lego_200", "blender", [], 2.0),
    "lego_200 + gradient checkpointing": ("lego_200", "blender", ["render.checkpoint_chunk=65536"], 1.0),
    "lego_200 fp32": ("lego_200", "blender", ["precision=fp32"], 1.0),
    "lego_200 + detail level": ("lego_200", "blender", ["field.detail_share=0.5"], 1.0),
    "ethiopianHead_8 object-masked": ("ethiopianHead_8", "object-masked", [], 1.0),
}


def importable_as_installed() -> None:
    """The source tree imports as the installed package (`voxnerf.cli` from cli/, ...) where it is not installed,
    and a placeholder module stands in for each optional package that is not (see the module docstring)."""
    if importlib.util.find_spec("voxnerf") is None:
        sys.path.insert(0, str(REPO))
    if importlib.util.find_spec("voxnerf.cli") is None:
        link_mapped_packages(REPO)
    parents = {name.split(".")[0] for name in OPTIONAL} - set(sys.modules)
    missing = {parent for parent in parents if importlib.util.find_spec(parent) is None}
    for name in OPTIONAL:
        if name.split(".")[0] in missing:
            sys.modules[name] = types.ModuleType(name)


def train_variant(data: Path, preset: str, overrides: list[str], budget: float, device: str, out: Path) -> dict:
    """Train one variant in this process and return its measurements, with the CUDA memory it peaked at."""
    import torch

    from voxnerf.train.presets import preset_path

    m = train_and_measure(data, preset_path(preset), overrides, budget, device, out, (budget / 2,), VIEW_STRIDE, 10)
    cuda = torch.device(device).type == "cuda"
    return {**{k: m[k] for k in ("snapshots", "psnr", "ssim", "steps", "train_seconds", "rays_per_s",
                                 "samples_per_ray")},
            **{k: m["last"][k] for k in ("resolution", "occupied", "parameters")},
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
            "gpu": torch.cuda.get_device_name() if cuda else None}


def spawn(args, name: str, folder: str, preset: str, overrides: list[str], budget: float) -> dict:
    """One variant in a child process (its own peak memory); a failure is recorded with the end of its output."""
    out = Path(args.out) / name.split(" ")[0] / name.replace(" ", "_").replace("(", "").replace(")", "")
    cmd = [sys.executable, __file__, "--single", str(Path(args.data) / folder), "--preset", preset,
           "--budget", str(budget), "--device", args.device, "--out", str(out)] + [a for o in overrides
                                                                                   for a in ("--set", o)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode:
        return {"error": (done.stdout + done.stderr)[-3000:]}
    return json.loads((out / "bench.json").read_text())


def torchrun_job(args) -> dict:
    """`voxnerf train` under torchrun, one process: the distributed path (NCCL on CUDA) end to end."""
    out = Path(args.out) / "torchrun"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", __file__,
           "--cli", "train", str(Path(args.data) / "lego_200"), "--out", str(out), "--max-time", "20",
           "--device", args.device, "--overwrite"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    scores = out / "eval.json"
    return {"returncode": done.returncode, "wall_seconds": wall, "output_tail": (done.stdout + done.stderr)[-2000:],
            "psnr": json.loads(scores.read_text())["mean"]["psnr"] if scores.is_file() else None}


def table(results: dict[str, dict]) -> str:
    lines = ["| variant | PSNR | SSIM | steps | rays/s | samples/ray | grid | occupied | peak CUDA alloc / reserved |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'].strip().splitlines()[-1][:120]} |")
            continue
        memory = f"{r['peak_allocated_gib']:.2f} / {r['peak_reserved_gib']:.2f} GiB" if r["gpu"] else "—"
        lines.append(f"| {name} | {r['psnr']:.2f} | {r['ssim']:.4f} | {r['steps']} | {r['rays_per_s']:.0f} | "
                     f"{r['samples_per_ray']:.1f} | {r['resolution']}^3 | {r['occupied']} | {memory} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--cli"]:  # under torchrun: the console script with the placeholders in place
        importable_as_installed()
        sys.argv = ["voxnerf", *sys.argv[2:]]
        from voxnerf.cli.entry import main as voxnerf

        voxnerf()
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(REPO / "data"), help="folder holding lego_200 and ethiopianHead_8")
    p.add_argument("--budget", type=float, default=45.0, help="training seconds of a variant of share 1")
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", help="run the variants whose name contains one of these comma-separated texts (and no "
                                  "torchrun job)")
    p.add_argument("--out", default=str(REPO / "runs" / "gpu_check"))
    p.add_argument("--single", help=argparse.SUPPRESS)
    p.add_argument("--preset", help=argparse.SUPPRESS)
    p.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args()
    importable_as_installed()
    if args.single:
        out = Path(args.out)
        result = train_variant(Path(args.single), args.preset, args.set, args.budget, args.device, out)
        (out / "bench.json").write_text(json.dumps(result, indent=2))
        return
    results = {}
    for name, (folder, preset, overrides, share) in VARIANTS.items():
        if args.only and not any(text in name for text in args.only.split(",")):
            continue
        try:
            results[name] = spawn(args, name, folder, preset, overrides, share * args.budget)
        except Exception:  # noqa: BLE001 - keep the other variants' numbers
            results[name] = {"error": traceback.format_exc()}
        print(f"{name}: {json.dumps(results[name])[:400]}", flush=True)
    report = {"results": results, "torchrun": None if args.only else torchrun_job(args)}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_check.json").write_text(json.dumps(report, indent=2))
    print(table(results))
    if report["torchrun"]:
        t = report["torchrun"]
        print(f"torchrun, 1 process: rc {t['returncode']}, {t['wall_seconds']:.0f} s, PSNR {t['psnr']}\n"
              f"{t['output_tail'][-600:]}")


if __name__ == "__main__":
    main()
