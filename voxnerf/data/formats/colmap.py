"""COLMAP sparse model: `sparse/0/` (or `sparse/`) with cameras, images and points3D as `.bin` or `.txt`.

Both of COLMAP's encodings are read here with struct/numpy (`.bin` wins when both are present). Camera models
SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL and OPENCV map onto fx fy cx cy k1 k2 p1 p2; any other is
refused. COLMAP stores world-to-camera rotations (quaternion qw qx qy qz) and translations in the OpenCV
convention, and pixel centers at +0.5 like voxnerf; they are inverted to camera-to-world. Images are read from
`images/` (`images_{d}/` for downscale d), in name order; every 8th is held out for testing.

Bounds: the 1st-99th percentile box of the sparse points, and near / far from the depths of the points each
image observes (0.1th-99.9th percentile, as LLFF's imgs2poses does), and each camera's own near bound
(`Cameras.near`) from the depths of the points its image observes (the 0.1th percentile, as imgs2poses writes per
view). Without points (points3D absent or empty) the bounds come from the cameras, and cameras have no own near.

`write` writes a scene as such a model (test fixtures and toy captures), observations by projection.
`voxnerf process` writes its models with pycolmap, but reading stays here: pycolmap's reader (4.2.1) does not
check a file's length, so a truncated cameras.bin loads as garbage without an error and a truncated images.bin
kept it busy for over a minute, where this reader names the file and says it is truncated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from voxnerf.data.bounds import bounds_from_cameras, bounds_from_points
from voxnerf.data.camera_checks import cameras_for_images
from voxnerf.data.cameras import Cameras
from voxnerf.data.files import find_image, image_folder
from voxnerf.data.formats.writing import world_to_camera, write_images
from voxnerf.data.images import background_of, load_images
from voxnerf.data.rays import distort
from voxnerf.data.scene import Scene, split_every_nth
from voxnerf.errors import SceneError

NAME = "colmap"
MODEL_FILES = ("cameras", "images", "points3D")
EXTENSIONS = (".bin", ".txt")
# COLMAP's model ids, names and parameter counts (src/colmap/sensor/models.h).
MODELS = {
    0: ("SIMPLE_PINHOLE", 3), 1: ("PINHOLE", 4), 2: ("SIMPLE_RADIAL", 4), 3: ("RADIAL", 5), 4: ("OPENCV", 8),
    5: ("OPENCV_FISHEYE", 8), 6: ("FULL_OPENCV", 12), 7: ("FOV", 5), 8: ("SIMPLE_RADIAL_FISHEYE", 4),
    9: ("RADIAL_FISHEYE", 5), 10: ("THIN_PRISM_FISHEYE", 12), 11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16),
}
MODEL_IDS = {name: model_id for model_id, (name, _) in MODELS.items()}
# Where each of fx fy cx cy k1 k2 p1 p2 sits in a supported model's parameters (None: zero), simplest first.
PARAM_ORDER = {
    "SIMPLE_PINHOLE": (0, 0, 1, 2, None, None, None, None),
    "PINHOLE": (0, 1, 2, 3, None, None, None, None),
    "SIMPLE_RADIAL": (0, 0, 1, 2, 3, None, None, None),
    "RADIAL": (0, 0, 1, 2, 3, 4, None, None),
    "OPENCV": (0, 1, 2, 3, 4, 5, 6, 7),
}


@dataclass
class Model:
    """A sparse model as COLMAP stores it.

    Attributes:
        cameras: camera id -> (model name, width, height, (K,) float64 params).
        names: N image names, in file order.
        qvecs: (N, 4) world-to-camera rotations as quaternions qw qx qy qz.
        tvecs: (N, 3) world-to-camera translations.
        camera_ids: (N,) int64 camera of each image.
        observed: N (M_i,) int64 point3D ids each image observes (-1: none).
        point_ids: (P,) int64 point3D ids.
        points: (P, 3) float64 positions.
        colors: (P, 3) uint8 RGB.
    """

    cameras: dict
    names: list[str]
    qvecs: np.ndarray
    tvecs: np.ndarray
    camera_ids: np.ndarray
    observed: list[np.ndarray]
    point_ids: np.ndarray
    points: np.ndarray
    colors: np.ndarray


def detect(root: Path) -> bool:
    return any((d / f"cameras{ext}").is_file() for d in (root / "sparse" / "0", root / "sparse") for ext in EXTENSIONS)


def load(root: Path, with_images: bool = True, downscale: int = 1, **_) -> Scene:
    folder = model_folder(root)
    model = read_model(folder)
    order = np.argsort(model.names, kind="stable")
    image_dir = image_folder(root, "images", downscale)
    paths = [find_image(image_dir / model.names[i]) for i in order]
    images, sizes = load_images(paths, with_images)
    cameras = _cameras(model, folder)
    bbox, near, far, cameras.near = _bounds(model, cameras)
    cameras = cameras_for_images(cameras.subset(order), paths, sizes, downscale)
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
        points=model.points if len(model.points) else None,
        extras={"point_colors": model.colors} if len(model.points) else {},
    )


def model_folder(root: Path) -> Path:
    """`root/sparse/0` when it holds a model, else `root/sparse`."""
    first = root / "sparse" / "0"
    return first if any((first / f"cameras{ext}").is_file() for ext in EXTENSIONS) else root / "sparse"


def read_model(folder: Path) -> Model:
    """The model in `folder`, binary if cameras.bin exists, else text; points3D may be absent."""
    binary = (folder / "cameras.bin").is_file()
    ext = ".bin" if binary else ".txt"
    for name in MODEL_FILES[:2]:
        if not (folder / f"{name}{ext}").is_file():
            raise SceneError(folder / f"{name}{ext}", "file not found (a COLMAP model needs cameras, images, points3D)")
    if binary:
        readers = (_read_cameras_bin, _read_images_bin, _read_points_bin)
    else:
        readers = (_read_cameras_txt, _read_images_txt, _read_points_txt)
    cameras = readers[0](folder / f"cameras{ext}")
    names, qvecs, tvecs, camera_ids, observed = readers[1](folder / f"images{ext}")
    points_path = folder / f"points3D{ext}"
    point_ids, points, colors = readers[2](points_path) if points_path.is_file() else _no_points()
    return Model(cameras, names, qvecs, tvecs, camera_ids, observed, point_ids, points, colors)


def _cameras(model: Model, folder: Path) -> Cameras:
    """Full-resolution cameras of the model's images, in file order."""
    c2w, intrinsics, sizes, distortion = [], [], [], []
    for name, q, t, cam_id in zip(model.names, model.qvecs, model.tvecs, model.camera_ids):
        if cam_id not in model.cameras:
            raise SceneError(folder, f"image '{name}' uses camera {cam_id}, which the cameras file lacks")
        rotation = quaternion_to_rotation(q)
        c2w.append(np.concatenate([rotation.T, -rotation.T @ t[:, None]], 1))
        model_name, width, height, params = model.cameras[cam_id]
        full = expand_params(model_name, params)
        intrinsics.append(full[:4])
        distortion.append(full[4:])
        sizes.append((width, height))
    return Cameras(np.stack(c2w), np.stack(intrinsics), np.array(sizes), np.stack(distortion))


