"""How well a masked capture's own masks and poses agree (issue 25): the ceiling they put on its test PSNR.

    python benchmarks/mask_consistency.py ../shared/data/captures/ethiopianHead_8 --run runs/head

Each test view's mask pixels within `--band` px of the mask's edge are tested against the visual hull of the
training views' masks (`voxnerf.data.mask_check`: a pixel's *gap* is how far outside some training mask its ray's best
point still falls). A pixel is *uncovered* at a tolerance of k px when its gap exceeds k (the training masks grown
by k px, for masks or poses that are off by that much): the training views say empty where the test view says
object.

For each test view and tolerance it prints the uncovered pixels and the PSNR of an oracle that renders the photo's
exact colors everywhere except there, where it shows the background the view is scored on (the training views'
verdict): geometry consistent with the training masks to k px scores at most about that much on this view, up to
what a soft, half-transparent fringe wins back. With `--run`, the run's own score of each view (its eval.json)
is printed beside.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from voxnerf.data import load_scene
from voxnerf.data.mask_check import edge_pixels, outside_distance, pixel_gaps
from voxnerf.run.metrics import psnr
from voxnerf.run.scores import target_image


def oracle_psnr(target: np.ndarray, background: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> float:
    """PSNR of the target image (H, W, 3) in [0, 1] with the given pixels replaced by the background (3,)."""
    oracle = target.copy()
    oracle[rows, cols] = background
    return psnr(oracle, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scene", type=Path, help="a scene with foreground masks")
    parser.add_argument("--run", type=Path, help="a run trained on it: its per-view test PSNR beside")
    parser.add_argument("--tolerances", default="0,1,2", help="comma-separated, in px")
    parser.add_argument("--band", type=float, default=8.0, help="test pixels this close to the mask's edge (px)")
    parser.add_argument("--samples", type=int, default=900, help="points per ray across the scene box")
    args = parser.parse_args()
    scene = load_scene(args.scene)
    if scene.masks is None:
        raise SystemExit(f"{args.scene}: no foreground masks")
    tolerances = [float(k) for k in args.tolerances.split(",")]
    outside = outside_distance(scene, scene.split_indices("train"))
    scores = {}
    if args.run:
        scores = {v["view"]: v["psnr"] for v in json.loads((args.run / "eval.json").read_text())["views"]}
    header = ["view", "edge px"] + [f"uncovered @{k:g} px" for k in tolerances] + \
             [f"oracle PSNR @{k:g} px" for k in tolerances] + (["run PSNR"] if scores else [])
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header), flush=True)
    for i in scene.split_indices("test"):
        rows, cols = edge_pixels(scene.masks[i], args.band)
        gaps = pixel_gaps(scene, outside, int(i), rows, cols, args.samples)
        target = target_image(scene.rgba(i), scene.render_background).astype(np.float64)
        uncovered = [gaps > k for k in tolerances]
        name = scene.image_paths[i].name
        cells = [name, str(len(gaps))] + [str(int(u.sum())) for u in uncovered] + \
                [f"{oracle_psnr(target, scene.render_background, rows[u], cols[u]):.2f}" for u in uncovered] + \
                ([f"{scores[name]:.2f}" if name in scores else "-"] if scores else [])
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
