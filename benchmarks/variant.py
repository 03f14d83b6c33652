"""One variant of a preset trained and measured in this process: what lego_cpu.py and gpu_check.py share."""

from __future__ import annotations

import json
import resource
import statistics
import time
from pathlib import Path
from typing import Sequence


def train_and_measure(data: Path, config: str | Path | None, overrides: Sequence[str], budget: float, device: str,
                      out: Path, eval_at: Sequence[float] = (), view_stride: int = 25, log_every: int = 25) -> dict:
    """Train the preset file `config` with `overrides` (KEY=VALUE) on the scene at `data` for `budget` seconds on
    `device`, writing the run to `out`, then score every `view_stride`-th test view.

    Returns: the PSNR snapshots at `eval_at` seconds, final test "psnr" and "ssim", "steps", "train_seconds" and
    "wall_seconds" (training with its snapshots), the medians over the second half of training of "rays_per_s",
    "samples_per_ray" and "skipped" (the share of fine positions skipped), "last" (the last log row: resolution,
    occupied cells, parameters) and the process's "peak_rss_gib"."""
    import torch

    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config, parse_override
    from voxnerf.train.trainer import Trainer

    cfg = load_config(config, [{"max_time": budget, "max_steps": 10**9, "checkpoint_every": 10**9,
                                "eval_every_view": view_stride, "log_every": log_every}]
                      + [parse_override(o) for o in overrides])
    trainer = Trainer(load_scene(data), cfg, out, torch.device(device), eval_at=tuple(eval_at), quiet=True)
    wall = time.perf_counter()
    summary = trainer.train()
    wall = time.perf_counter() - wall
    final = trainer.evaluate(every=view_stride, with_lpips=False, write=False)["mean"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tail = rows[len(rows) // 2:] or rows

    def median(key: str) -> float:
        return statistics.median(r[key] for r in tail)

    return {"snapshots": summary["snapshots"], "psnr": final["psnr"], "ssim": final["ssim"], "steps": summary["step"],
            "train_seconds": summary["elapsed"], "wall_seconds": wall, "rays_per_s": median("rays_per_s"),
            "samples_per_ray": median("samples_per_ray"), "skipped": median("skipped"), "last": rows[-1],
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