def _bounds(model: Model, cameras: Cameras) -> tuple[np.ndarray, float, float, np.ndarray | None]:
    """bbox (2, 3), near, far and each image's (N,) near (its own depths' 0.1th percentile; the scene's near for an
    image that observes no point) from the sparse points when there are any, else from the cameras (no image's
    own near)."""
    depths = _observed_depths(model)
    every = np.concatenate([np.zeros(0), *depths])
    if not len(every):
        return (*bounds_from_cameras(cameras), None)
    near, far = np.percentile(every, [0.1, 99.9])
    own = np.array([np.percentile(d, 0.1) if len(d) else near for d in depths])
    return bounds_from_points(model.points), float(near), float(far), own


def _observed_depths(model: Model) -> list[np.ndarray]:
    """Per image (in the model's order), the camera-space depths (M_i,) of the points it observes in front of it.

    Observations of ids that points3D lacks (a filtered points file) are skipped.
    """
    if not len(model.point_ids):
        return [np.zeros(0) for _ in model.names]
    order = np.argsort(model.point_ids)
    depths = []
    for q, t, ids in zip(model.qvecs, model.tvecs, model.observed):
        rows = order[np.clip(np.searchsorted(model.point_ids, ids, sorter=order), 0, len(order) - 1)]
        xyz = model.points[rows[model.point_ids[rows] == ids]]
        z = (xyz @ quaternion_to_rotation(q).T + t)[:, 2]
        depths.append(z[z > 0])
    return depths


