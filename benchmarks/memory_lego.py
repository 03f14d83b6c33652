"""Peak memory of training on full-size lego (800x800, 100 training views) on the CPU: loading the scene and 10
training steps at full image scale, for a baseline revision and the working tree side by side (issue 12: training
images held as uint8, not as float32 per pyramid level).

    python benchmarks/memory_lego.py --baseline b89a3b4

Each measurement runs in its own process (peak RSS is the process's own `ru_maxrss`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revisions import REPO, checkout

DATA = REPO.parent / "shared" / "data" / "nerf_synthetic" / "lego"
FULL_SCALE = {"levels": [{"until": 1.0, "resolution": 128, "image_scale": 1.0}], "max_steps": 10,
              "checkpoint_every": 10**9, "threads": 2}


def measure(out: Path) -> dict:
    """Load lego and train 10 steps in this process; peak RSS and times."""
    import torch

    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train.trainer import Trainer

    t0 = time.perf_counter()
    scene = load_scene(DATA)
    loaded = time.perf_counter()
    trainer = Trainer(scene, load_config(None, [FULL_SCALE]), out, torch.device("cpu"), quiet=True)
    trainer.train()
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "load_s": loaded - t0, "train_s": time.perf_counter() - loaded}


def spawn(code: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, __file__, "--single", tmp], check=True,
                       env={**os.environ, "PYTHONPATH": str(code)})
        return json.loads((Path(tmp) / "memory.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default="b89a3b4", help="git revision measured beside the working tree")
    p.add_argument("--single", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found: {DATA} (the shared NeRF-Synthetic lego folder)")
    if args.single:
        (Path(args.single) / "memory.json").write_text(json.dumps(measure(Path(args.single) / "run")))
        return
    with checkout(args.baseline) as baseline:
        before = spawn(baseline)
    after = spawn(REPO)
    print(f"machine: {platform.processor() or platform.machine()}; lego 800x800, load + 10 steps at full scale")
    print("| revision | peak RSS | load | 10 steps |\n|---|---|---|---|")
    for name, r in ((f"baseline {args.baseline}", before), ("this tree", after)):
        print(f"| {name} | {r['peak_rss_gib']:.2f} GiB | {r['load_s']:.1f} s | {r['train_s']:.1f} s |")
    print(f"ratio (this tree / baseline): {after['peak_rss_gib'] / before['peak_rss_gib']:.2f}")


if __name__ == "__main__":
    main()
