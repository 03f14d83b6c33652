"""Cameras as a capture's files give them, checked: pose matrices, focal lengths and principal points, rotations
(repaired when a little off), one size per camera model, and intrinsics refit to the images found on disk. Each
failure is a SceneError naming the file and the image at fault."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.errors import SceneError

ROTATION_ROUNDING = 1e-5  # max |R^T R - I| of a rotation as files round it: taken as it is
ROTATION_REPAIRABLE = 0.05  # up to this, a rotation is replaced by the nearest one (with a warning); beyond, refused
log = logging.getLogger("voxnerf")


def check_pose(matrix, path: Path, what: str) -> np.ndarray:
    """A pose matrix as float64 (3 or 4, 4), rejecting wrong shapes and NaN/inf."""
    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise SceneError(path, f"{what}: pose is not a numeric matrix") from None
    if m.shape not in ((3, 4), (4, 4)):
        raise SceneError(path, f"{what}: pose has shape {m.shape}, expected 3x4 or 4x4")
    if not np.all(np.isfinite(m)):
        raise SceneError(path, f"{what}: pose contains NaN or inf")
    return m[:3]


def check_cameras(cameras: Cameras, sources: Path | list[Path], paths: list[Path]) -> Cameras:
    """Every format's cameras pass here: focal lengths positive and finite (so fields of view below pi),
    principal points finite, rotations orthonormal and right-handed (see `repaired_rotations`).

    Args:
        cameras: N cameras as a loader built them.
        sources: the file the cameras came from, or each camera's file (named in errors and warnings).
        paths: the N image files (the camera at fault is named by its image).
    Returns:
        The cameras, rotations repaired.
    """
    sources = [sources] * len(cameras) if isinstance(sources, Path) else sources
    fx, fy, cx, cy = cameras.intrinsics.T
    bad = np.flatnonzero(~(np.isfinite(fx) & np.isfinite(fy) & (fx > 0) & (fy > 0)))
    if len(bad):
        i = bad[0]
        raise SceneError(sources[i], f"camera of {Path(paths[i]).name}: focal length ({fx[i]:g}, {fy[i]:g}) "
                                     f"must be positive and finite")
    bad = np.flatnonzero(~(np.isfinite(cx) & np.isfinite(cy)))
    if len(bad):
        i = bad[0]
        raise SceneError(sources[i], f"camera of {Path(paths[i]).name}: principal point ({cx[i]:g}, {cy[i]:g}) "
                                     f"is not finite")
    return repaired_rotations(cameras, sources, paths)


def repaired_rotations(cameras: Cameras, sources: list[Path], paths: list[Path]) -> Cameras:
    """`cameras` with each rotation checked: one off by rounding (|R^T R - I| <= ROTATION_ROUNDING) is kept, one a
    little off (up to ROTATION_REPAIRABLE) is replaced by the nearest rotation (SVD) with a warning; one further
    off, or a reflection, is refused naming its `sources` file and image (`paths`)."""
    rotations = cameras.c2w[:, :, :3]
    error = np.abs(np.einsum("nji,njk->nik", rotations, rotations) - np.eye(3)).max(axis=(1, 2))
    flipped = np.linalg.det(rotations) < 0
    bad = np.flatnonzero((error > ROTATION_REPAIRABLE) | flipped)
    if len(bad):
        i = bad[0]
        problem = "a reflection (determinant < 0)" if error[i] <= ROTATION_REPAIRABLE else (
            f"not a rotation (|R^T R - I| up to {error[i]:.3g}; {ROTATION_REPAIRABLE:g} is repaired)")
        raise SceneError(sources[i], f"camera of {Path(paths[i]).name}: the pose's rotation is {problem}")
    repair = np.flatnonzero(error > ROTATION_ROUNDING)
    if not len(repair):
        return cameras
    u, _, vt = np.linalg.svd(rotations[repair])
    c2w = cameras.c2w.copy()
    c2w[repair, :, :3] = u @ vt
    log.warning(f"{sources[repair[0]]}: {len(repair)} camera rotation(s) were not orthonormal (|R^T R - I| up to "
                f"{error[repair].max():.3g}, first {Path(paths[repair[0]]).name}); replaced by the nearest rotation")
    return Cameras(c2w, cameras.intrinsics, cameras.sizes, cameras.distortion, cameras.near)


def check_one_size(paths: list[Path], sizes: np.ndarray) -> None:
    """All images sharing one camera model must share one size; name the first that differs."""
    for p, s in zip(paths, sizes):
        if tuple(s) != tuple(sizes[0]):
            raise SceneError(p, f"image is {s[0]}x{s[1]}, the others are {sizes[0][0]}x{sizes[0][1]} (mixed sizes "
                                f"within one camera)")


def cameras_for_images(cameras: Cameras, paths: list[Path], sizes: np.ndarray, downscale: int = 1) -> Cameras:
    """Full-resolution `cameras` refit to the (N, 2) image `sizes` found on disk, `downscale` times smaller.

    Each image must be within a pixel of its camera's size / downscale (copies are made by rounding or by
    flooring); the intrinsics are scaled by the exact ratio of sizes. With downscale 1 the sizes must match.
    """
    for p, got, full in zip(paths, sizes, cameras.sizes):
        want = full / downscale
        if np.any(np.abs(got - want) >= 1):
            scaled = "" if downscale == 1 else f" ({full[0]}x{full[1]} downscaled {downscale}x)"
            raise SceneError(p, f"image is {got[0]}x{got[1]} but its camera expects {want[0]:g}x{want[1]:g}{scaled}")
    ratio = sizes / cameras.sizes
    return Cameras(cameras.c2w, cameras.intrinsics * np.concatenate([ratio, ratio], 1), sizes, cameras.distortion,
                   cameras.near)