def expand_params(model_name: str, params: np.ndarray) -> np.ndarray:
    """(8,) fx fy cx cy k1 k2 p1 p2 from a supported model's (K,) parameters."""
    order = PARAM_ORDER[model_name]
    return np.array([0.0 if i is None else params[i] for i in order], np.float64)


def compact_params(full: np.ndarray) -> tuple[str, np.ndarray]:
    """The simplest supported model that holds fx fy cx cy k1 k2 p1 p2 `full` (8,) exactly, and its parameters."""
    for name, order in PARAM_ORDER.items():
        params = np.array([full[order.index(i)] for i in range(MODELS[MODEL_IDS[name]][1])], np.float64)
        if np.array_equal(expand_params(name, params), full):
            return name, params
    raise AssertionError("OPENCV holds every parameter vector")


def quaternion_to_rotation(q: np.ndarray) -> np.ndarray:
    """(3, 3) rotation matrix of the quaternion `q` (4,) qw qx qy qz (normalized here)."""
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def rotation_to_quaternion(r: np.ndarray) -> np.ndarray:
    """(4,) unit quaternion qw qx qy qz (qw >= 0) of the rotation matrix `r` (3, 3).

    The quaternion is the top eigenvector of a symmetric 4x4 matrix built from `r` (Bar-Itzhack's method),
    which stays accurate for every rotation angle.
    """
    (a, b, c), (d, e, f), (g, h, i) = r
    k = np.array([
        [a + e + i, h - f, c - g, d - b],
        [h - f, a - e - i, b + d, c + g],
        [c - g, b + d, e - a - i, f + h],
        [d - b, c + g, f + h, i - a - e],
    ]) / 3.0
    q = np.linalg.eigh(k)[1][:, -1]
    return q if q[0] >= 0 else -q


def _unsupported(path: Path, model: str) -> SceneError:
    return SceneError(path, f"camera model {model} is not supported (use one of {', '.join(PARAM_ORDER)})")


def _no_points() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 3), np.uint8)


