"""Checks and readers every loader shares: each raises SceneError naming the file at fault."""

from __future__ import annotations

import json
import logging
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from PIL import Image
from scipy import ndimage

from voxnerf.data.cameras import Cameras
from voxnerf.data.images import resize_area
from voxnerf.data.rays import pixels_seen
from voxnerf.errors import SceneError
from voxnerf.system.progress import track

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".JPG", ".JPEG", ".PNG")
ROTATION_ROUNDING = 1e-5  # max |R^T R - I| of a rotation as files round it: taken as it is
DRAFT_MARGIN = 2  # a JPEG read smaller is decoded at least this many times the wanted size, then area-resized
ROTATION_REPAIRABLE = 0.05  # up to this, a rotation is replaced by the nearest one (with a warning); beyond, refused
HULL_SEEN_SHARE = 0.1  # a point of the masks' visual hull is seen by at least this share of the cameras ...
HULL_AGREEMENT = 0.9  # ... and inside the masks of at least this share of those (`hull_box`)
HULL_LEAST_PIECE = 0.01  # ... in a piece of at least this share of the largest one's lattice points
HULL_GROWTH = 0.25  # the second lattice of `bounds_from_masks` spans the first pass's box grown by this much a side
log = logging.getLogger("voxnerf")


def read_json(path: Path) -> dict:
    """Parse a JSON file, or raise SceneError saying why not."""
    if not path.is_file():
        raise SceneError(path, "file not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SceneError(path, f"malformed JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SceneError(path, f"cannot read ({e})") from None


def require(mapping: dict, key: str, path: Path, where: str = ""):
    """mapping[key], or SceneError naming the missing key."""
    if not isinstance(mapping, dict) or key not in mapping:
        raise SceneError(path, f"missing key '{key}'{where}")
    return mapping[key]


def find_image(path: Path) -> Path:
    """`path` itself if it exists, else `path` with the first image suffix that exists."""
    if path.is_file():
        return path
    for suffix in IMAGE_SUFFIXES:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return candidate
    raise SceneError(path, "image not found")


def read_image(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """An image as uint8 (H, W, 3) or (H, W, 4); grey images become RGB, 16-bit images are rescaled. With `size`
    (width, height) it comes at that size, area-resized (`decode`: a large JPEG is decoded smaller first)."""
    img = decode(path, size, "image")
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise SceneError(path, f"expected an RGB or RGBA image, got shape {img.shape}")
    if img.dtype == np.uint16:
        img = (img.astype(np.float32) / 257.0 + 0.5).astype(np.uint8)
    return at_size(img.astype(np.uint8, copy=False), size)


def read_mask(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """A foreground mask as bool (H, W): any channel above half intensity; with `size` (width, height), at that
    size (covered more than half, `resize_area`)."""
    m = decode(path, size, "mask")
    if m.ndim == 3:
        m = m[..., :3].max(-1)
    return at_size(m > (np.iinfo(m.dtype).max // 2 if m.dtype.kind == "u" else 0.5), size)


def decode(path: Path, size: tuple[int, int] | None, what: str) -> np.ndarray:
    """The pixels of an image file, as stored; a JPEG wanted at `size` (width, height) comes through libjpeg's DCT
    scaling at the smallest 1/2, 1/4 or 1/8 reduction still twice that size, which the area resize after it
    averages down (a 4000 px photo wanted at 500 px decodes 1/16 of the pixels; within a level of 255 of the full
    decode resized). SceneError naming the file when it cannot be read."""
    try:
        if size is not None:
            with Image.open(path) as im:
                if im.format == "JPEG" and im.mode in ("RGB", "L"):
                    im.draft(im.mode, tuple(DRAFT_MARGIN * int(v) for v in size))
                    return np.array(im)
        return iio.imread(path)
    except Exception as e:  # imageio and Pillow raise many types for corrupt files
        raise SceneError(path, f"unreadable {what} ({type(e).__name__})") from None


def at_size(image: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """`image` (H, W, C) or (H, W) area-resized to `size` (width, height), or as it is when `size` is None or its
    own."""
    if size is None or image.shape[1::-1] == tuple(size):
        return image
    return resize_area(image, tuple(int(v) for v in size))


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image file, reading as little as the format allows."""
    try:
        props = iio.improps(path)
    except Exception as e:
        raise SceneError(path, f"unreadable image ({type(e).__name__})") from None
    return int(props.shape[1]), int(props.shape[0])


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


class ImageFiles(Sequence):
    """Images decoded from their files when indexed (`read_image`), none held in memory: training copies its split
    once into uint8 tensors on its device (voxnerf.train.ray_sampler) and scoring reads each test view when it scores it,
    so a scene never holds every split decoded beside them (lego at 800x800: 1 GB).

    Args:
        paths: N files.
        sizes: (N, 2) width, height each is decoded at (see `read_image`), or None for the files' own sizes.
    """

    read = staticmethod(read_image)

    def __init__(self, paths: list[Path], sizes: np.ndarray | None = None):
        self.paths, self.sizes = list(paths), sizes

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.read(self.paths[index], None if self.sizes is None else tuple(int(v) for v in self.sizes[index]))

    def at_sizes(self, sizes: np.ndarray) -> ImageFiles:
        """The same files, decoded at (N, 2) `sizes` (`voxnerf.data.images.resized`)."""
        return type(self)(self.paths, sizes)


class MaskFiles(ImageFiles):
    """Foreground masks decoded from their files when indexed (`read_mask`): a scene holds none of them, so 500
    masks of 12 megapixels cost no memory until each is read, at the size in use."""

    read = staticmethod(read_mask)


def load_images(paths: list[Path], with_images: bool) -> tuple[ImageFiles | None, np.ndarray]:
    """Measure images (each must be readable) and give them as files decoded on access.

    Returns:
        the images (or None when `with_images` is False) and their (N, 2) width, height.
    """
    sizes = np.array([image_size(p) for p in paths], np.int64).reshape(-1, 2)
    return (ImageFiles(paths) if with_images else None), sizes


def check_one_size(paths: list[Path], sizes: np.ndarray) -> None:
    """All images sharing one camera model must share one size; name the first that differs."""
    for p, s in zip(paths, sizes):
        if tuple(s) != tuple(sizes[0]):
            raise SceneError(p, f"image is {s[0]}x{s[1]}, the others are {sizes[0][0]}x{sizes[0][1]} (mixed sizes within one camera)")


def bounds_from_cameras(cameras: Cameras) -> tuple[np.ndarray, float, float]:
    """A box of interest for object captures, from the cameras alone.

    The center is the point closest (least squares) to all optical axes; the half-size is the radius of the
    largest sphere around it that every camera sees whole. Near and far bracket that box from every camera.

    Returns:
        bbox (2, 3), near, far.
    """
    centers, dirs = cameras.centers, cameras.forward
    proj = np.eye(3)[None] - dirs[:, :, None] * dirs[:, None, :]
    center = np.linalg.lstsq(proj.sum(0), np.einsum("nij,nj->i", proj, centers), rcond=None)[0]
    dist = np.linalg.norm(centers - center, axis=-1)
    fx, fy, cx, cy = cameras.intrinsics.T
    w, h = cameras.sizes.T
    half_fov = np.arctan(np.minimum.reduce([cx / fx, (w - cx) / fx, cy / fy, (h - cy) / fy]))
    radius = float(np.min(dist * np.sin(half_fov)))
    bbox = np.stack([center - radius, center + radius])
    return (bbox, *near_far_from_box(centers, bbox))


def split_every_nth(n: int, hold: int = 8) -> dict[str, np.ndarray]:
    """The LLFF convention: every `hold`-th image is held out for testing (and validation)."""
    idx = np.arange(n)
    test = idx[::hold]
    return {"train": np.setdiff1d(idx, test), "val": test, "test": test}


def require_number(mapping: dict, key: str, path: Path, where: str = "") -> float:
    """mapping[key] as a finite float, or SceneError naming the key."""
    value = require(mapping, key, path, where)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SceneError(path, f"'{key}'{where} is not a number: {value!r}") from None
    if not np.isfinite(number):
        raise SceneError(path, f"'{key}'{where} is {number}, expected a finite number")
    return number


def read_numpy(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """The array in a .npy file, or all arrays of a .npz archive by name; SceneError if unreadable."""
    if not path.is_file():
        raise SceneError(path, "file not found")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return loaded
        with loaded:
            return {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise SceneError(path, f"not a readable .npy/.npz file ({type(e).__name__})") from None


def image_folder(root: Path, name: str, downscale: int) -> Path:
    """`root/name`, or its `downscale`-times smaller copy `root/name_{downscale}`; SceneError if absent."""
    folder = root / (name if downscale == 1 else f"{name}_{downscale}")
    if not folder.is_dir():
        need = "" if downscale == 1 else f" (needed for downscale {downscale}; make it or load with downscale 1)"
        raise SceneError(folder, f"folder not found{need}")
    return folder


def list_images(folder: Path) -> list[Path]:
    """The image files directly in `folder`, sorted by name; SceneError if there are none."""
    if not folder.is_dir():
        raise SceneError(folder, "folder not found")
    paths = sorted(p for p in folder.iterdir() if p.suffix in IMAGE_SUFFIXES and p.is_file())
    if not paths:
        raise SceneError(folder, f"no images ({', '.join(IMAGE_SUFFIXES[:3])}) in folder")
    return paths


def background_of(path: Path) -> np.ndarray | None:
    """White (3,) if the image at `path` has an alpha channel (transparent pixels to fill), else None."""
    try:
        shape = iio.improps(path).shape
    except Exception as e:
        raise SceneError(path, f"unreadable image ({type(e).__name__})") from None
    return np.ones(3) if len(shape) == 3 and shape[2] == 4 else None


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


def find_masks(folder: Path, image_paths: list[Path]) -> list[Path] | None:
    """The mask of each image in `folder`: the file with the image's stem and any image extension, in any letter
    case (photos.JPG with masks/photos.jpg); None when `folder` is absent, SceneError naming a missing one."""
    if not folder.is_dir():
        return None
    by_stem = {p.stem.lower(): p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()}
    missing = [p for p in image_paths if p.stem.lower() not in by_stem]
    if missing:
        raise SceneError(folder, f"no mask for {missing[0].name} ({len(missing)} of {len(image_paths)} missing)")
    return [by_stem[p.stem.lower()] for p in image_paths]


def load_masks(paths: list[Path], image_sizes: np.ndarray, with_images: bool,
               downscale: int = 1) -> MaskFiles | None:
    """Measure foreground masks and give them as files decoded on access at their images' sizes; each must have
    its image's (width, height), or be `downscale` times larger (full-size masks beside downscaled image copies).

    Returns:
        N bool (H, W) masks decoded on access, or None when `with_images` is False.
    """
    sizes = np.array([image_size(p) for p in paths], np.int64).reshape(-1, 2)
    for p, got, want in zip(paths, sizes, image_sizes):
        if tuple(got) != tuple(want) and not np.all(np.abs(got - want * downscale) < downscale):
            raise SceneError(p, f"mask is {got[0]}x{got[1]} but its image is {want[0]}x{want[1]}")
    return MaskFiles(paths, np.asarray(image_sizes)) if with_images else None


def near_far_from_box(centers: np.ndarray, bbox: np.ndarray) -> tuple[float, float]:
    """Near and far distances that bracket the box `bbox` (2, 3) from every camera center (N, 3)."""
    dist = np.linalg.norm(centers - 0.5 * (bbox[0] + bbox[1]), axis=-1)
    half_diagonal = 0.5 * float(np.linalg.norm(bbox[1] - bbox[0]))
    near = float(max(np.min(dist) - half_diagonal, 1e-3 * np.min(dist)))
    return near, float(np.max(dist) + half_diagonal)


def bounds_from_points(points: np.ndarray, percentile: float = 1.0) -> np.ndarray:
    """(2, 3) box holding the sparse `points` (P, 3) between the `percentile` and 100 - `percentile` per axis."""
    return np.percentile(points, [percentile, 100 - percentile], axis=0)


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

    A point is in the hull when at least HULL_SEEN_SHARE of the cameras see it and at least HULL_AGREEMENT of those
    see it inside their mask. Points only a few cameras see are what a few masks cannot carve away; a part of the
    object that only some photos frame (a statue's pedestal, cropped from most internet photos) is still seen by a
    tenth of them. A point one camera's mask leaves out stays when ten or more cameras see it and the others keep it
    (a mask or pose a few pixels off would otherwise cut thin parts). Of the hull's pieces (26-connected on the
    lattice) those with fewer than HULL_LEAST_PIECE of the largest one's points are left out: a lone lattice point
    that a few masks happen to agree on would otherwise stretch the box (moldGoldCape_8: one point, 1 unit below a
    2-unit object). `desc` names the progress bar."""
    axes = [np.linspace(lo, hi, n) for lo, hi in zip(bbox[0], bbox[1])]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    inside_masks, seen = np.zeros(len(points), np.int64), np.zeros(len(points), np.int64)
    for i, mask in enumerate(track(masks, desc, "mask")):
        px, inside = pixels_seen(cameras, i, points, mask.shape)
        inside_masks[inside] += mask[px[inside, 1], px[inside, 0]] > 0
        seen += inside
    hull = (seen >= max(HULL_SEEN_SHARE * len(masks), 1)) & (inside_masks >= HULL_AGREEMENT * seen)
    pieces, count = ndimage.label(hull.reshape(n, n, n), structure=np.ones((3, 3, 3)))
    if not count:
        return None
    sizes = np.bincount(pieces.ravel())[1:]
    kept = points[np.isin(pieces.ravel(), 1 + np.nonzero(sizes >= HULL_LEAST_PIECE * sizes.max())[0])]
    step = (bbox[1] - bbox[0]) / (n - 1)
    return np.stack([np.maximum(kept.min(0) - step, bbox[0]), np.minimum(kept.max(0) + step, bbox[1])])


def bounds_from_frustums(cameras: Cameras, near: float, far: float) -> np.ndarray:
    """(2, 3) box holding every camera's view frustum between z-depths `near` and `far` (forward-facing scenes)."""
    depths = np.array([near, far])[None, :, None, None]
    world = cameras.centers[:, None, None] + depths * cameras.corner_rays()[:, None]
    return np.stack([world.reshape(-1, 3).min(0), world.reshape(-1, 3).max(0)])


def require_file_name(mapping: dict, key: str, path: Path, where: str = "") -> str:
    """mapping[key] as a non-empty relative file name, or SceneError naming the key."""
    name = require(mapping, key, path, where)
    if not isinstance(name, str) or not name:
        raise SceneError(path, f"'{key}'{where} is not a file name: {name!r}")
    return name


def require_angle(mapping: dict, key: str, path: Path, where: str = "") -> float:
    """mapping[key] as a field of view in radians, in (0, pi), or SceneError naming the key."""
    angle = require_number(mapping, key, path, where)
    if not 0 < angle < np.pi:
        raise SceneError(path, f"'{key}'{where} is {angle:g}: a field of view in radians must lie in (0, pi)")
    return angle


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


def check_splits(splits: dict[str, np.ndarray], source: Path) -> None:
    """A scene needs training views (test views are needed by `train`, which checks them itself)."""
    train = splits.get("train", np.zeros(0))
    if not len(train):
        total = len(np.unique(np.concatenate([np.asarray(v, np.int64) for v in splits.values()])))
        raise SceneError(source, f"no training views ({total} image{'s' * (total != 1)} in all, every one held "
                                 f"out for val/test)")
