"""The region an export keeps: the scene's box of interest or a user box, in world and unit-box coordinates."""

from __future__ import annotations

import numpy as np

from voxnerf.errors import VoxnerfError
from voxnerf.run.load import Run


def parse_bbox(text: str) -> np.ndarray:
    """'x0,y0,z0,x1,y1,z1' (world units) -> (2, 3) float64 min and max corners, or VoxnerfError naming --bbox."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    box = np.asarray(values, np.float64).reshape(-1, 3) if len(values) == 6 else None
    if box is None or not np.all(box[1] > box[0]):
        raise VoxnerfError(f"--bbox {text}: expected six numbers x0,y0,z0,x1,y1,z1 with each max above its min")
    return box


def crop_box(run: Run, bbox: np.ndarray | None = None) -> np.ndarray:
    """(2, 3) world box to keep: `bbox` (default the scene's box of interest) clipped to the grid's unit box.

    Raises VoxnerfError when the box misses the grid.
    """
    box = np.asarray(run.record.bbox if bbox is None else bbox, np.float64)
    grid = run.to_world(np.array([[-1.0] * 3, [1.0] * 3]))
    box = np.stack([np.maximum(box[0], grid[0]), np.minimum(box[1], grid[1])])
    if not np.all(box[1] > box[0]):
        raise VoxnerfError(f"--bbox: the box misses the trained volume (world {grid[0].round(3).tolist()} to "
                           f"{grid[1].round(3).tolist()})")
    return box


def require_box_space(run: Run, what: str, instead: str) -> None:
    """Density-lattice exports sample the unit box as the grid: a VoxnerfError for contracted / NDC runs."""
    kind = run.model.space.kind
    if not run.model.space.bounded:
        raise VoxnerfError(f"{what} needs a bounded (box) run; {run.path} was trained in a {kind} space "
                           f"(unbounded or forward-facing scene): use {instead}")