class _BinaryReader:
    """Sequential little-endian reads from a COLMAP .bin file; SceneError when the file ends early."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = path.read_bytes()
        except OSError as e:
            raise SceneError(path, f"cannot read ({e})") from None
        self.offset = 0

    def _advance(self, size: int) -> int:
        start = self.offset
        if start + size > len(self.data):
            raise SceneError(self.path, f"truncated: needs {start + size} bytes, has {len(self.data)}")
        self.offset += size
        return start

    def values(self, fmt: str) -> tuple:
        """struct-unpack the next values in `fmt` (little-endian)."""
        return struct.unpack_from("<" + fmt, self.data, self._advance(struct.calcsize("<" + fmt)))

    def array(self, dtype: np.dtype, count: int) -> np.ndarray:
        """The next `count` records of `dtype`."""
        dtype = np.dtype(dtype)
        return np.frombuffer(self.data, dtype, count, self._advance(dtype.itemsize * count))

    def string(self) -> str:
        """The next null-terminated UTF-8 string."""
        end = self.data.find(b"\0", self.offset)
        if end < 0:
            raise SceneError(self.path, "truncated: an image name has no terminating null byte")
        text = self.data[self.offset:end].decode("utf-8", errors="replace")
        self.offset = end + 1
        return text

    def finish(self) -> None:
        """Refuse bytes left over after the last record."""
        if self.offset != len(self.data):
            raise SceneError(self.path, f"{len(self.data) - self.offset} unexpected bytes after the last record")


POINT2D = np.dtype([("xy", "<f8", 2), ("point3d_id", "<i8")])
TRACK = np.dtype([("image_id", "<i4"), ("point2d_idx", "<i4")])


def _read_cameras_bin(path: Path) -> dict:
    reader = _BinaryReader(path)
    cameras = {}
    for _ in range(reader.values("Q")[0]):
        cam_id, model_id, width, height = reader.values("iiQQ")
        name = MODELS.get(model_id, (f"id {model_id}", 0))[0]
        if name not in PARAM_ORDER:
            raise _unsupported(path, name)
        cameras[cam_id] = (name, width, height, np.array(reader.array("<f8", MODELS[model_id][1])))
    reader.finish()
    return cameras


def _read_images_bin(path: Path) -> tuple:
    reader = _BinaryReader(path)
    names, qvecs, tvecs, camera_ids, observed = [], [], [], [], []
    for _ in range(reader.values("Q")[0]):
        _, *pose, camera_id = reader.values("i7di")
        names.append(reader.string())
        observed.append(reader.array(POINT2D, reader.values("Q")[0])["point3d_id"].astype(np.int64))
        qvecs.append(pose[:4])
        tvecs.append(pose[4:])
        camera_ids.append(camera_id)
    reader.finish()
    return _checked_images(path, names, qvecs, tvecs, camera_ids, observed)


def _read_points_bin(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    reader = _BinaryReader(path)
    count = reader.values("Q")[0]
    ids, xyz, rgb = np.zeros(count, np.int64), np.zeros((count, 3)), np.zeros((count, 3), np.uint8)
    for k in range(count):
        values = reader.values("Q3d3Bd")
        ids[k], xyz[k], rgb[k] = values[0], values[1:4], values[4:7]
        reader.array(TRACK, reader.values("Q")[0])
    reader.finish()
    return ids, _checked_points(path, xyz), rgb


def _text_rows(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line that is not a comment; blank lines are kept."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SceneError(path, f"cannot read ({e})") from None
    return [(n, line.strip()) for n, line in enumerate(lines, 1) if not line.lstrip().startswith("#")]


def _numbers(path: Path, line: int, fields: list[str], dtype=np.float64) -> np.ndarray:
    try:
        return np.array(fields, dtype=dtype)
    except ValueError:
        raise SceneError(path, f"line {line}: expected numbers, got {' '.join(fields)!r}") from None


def _read_cameras_txt(path: Path) -> dict:
    cameras = {}
    for line, text in _text_rows(path):
        if not text:
            continue
        fields = text.split()
        if len(fields) < 4:
            raise SceneError(path, f"line {line}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]")
        cam_id, width, height = _numbers(path, line, [fields[0], fields[2], fields[3]], np.int64)
        if fields[1] not in PARAM_ORDER:
            raise _unsupported(path, fields[1])
        params = _numbers(path, line, fields[4:])
        expected = MODELS[MODEL_IDS[fields[1]]][1]
        if len(params) != expected:
            raise SceneError(path, f"line {line}: {fields[1]} takes {expected} parameters, got {len(params)}")
        cameras[int(cam_id)] = (fields[1], int(width), int(height), params)
    return cameras


def _read_images_txt(path: Path) -> tuple:
    rows = _text_rows(path)
    names, qvecs, tvecs, camera_ids, observed = [], [], [], [], []
    k = 0
    while k < len(rows):
        line, text = rows[k]
        if not text:
            k += 1
            continue
        fields = text.split(maxsplit=9)
        if len(fields) != 10:
            raise SceneError(path, f"line {line}: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME")
        pose = _numbers(path, line, fields[1:8])
        points_line, points_text = rows[k + 1] if k + 1 < len(rows) else (line + 1, "")
        points = _numbers(path, points_line, points_text.split())
        if len(points) % 3:
            raise SceneError(path, f"line {points_line}: expected triples X Y POINT3D_ID")
        names.append(fields[9])
        qvecs.append(pose[:4])
        tvecs.append(pose[4:])
        camera_ids.append(int(_numbers(path, line, [fields[8]], np.int64)[0]))
        observed.append(points.reshape(-1, 3)[:, 2].astype(np.int64))
        k += 2
    return _checked_images(path, names, qvecs, tvecs, camera_ids, observed)


def _read_points_txt(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [(line, text.split()) for line, text in _text_rows(path) if text]
    for line, fields in rows:
        if len(fields) < 8 or (len(fields) - 8) % 2:
            raise SceneError(path, f"line {line}: expected POINT3D_ID X Y Z R G B ERROR TRACK[]")
    ids = np.array([_numbers(path, line, f[:1], np.int64)[0] for line, f in rows], np.int64)
    xyz = np.array([_numbers(path, line, f[1:4]) for line, f in rows]).reshape(-1, 3)
    rgb = np.array([_numbers(path, line, f[4:7], np.int64) for line, f in rows]).reshape(-1, 3)
    return ids, _checked_points(path, xyz), np.clip(rgb, 0, 255).astype(np.uint8)


def _checked_images(path: Path, names, qvecs, tvecs, camera_ids, observed) -> tuple:
    """The images file's contents as arrays, refusing an empty model and NaN poses."""
    if not names:
        raise SceneError(path, "the model has no images")
    qvecs, tvecs = np.array(qvecs, np.float64).reshape(-1, 4), np.array(tvecs, np.float64).reshape(-1, 3)
    bad = np.flatnonzero(~np.all(np.isfinite(np.concatenate([qvecs, tvecs], 1)), axis=1))
    if len(bad):
        raise SceneError(path, f"image '{names[bad[0]]}': pose contains NaN or inf")
    bad = np.flatnonzero(np.linalg.norm(qvecs, axis=1) == 0)
    if len(bad):
        raise SceneError(path, f"image '{names[bad[0]]}': rotation quaternion is zero")
    return names, qvecs, tvecs, np.array(camera_ids, np.int64), observed


