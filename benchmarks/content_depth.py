"""Where a contracted run's content lies (issue 37 item 3): how much of what the training photos see sits inside the
unit box (the grid's middle `contract_inner` share) and how much in the contracted shell around it.

For every k-th training view of each run: the point at each pixel's rendered depth, its L-infinity radius in unit-box
units (1 = the unit box's face), and the pixel's opacity as its weight. Prints per run the share of the weight inside
the unit box, inside its middle half and within twice its half-width, and radius quantiles; the unit box's
half-width in world units beside the inner share it was trained with.

    voxnerf train CAPTURE_WITHOUT_MASKS --max-time 60 --out runs/head
    python benchmarks/content_depth.py runs/head runs/cape runs/statue
"""

from __future__ import annotations

import argparse

import numpy as np

from voxnerf.data.rays import image_rays
from voxnerf.data.space import Space
from voxnerf.run.load import load_run

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def content_radii(run_path: str, views: int) -> tuple[np.ndarray, np.ndarray, Space]:
    """(P,) unit-box L-inf radius of each sampled training pixel's depth point, (P,) its opacity, the run's space."""
    run = load_run(run_path)
    cameras = run.training_cameras()
    space = run.model.space
    radii, weights = [], []
    for index in range(0, len(cameras), max(1, len(cameras) // views)):
        view = run.render_view(cameras, index)
        origins, dirs = (t.numpy() for t in image_rays(cameras, index))
        points = origins + dirs * view.depth.reshape(-1, 1)
        radii.append(np.abs(space.world_to_unit(points)).max(-1))
        weights.append(view.opacity.reshape(-1))
    return np.concatenate(radii), np.concatenate(weights), space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders of contracted (unbounded) runs")
    parser.add_argument("--views", type=int, default=10, help="about this many training views per run")
    args = parser.parse_args()
    print("| run | inner share | unit box half-width (world) | inside | inside half | within 2x | radius quantiles "
          f"{', '.join(str(q) for q in QUANTILES)} |")
    print("|---|---|---|---|---|---|---|")
    for path in args.runs:
        r, w, space = content_radii(path, args.views)
        share = [float((w * (r <= limit)).sum() / w.sum()) for limit in (1.0, 0.5, 2.0)]
        quantiles = ", ".join(f"{q:.2f}" for q in np.quantile(r, QUANTILES))
        print(f"| {path} | {space.inner_scale} | {1 / space.scale:.2f} | {share[0]:.3f} | {share[1]:.3f} | "
              f"{share[2]:.3f} | {quantiles} |")


if __name__ == "__main__":
    main()
