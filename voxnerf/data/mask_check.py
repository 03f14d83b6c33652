"""Do a capture's masks and poses agree? Rays through mask pixels tested against the other views' visual hull.

Any geometry the masks allow lies in their visual hull: a point is in the hull when every camera that sees it sees
it inside its mask. With exact poses and masks, every mask pixel's ray enters the hull of the *other* views' masks
(the object is in it, so its silhouette is in the hull's). A pixel's *gap* is how far outside some other mask the
ray's best point still falls: the smallest, over the ray's points in the scene box, of the largest distance in px
outside a mask. Poses or masks off by k px leave gaps of about k px along the silhouette; a gap of several px is a
view whose pose, intrinsics or mask disagrees with the rest, which no trained field can fit (its edges blur).

`voxnerf info --check-masks` reports the share of each view's silhouette pixels with a gap above a tolerance;
`benchmarks/mask_consistency.py` turns the gaps of test views into the PSNR ceiling they set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
from scipy import ndimage

from voxnerf.data.hull import outvoted
from voxnerf.data.rays import image_rays, pixels_seen
from voxnerf.data.scene import Scene
from voxnerf.data.space import box_span
from voxnerf.errors import VoxnerfError

RAY_CHUNK = 256  # rays whose points are projected at once


def outside_distance(scene: Scene, views: Iterable[int]) -> dict[int, np.ndarray]:
    """Per view, (H, W) Euclidean distance in px from each pixel to the view's mask (0 inside; inf everywhere for
    an empty mask)."""
    return {int(j): distance_outside(scene.masks[j]) for j in views}


def distance_outside(mask: np.ndarray) -> np.ndarray:
    """(H, W) Euclidean distance in px from each pixel to the bool `mask` (H, W): 0 inside, inf everywhere when
    it is empty."""
    return ndimage.distance_transform_edt(~mask) if mask.any() else np.full(mask.shape, np.inf)


def ray_gaps(scene: Scene, outside: dict[int, np.ndarray], origins: np.ndarray, dirs: np.ndarray,
             samples: int, ignore: int = 0) -> np.ndarray:
    """Gap (R,) in px of world rays (R, 3) through the scene box against the masks in `outside`: the smallest,
    over `samples` points evenly along the ray's span in the box, of the largest distance outside a mask (points
    a camera does not see, behind it or outside its image, do not count for it), leaving out each point's `ignore`
    largest (a few wrong masks then do not cut the hull for everyone); inf for rays that miss the box."""
    near, far = box_span(origins, dirs, scene.bbox)
    t = near[:, None] + (far - near)[:, None] * np.linspace(0.0, 1.0, samples)
    points = (origins[:, None] + t[..., None] * dirs[:, None]).reshape(-1, 3)
    outside_by_view = np.zeros((len(outside) if ignore else 1, len(points)))  # a running max needs one row
    for k, (j, dist) in enumerate(outside.items()):
        px, seen = pixels_seen(scene.cameras, j, points, dist.shape)
        row = outside_by_view[k if ignore else 0]
        row[seen] = np.maximum(row[seen], dist[px[seen, 1], px[seen, 0]])
    worst = -np.partition(-outside_by_view, ignore, axis=0)[ignore] if ignore else outside_by_view[0]
    gaps = worst.reshape(len(origins), samples).min(1)
    return np.where(far > near, gaps, np.inf)


def edge_pixels(mask: np.ndarray, band: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the mask pixels within `band` px of its edge."""
    inside = ndimage.distance_transform_edt(mask)
    return np.nonzero((inside > 0) & (inside <= band))


def pixel_gaps(scene: Scene, outside: dict[int, np.ndarray], index: int, rows: np.ndarray, cols: np.ndarray,
               samples: int, ignore: int = 0) -> np.ndarray:
    """Gaps (P,) of view `index`'s pixels (rows, cols (P,)) against the masks in `outside` (`ray_gaps`)."""
    if not len(rows):
        return np.zeros(0)
    origins, dirs = (t.numpy().astype(np.float64) for t in image_rays(scene.cameras, index))
    flat = rows * scene.masks[index].shape[1] + cols
    chunks = [flat[i:i + RAY_CHUNK] for i in range(0, len(flat), RAY_CHUNK)]
    return np.concatenate([ray_gaps(scene, outside, origins[c], dirs[c], samples, ignore) for c in chunks])


@dataclass
class ViewAgreement:
    """How one view's silhouette agrees with the other views' masks."""

    view: int
    name: str
    pixels: int  # silhouette pixels tested
    gap_p90: float  # px: the 90th percentile of their gaps
    disagreeing: float  # share of them with a gap above the tolerance


def mask_agreement(scene: Scene, tolerance: float = 2.0, pixels: int = 200, samples: int = 256,
                   seed: int = 0) -> list[ViewAgreement]:
    """Each view's silhouette (up to `pixels` random mask pixels 1 px inside the edge) against the hull of the
    other views' masks, where a point may lie outside as many of them as the hull's voting rule allows
    (`voxnerf.data.hull.outvoted`: so that a few wrong views stand out instead of cutting everyone's hull): the
    90th percentile of its gaps and their share above `tolerance` px.

    The views that judge are all the other views, seen or not (int(outvoted(N - 1)), none below 11 views): made
    for object captures whose cameras all see the object; a point only a few cameras see may lie outside all their
    masks.
    It catches silhouettes that stick out of the others' hull (a shifted view, a mask too large); a mask too small
    for its view, or an empty one (pixels = 0), passes unnoticed here. Needs `scene.masks`, at least two."""
    if len(scene.masks) < 2:
        raise VoxnerfError(f"{scene.root}: the mask check needs at least two views with masks")
    outside = outside_distance(scene, range(len(scene.masks)))
    ignore = int(outvoted(len(outside) - 1))
    rng = np.random.default_rng(seed)
    report = []
    for i in range(len(scene.masks)):
        rows, cols = edge_pixels(scene.masks[i], 1.0)
        pick = rng.permutation(len(rows))[:pixels]
        others = {j: d for j, d in outside.items() if j != i}
        gaps = pixel_gaps(scene, others, i, rows[pick], cols[pick], samples, ignore)
        p90 = float(np.percentile(gaps, 90, method="higher")) if len(gaps) else 0.0  # no inf - inf between misses
        report.append(ViewAgreement(i, scene.image_paths[i].name, len(gaps), p90,
                                    float((gaps > tolerance).mean()) if len(gaps) else 0.0))
    return report