def _checked_points(path: Path, xyz: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(xyz)):
        raise SceneError(path, "a point position contains NaN or inf")
    return xyz


def write(scene: Scene, out: Path, binary: bool = True, downscales: tuple[int, ...] = ()) -> None:
    """sparse/0/{cameras,images,points3D}.{bin|txt} and images/image_*.png; observations by projection."""
    cams = scene.cameras
    names = [f"image_{i:03d}.png" for i in range(len(cams))]
    write_images(scene.images, out, "images", names, downscales)
    camera_ids, camera_table = _camera_table(cams)
    points = np.zeros((0, 3)) if scene.points is None else scene.points
    colors = scene.extras.get("point_colors", np.full((len(points), 3), 128, np.uint8))
    observations = [_observations(cams, i, points) for i in range(len(cams))]
    folder = out / "sparse" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    w2c = [world_to_camera(cams.c2w[i]) for i in range(len(cams))]
    writer = _write_bin if binary else _write_txt
    writer(folder, camera_table, names, w2c, camera_ids, observations, points, colors)


def _camera_table(cams: Cameras) -> tuple[list[int], list[tuple[str, int, int, np.ndarray]]]:
    """One COLMAP camera per distinct (size, intrinsics, distortion): each image's camera id (1-based) and the table."""
    keys, camera_ids, table = {}, [], []
    for i in range(len(cams)):
        full = np.concatenate([cams.intrinsics[i], cams.distortion[i]])
        key = (*cams.sizes[i].tolist(), *full.tolist())
        if key not in keys:
            keys[key] = len(keys) + 1
            model, params = compact_params(full)
            table.append((model, *cams.sizes[i].tolist(), params))
        camera_ids.append(keys[key])
    return camera_ids, table


def _observations(cams: Cameras, i: int, points: np.ndarray) -> np.ndarray:
    """(M, 3) pixel x, y and 1-based point id of the `points` (P, 3) in front of camera i and inside its image."""
    w2c = world_to_camera(cams.c2w[i])
    xyz = points @ w2c[:3, :3].T + w2c[:3, 3]
    front = np.flatnonzero(xyz[:, 2] > 1e-9)
    xy = torch.from_numpy(xyz[front, :2] / xyz[front, 2:])
    coeffs = torch.from_numpy(cams.distortion[i]).expand(len(front), 4)
    fx, fy, cx, cy = cams.intrinsics[i]
    uv = distort(xy, coeffs).numpy() * [fx, fy] + [cx, cy]
    inside = np.all((uv >= 0) & (uv < cams.sizes[i]), axis=1)
    return np.concatenate([uv[inside], front[inside, None] + 1.0], 1)


