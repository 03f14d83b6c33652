"""The box of the masks' visual hull: the points that enough cameras see and that most of them see inside their
masks, found on a lattice over a looser box (the LLFF loader's box of interest for masked captures).

`outvoted` is the hull's voting rule, shared with the mask check (`voxnerf.data.mask_check`): a point stays in the
hull when at most OUTVOTED of the masks that judge it leave it out, so that a mask or pose a few pixels off does not
cut thin parts away.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from voxnerf.data.cameras import Cameras
from voxnerf.data.rays import pixels_seen
from voxnerf.system.progress import track

OUTVOTED = 0.1  # a point stays in the hull when at most this share of the masks that judge it leave it out
HULL_SEEN_SHARE = 0.1  # a point of the masks' visual hull is seen by at least this share of the cameras ...
HULL_LEAST_VIEWS = 3  # ... and by no fewer cameras than this (what one or two masks share is no carving)
HULL_LEAST_PIECE = 0.01  # ... in a piece of at least this share of the largest one's lattice points
HULL_GROWTH = 0.25  # the second lattice of `bounds_from_masks` spans the first pass's box grown by this much a side


def outvoted(judges: int | np.ndarray) -> float | np.ndarray:
    """How many of `judges` masks (any shape) may leave a point out and the point still stays in the hull."""
    return OUTVOTED * judges


def bounds_from_masks(cameras: Cameras, masks: list[np.ndarray], bbox: np.ndarray, n: int = 48) -> np.ndarray:
    """(2, 3) box of the masks' visual hull inside `bbox` (`hull_box`), in two passes: an n^3 lattice over `bbox`,
    then one over the box it found grown by HULL_GROWTH of its size a side. A lattice over every frustum's depth
    range is coarse (statueOfLiberty_2: 0.56 units a step for a 2.4-unit statue), and a part thinner than its step
    (a raised arm) has no lattice point inside it; the second lattice is finer by the ratio of the two boxes (about
    ten for the statue). A thin part reaching out past the first box by more than the growth is still lost. `bbox`
    itself when no point is left."""
    found = hull_box(cameras, masks, bbox, n, "masks' visual hull (coarse)")
    if found is None:
        return bbox
    margin = HULL_GROWTH * (found[1] - found[0])
    grown = np.stack([np.maximum(found[0] - margin, bbox[0]), np.minimum(found[1] + margin, bbox[1])])
    refined = hull_box(cameras, masks, grown, n, "masks' visual hull (fine)")
    return found if refined is None else refined


def hull_box(cameras: Cameras, masks: list[np.ndarray], bbox: np.ndarray, n: int, desc: str) -> np.ndarray | None:
    """(2, 3) box of the points of an n^3 lattice over `bbox` in the masks' visual hull, padded by one lattice step;
    None when no point is in it.

    A point is in the hull when at least HULL_SEEN_SHARE of the cameras see it, and at least HULL_LEAST_VIEWS, and no
    more of those than `outvoted` allows see it outside their mask. Points only a few cameras see are what a few masks
    cannot carve away (with under 30 cameras a tenth is one or two views, whose silhouette cones alone reach far
    past the object); a part of the object that only some photos frame (a statue's pedestal, cropped from most
    internet photos) is still seen by a tenth of them. A point one camera's mask leaves out stays when ten or more
    cameras see it and the others keep it (a mask or pose a few pixels off would otherwise cut thin parts). Of the
    hull's pieces (26-connected on the lattice) those with fewer than HULL_LEAST_PIECE of the largest one's points
    are left out: a lone lattice point that a few masks happen to agree on would otherwise stretch the box
    (moldGoldCape_8: one point, 1 unit below a 2-unit object). With fewer than HULL_LEAST_VIEWS masks no point is in
    it. `desc` names the progress bar."""
    axes = [np.linspace(lo, hi, n) for lo, hi in zip(bbox[0], bbox[1])]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    inside_masks, seen = np.zeros(len(points), np.int64), np.zeros(len(points), np.int64)
    for i, mask in enumerate(track(masks, desc, "mask")):
        px, inside = pixels_seen(cameras, i, points, mask.shape)
        inside_masks[inside] += mask[px[inside, 1], px[inside, 0]] > 0
        seen += inside
    hull = (seen >= max(HULL_SEEN_SHARE * len(masks), HULL_LEAST_VIEWS)) & (seen - inside_masks <= outvoted(seen))
    pieces, count = ndimage.label(hull.reshape(n, n, n), structure=np.ones((3, 3, 3)))
    if not count:
        return None
    sizes = np.bincount(pieces.ravel())[1:]
    kept = points[np.isin(pieces.ravel(), 1 + np.nonzero(sizes >= HULL_LEAST_PIECE * sizes.max())[0])]
    step = (bbox[1] - bbox[0]) / (n - 1)
    return np.stack([np.maximum(kept.min(0) - step, bbox[0]), np.minimum(kept.max(0) + step, bbox[1])])
