"""A capture's files read with checks: JSON and numpy files, the values they hold, image files found by name and
the folders that hold them. Each failure is a SceneError naming the file at fault."""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import numpy as np

from voxnerf.errors import SceneError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".JPG", ".JPEG", ".PNG")


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


def find_image(path: Path) -> Path:
    """`path` itself if it exists, else `path` with the first image suffix that exists."""
    if path.is_file():
        return path
    for suffix in IMAGE_SUFFIXES:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return candidate
    raise SceneError(path, "image not found")


def list_images(folder: Path) -> list[Path]:
    """The image files directly in `folder`, sorted by name; SceneError if there are none."""
    if not folder.is_dir():
        raise SceneError(folder, "folder not found")
    paths = sorted(p for p in folder.iterdir() if p.suffix in IMAGE_SUFFIXES and p.is_file())
    if not paths:
        raise SceneError(folder, f"no images ({', '.join(IMAGE_SUFFIXES[:3])}) in folder")
    return paths


def image_folder(root: Path, name: str, downscale: int) -> Path:
    """`root/name`, or its `downscale`-times smaller copy `root/name_{downscale}`; SceneError if absent."""
    folder = root / (name if downscale == 1 else f"{name}_{downscale}")
    if not folder.is_dir():
        need = "" if downscale == 1 else f" (needed for downscale {downscale}; make it or load with downscale 1)"
        raise SceneError(folder, f"folder not found{need}")
    return folder


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