def _write_bin(folder: Path, camera_table, names, w2c, camera_ids, observations, points, colors) -> None:
    with open(folder / "cameras.bin", "wb") as f:
        f.write(struct.pack("<Q", len(camera_table)))
        for cam_id, (model, width, height, params) in enumerate(camera_table, 1):
            f.write(struct.pack("<iiQQ", cam_id, MODEL_IDS[model], width, height))
            f.write(np.asarray(params, "<f8").tobytes())
    with open(folder / "images.bin", "wb") as f:
        f.write(struct.pack("<Q", len(names)))
        for image_id, (name, m, cam_id, obs) in enumerate(zip(names, w2c, camera_ids, observations), 1):
            f.write(struct.pack("<i7di", image_id, *rotation_to_quaternion(m[:3, :3]), *m[:3, 3], cam_id))
            f.write(name.encode() + b"\0" + struct.pack("<Q", len(obs)))
            record = np.zeros(len(obs), POINT2D)
            record["xy"], record["point3d_id"] = obs[:, :2], obs[:, 2]
            f.write(record.tobytes())
    tracks = _tracks(observations, len(points))
    with open(folder / "points3D.bin", "wb") as f:
        f.write(struct.pack("<Q", len(points)))
        for k, (xyz, rgb, track) in enumerate(zip(points, colors, tracks), 1):
            f.write(struct.pack("<Q3d3Bd", k, *xyz, *rgb, 0.0) + struct.pack("<Q", len(track)))
            f.write(np.array([tuple(t) for t in track], TRACK).tobytes())


def _write_txt(folder: Path, camera_table, names, w2c, camera_ids, observations, points, colors) -> None:
    lines = ["# Camera list with one line of data per camera:", "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]",
             f"# Number of cameras: {len(camera_table)}"]
    for cam_id, (model, width, height, params) in enumerate(camera_table, 1):
        lines.append(f"{cam_id} {model} {width} {height} {_exact_text(params)}")
    (folder / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = ["# Image list with two lines of data per image:",
             "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
             "#   POINTS2D[] as (X, Y, POINT3D_ID)", f"# Number of images: {len(names)}"]
    for image_id, (name, m, cam_id, obs) in enumerate(zip(names, w2c, camera_ids, observations), 1):
        pose = _exact_text(np.concatenate([rotation_to_quaternion(m[:3, :3]), m[:3, 3]]))
        lines.append(f"{image_id} {pose} {cam_id} {name}")
        lines.append(" ".join(f"{x!r} {y!r} {int(p)}" for x, y, p in obs.tolist()))
    (folder / "images.txt").write_text("\n".join(lines) + "\n")
    lines = ["# 3D point list with one line of data per point:",
             "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)",
             f"# Number of points: {len(points)}"]
    for k, (xyz, rgb, track) in enumerate(zip(points, colors, _tracks(observations, len(points))), 1):
        track_text = " ".join(f"{image_id} {idx}" for image_id, idx in track)
        lines.append(f"{k} {_exact_text(xyz)} {' '.join(str(int(c)) for c in rgb)} 0.0 {track_text}".rstrip())
    (folder / "points3D.txt").write_text("\n".join(lines) + "\n")


def _tracks(observations: list[np.ndarray], n_points: int) -> list[list[tuple[int, int]]]:
    """For each point, the (1-based image id, index in that image's observations) pairs that see it."""
    tracks = [[] for _ in range(n_points)]
    for image_id, obs in enumerate(observations, 1):
        for idx, point_id in enumerate(obs[:, 2].astype(np.int64)):
            tracks[point_id - 1].append((image_id, idx))
    return tracks


def _exact_text(values) -> str:
    """Floats separated by spaces, each in the shortest form that reads back exactly."""
    return " ".join(repr(float(v)) for v in values)
