"""LLFF: `poses_bounds.npy` (N, 17) with the photos in `images/` and downscaled copies in `images_{d}/`.

Each row is a 3x5 matrix flattened row-major, [R | t | hwf], then the near and far depth bounds of that view.
R's columns are LLFF's camera axes [down, right, backwards]; hwf is the full-resolution height, width and
focal length (one focal for both axes, principal point at the image center, no distortion). Images are matched
to rows in file-name order. Poses are reported as stored (no recentering or rescaling, unlike LLFF's training
code). near / far are LLFF's z-depth bounds (min and max over views); the box of interest holds every view's
frustum between them. Each camera keeps its own view's near bound (`Cameras.near`): a contracted space starts that
view's rays there. Every 8th image is held out for testing. Foreground masks, when the capture has them, are in
`masks/` beside `images/` (`masks_{d}/` for downscale d, else the full-size ones resized), one per image with the
same stem and any image extension in any letter case; the box of interest is then their visual hull's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxnerf.data.bounds import bounds_from_frustums
from voxnerf.data.camera_checks import cameras_for_images
from voxnerf.data.cameras import Cameras
from voxnerf.data.files import find_masks, image_folder, list_images, read_numpy
from voxnerf.data.formats.writing import require_centered_pinhole, write_images
from voxnerf.data.hull import bounds_from_masks
from voxnerf.data.images import background_of, load_images, load_masks
from voxnerf.data.scene import Scene, split_every_nth
from voxnerf.errors import SceneError

NAME = "llff"
FILE = "poses_bounds.npy"


def detect(root: Path) -> bool:
    return (root / FILE).is_file()


def load(root: Path, with_images: bool = True, downscale: int = 1, **_) -> Scene:
    path = root / FILE
    table = _read_table(path)
    paths = list_images(image_folder(root, "images", downscale))
    if len(paths) != len(table):
        raise SceneError(paths[0].parent, f"holds {len(paths)} images but {path.name} has {len(table)} poses")
    images, sizes = load_images(paths, with_images)
    cameras = cameras_for_images(cameras_from_llff(table[:, :15].reshape(-1, 3, 5), table[:, 15]), paths, sizes,
                                 downscale)
    near, far = float(table[:, 15].min()), float(table[:, 16].max())
    copies = root / f"masks_{downscale}"
    mask_paths = find_masks(copies if downscale > 1 and copies.is_dir() else root / "masks", paths)
    masks = None if mask_paths is None else load_masks(mask_paths, sizes, True, 1 if copies.is_dir() else downscale)
    bbox = bounds_from_frustums(cameras, near, far)
    if masks is not None:  # the object is what the masks show: a tighter box than every frustum's depth range
        bbox = bounds_from_masks(cameras, masks, bbox)
    return Scene(
        root=root,
        format=NAME,
        image_paths=paths,
        cameras=cameras,
        splits=split_every_nth(len(paths)),
        bbox=bbox,
        near=near,
        far=far,
        background=background_of(paths[0]),
        images=images,
        masks=masks if with_images else None,
        extras={"mask_paths": mask_paths},
    )


def _read_table(path: Path) -> np.ndarray:
    """The (N, 17) float64 table, checked for shape, NaN and sane bounds."""
    table = read_numpy(path)
    if not isinstance(table, np.ndarray) or table.ndim != 2 or table.shape[1] != 17 or not len(table):
        shape = getattr(table, "shape", "an .npz archive")
        raise SceneError(path, f"expected an N x 17 array (3x5 pose, near, far per image), got shape {shape}")
    if table.dtype.kind not in "fiu":
        raise SceneError(path, f"expected numbers, got an array of dtype {table.dtype}")
    table = table.astype(np.float64)
    bad = np.flatnonzero(~np.all(np.isfinite(table), axis=1))
    if len(bad):
        raise SceneError(path, f"row {bad[0]}: pose or bounds contain NaN or inf")
    bad = np.flatnonzero(~((table[:, 15] > 0) & (table[:, 16] > table[:, 15])))
    if len(bad):
        raise SceneError(path, f"row {bad[0]}: bounds must satisfy 0 < near < far, got {table[bad[0], 15:]}")
    bad = np.flatnonzero(np.any(table[:, [4, 9, 14]] <= 0, axis=1))
    if len(bad):
        hwf = table[bad[0], [4, 9, 14]]
        raise SceneError(path, f"row {bad[0]}: height, width and focal must be positive, got {hwf}")
    return table


def cameras_from_llff(poses: np.ndarray, near: np.ndarray | None = None) -> Cameras:
    """Full-resolution cameras from LLFF's (N, 3, 5) [R | t | hwf] matrices (and the views' (N,) near bounds).

    LLFF axes [down, right, backwards] become OpenCV [right, down, forward]: x = right = column 1,
    y = down = column 0, z = forward = -column 2.
    """
    c2w = np.stack([poses[:, :, 1], poses[:, :, 0], -poses[:, :, 2], poses[:, :, 3]], -1)
    h, w, f = poses[:, :, 4].T
    intrinsics = np.stack([f, f, w / 2, h / 2], -1)
    sizes = np.round(np.stack([w, h], -1)).astype(np.int64)
    return Cameras(c2w, intrinsics, sizes, np.zeros((len(poses), 4)), near)


def llff_from_cameras(cameras: Cameras) -> np.ndarray:
    """(N, 3, 5) LLFF [R | t | hwf] matrices of centered pinhole cameras (the inverse of cameras_from_llff)."""
    c2w = cameras.c2w
    rotation = np.stack([c2w[:, :, 1], c2w[:, :, 0], -c2w[:, :, 2], c2w[:, :, 3]], -1)
    w, h = cameras.sizes.T
    hwf = np.stack([h, w, cameras.intrinsics[:, 0]], -1).astype(np.float64)
    return np.concatenate([rotation, hwf[:, :, None]], -1)


def write(scene: Scene, out: Path, downscales: tuple[int, ...] = ()) -> None:
    """poses_bounds.npy and images/image_*.png. Each view's near / far bounds are `scene.extras["view_bounds"]`
    (N, 2) when present, else the scene's near / far."""
    cams = scene.cameras
    require_centered_pinhole(cams, NAME)
    bounds = scene.extras.get("view_bounds", np.tile([scene.near, scene.far], (len(cams), 1)))
    np.save(out / FILE, np.concatenate([llff_from_cameras(cams).reshape(-1, 15), bounds], 1))
    write_images(scene.images, out, "images", [f"image_{i:03d}.png" for i in range(len(cams))], downscales)
