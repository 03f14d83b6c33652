"""How well a masked capture's own masks and poses agree (issue 25): the ceiling they put on its test PSNR.

    python benchmarks/mask_consistency.py ../shared/data/captures/ethiopianHead_8 --run runs/head

Any geometry that the training views' masks allow lies inside their visual hull: a point is in the hull when every
training camera that sees it sees it inside its mask. For each test view, every mask pixel within `--band` px of
the mask's edge casts its ray through the scene box; the pixel is *covered* when some point along the ray is in
the hull. With exact poses and masks every mask pixel is covered (the object is in the hull, so its silhouette is
in the hull's). An uncovered pixel is one the training views say is empty and the test view says is object.

A pixel's *gap* is how far outside some training mask the ray's best point still falls (the smallest, over the
ray's points, of the largest distance in px outside a training mask): covered at a tolerance of k px when its gap
is at most k (the training masks grown by k px, for masks or poses that are off by that much).

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
from scipy import ndimage

from voxnerf.data import load_scene
from voxnerf.data.rays import image_rays
from voxnerf.data.scene import Scene
from voxnerf.export.photo import project
from voxnerf.export.query import box_span
from voxnerf.run.metrics import psnr
from voxnerf.run.scores import target_image

RAY_CHUNK = 256


def outside_distance(scene: Scene, views: np.ndarray) -> dict[int, np.ndarray]:
    """Per training view, (H, W) Euclidean distance in px from each pixel to its mask (0 inside)."""
    return {int(j): ndimage.distance_transform_edt(~scene.masks[j]) for j in views}


def ray_gaps(scene: Scene, outside: dict[int, np.ndarray], origins: np.ndarray, dirs: np.ndarray,
             samples: int) -> np.ndarray:
    """Gap (R,) in px of world rays (R, 3) through the scene box: the smallest, over `samples` points evenly along
    the ray's span in the box, of the largest distance outside a training mask (points a camera does not see,
    behind it or outside its image, do not count for it); inf for rays that miss the box."""
    near, far = box_span(origins, dirs, scene.bbox)
    t = near[:, None] + (far - near)[:, None] * np.linspace(0.0, 1.0, samples)
    points = (origins[:, None] + t[..., None] * dirs[:, None]).reshape(-1, 3)
    worst = np.zeros(len(points))
    for j, dist in outside.items():
        uv, _, front = project(scene.cameras, j, points)
        h, w = dist.shape
        px = np.floor(uv).astype(np.int64)
        seen = front & (px[:, 0] >= 0) & (px[:, 1] >= 0) & (px[:, 0] < w) & (px[:, 1] < h)
        worst[seen] = np.maximum(worst[seen], dist[px[seen, 1], px[seen, 0]])
    gaps = worst.reshape(len(origins), samples).min(1)
    return np.where(far > near, gaps, np.inf)


def edge_pixels(mask: np.ndarray, band: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the mask pixels within `band` px of its edge."""
    inside = ndimage.distance_transform_edt(mask)
    return np.nonzero((inside > 0) & (inside <= band))


def view_gaps(scene: Scene, outside: dict[int, np.ndarray], index: int, band: float, samples: int):
    """Rows, columns and gaps (P,) of test view `index`'s mask pixels within `band` px of the mask's edge."""
    rows, cols = edge_pixels(scene.masks[index], band)
    origins, dirs = (t.numpy().astype(np.float64) for t in image_rays(scene.cameras, index))
    flat = rows * scene.masks[index].shape[1] + cols
    gaps = np.concatenate([ray_gaps(scene, outside, origins[flat[i:i + RAY_CHUNK]], dirs[flat[i:i + RAY_CHUNK]],
                                    samples) for i in range(0, len(flat), RAY_CHUNK)])
    return rows, cols, gaps


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
        rows, cols, gaps = view_gaps(scene, outside, int(i), args.band, args.samples)
        target = target_image(scene.rgba(i), scene.render_background).astype(np.float64)
        uncovered = [gaps > k for k in tolerances]
        name = scene.image_paths[i].name
        cells = [name, str(len(gaps))] + [str(int(u.sum())) for u in uncovered] + \
                [f"{oracle_psnr(target, scene.render_background, rows[u], cols[u]):.2f}" for u in uncovered] + \
                ([f"{scores[name]:.2f}" if name in scores else "-"] if scores else [])
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
