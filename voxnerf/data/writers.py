"""Write a Scene (images loaded) in any supported format, so that its loader reads the same scene back.

Used for test fixtures and to write toy scenes in every format. Images and masks are written as PNG, so they
come back bit for bit. A format that cannot hold a scene's cameras (Blender and LLFF: one focal length, centered
principal point, no distortion) raises ValueError rather than writing something else.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch

from voxnerf.data import colmap, llff, neus
from voxnerf.data.cameras import Cameras, opengl_to_opencv
from voxnerf.data.rays import distort
from voxnerf.data.scene import SPLITS, Scene


def write_scene(scene: Scene, fmt: str, out_dir: str | Path, **options) -> Path:
    """Write `scene` as format `fmt` into `out_dir` (created if needed) and return that folder.

    Options by format:
        nerfstudio: split_lists (write `{split}_filenames`), aabb_scale (write instant-ngp's box size),
            downscales (factors d of extra `images_{d}/` and `masks_{d}/` copies).
        llff: downscales (factors d of extra `images_{d}/` copies).
        colmap: binary (True: .bin files, False: .txt files), downscales.
    """
    if fmt not in WRITERS:
        raise ValueError(f"unknown format '{fmt}' (known: {', '.join(WRITERS)})")
    if scene.images is None:
        raise ValueError("the scene was loaded without images; load it with with_images=True to write it")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    WRITERS[fmt](scene, out, **options)
    return out


def write_blender(scene: Scene, out: Path) -> None:
    """transforms_{split}.json with one camera_angle_x, images in {split}/r_{k}.png."""
    _require_centered_pinhole(scene.cameras, "blender")
    _require(len({tuple(s) for s in scene.cameras.sizes}) == 1, "blender", "images of different sizes")
    _require(len(set(scene.cameras.intrinsics[:, 0])) == 1, "blender", "more than one focal length")
    fov = 2 * np.arctan(0.5 * scene.cameras.sizes[0, 0] / scene.cameras.intrinsics[0, 0])
    for split in SPLITS:
        if split not in scene.splits:
            continue
        frames = []
        for k, i in enumerate(scene.splits[split]):
            _save_image(out / split / f"r_{k}.png", scene.images[i])
            frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": _opengl_matrix(scene.cameras, i)})
        _save_json(out / f"transforms_{split}.json", {"camera_angle_x": float(fov), "frames": frames})


def write_nerfstudio(scene: Scene, out: Path, split_lists: bool = False, aabb_scale: float | None = None,
                     downscales: tuple[int, ...] = ()) -> None:
    """transforms.json (OPENCV model; shared intrinsics at the top when all cameras agree), images/frame_*.png."""
    cams = scene.cameras
    names = [f"frame_{i + 1:05d}.png" for i in range(len(cams))]
    _write_images(scene.images, out, "images", names, downscales)
    shared = all(_nerfstudio_camera(cams, i) == _nerfstudio_camera(cams, 0) for i in range(len(cams)))
    meta = {"camera_model": "OPENCV", **(_nerfstudio_camera(cams, 0) if shared else {})}
    if aabb_scale is not None:
        meta["aabb_scale"] = aabb_scale
    frames = []
    for i, name in enumerate(names):
        frame = {"file_path": f"images/{name}", "transform_matrix": _opengl_matrix(cams, i)}
        frames.append(frame | ({} if shared else _nerfstudio_camera(cams, i)))
    if scene.masks is not None:
        _write_images([_mask_image(m) for m in scene.masks], out, "masks", names, downscales)
        for frame, name in zip(frames, names):
            frame["mask_path"] = f"masks/{name}"
    meta["frames"] = frames
    if split_lists:
        for split, index in scene.splits.items():
            meta[f"{split}_filenames"] = [frames[i]["file_path"] for i in index]
    _save_json(out / "transforms.json", meta)


def write_llff(scene: Scene, out: Path, downscales: tuple[int, ...] = ()) -> None:
    """poses_bounds.npy and images/image_*.png. Each view's near / far bounds are `scene.extras["view_bounds"]`
    (N, 2) when present, else the scene's near / far."""
    cams = scene.cameras
    _require_centered_pinhole(cams, "llff")
    bounds = scene.extras.get("view_bounds", np.tile([scene.near, scene.far], (len(cams), 1)))
    np.save(out / llff.FILE, np.concatenate([llff.llff_from_cameras(cams).reshape(-1, 15), bounds], 1))
    _write_images(scene.images, out, "images", [f"image_{i:03d}.png" for i in range(len(cams))], downscales)


def write_colmap(scene: Scene, out: Path, binary: bool = True, downscales: tuple[int, ...] = ()) -> None:
    """sparse/0/{cameras,images,points3D}.{bin|txt} and images/image_*.png; observations by projection."""
    cams = scene.cameras
    names = [f"image_{i:03d}.png" for i in range(len(cams))]
    _write_images(scene.images, out, "images", names, downscales)
    camera_ids, camera_table = _colmap_cameras(cams)
    points = np.zeros((0, 3)) if scene.points is None else scene.points
    colors = scene.extras.get("point_colors", np.full((len(points), 3), 128, np.uint8))
    observations = [_observations(cams, i, points) for i in range(len(cams))]
    folder = out / "sparse" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    w2c = [_world_to_camera(cams.c2w[i]) for i in range(len(cams))]
    writer = _write_colmap_bin if binary else _write_colmap_txt
    writer(folder, camera_table, names, w2c, camera_ids, observations, points, colors)


def write_neus(scene: Scene, out: Path) -> None:
    """cameras_sphere.npz, image/*.png and mask/*.png.

    scale_mat maps the unit sphere onto the sphere through the corners of the scene's box, so that NeuS sees the
    whole box; loaded back, the box is the cube around that sphere (sqrt(3) times wider than a cubic box).
    """
    cams = scene.cameras
    _require(not np.any(cams.distortion), "neus", "lens distortion")
    _require(len({tuple(s) for s in cams.sizes}) == 1, "neus", "images of different sizes")
    scale_mat = np.eye(4) * 0.5 * np.linalg.norm(scene.bbox[1] - scene.bbox[0])
    scale_mat[:, 3] = [*scene.center, 1.0]
    arrays = {}
    for i in range(len(cams)):
        fx, fy, cx, cy = cams.intrinsics[i]
        k = np.array([[fx, 0, cx, 0], [0, fy, cy, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
        arrays[f"world_mat_{i}"] = k @ _world_to_camera(cams.c2w[i])
        arrays[f"scale_mat_{i}"] = scale_mat
    np.savez(out / neus.FILE, **arrays)
    names = [f"{i:03d}.png" for i in range(len(cams))]
    _write_images(scene.images, out, "image", names)
    if scene.masks is not None:
        _write_images([_mask_image(m) for m in scene.masks], out, "mask", names)


WRITERS = {"blender": write_blender, "nerfstudio": write_nerfstudio, "llff": write_llff, "colmap": write_colmap,
           "neus": write_neus}


def _require(ok: bool, fmt: str, what: str) -> None:
    if not ok:
        raise ValueError(f"the {fmt} format cannot hold {what}")


def _require_centered_pinhole(cams: Cameras, fmt: str) -> None:
    """Blender and LLFF store one focal length per image, no principal point and no distortion."""
    fx, fy, cx, cy = cams.intrinsics.T
    _require(np.allclose(fx, fy, rtol=1e-12, atol=0), fmt, "different focal lengths in x and y")
    centered = np.allclose(np.stack([cx, cy], -1), cams.sizes / 2, rtol=0, atol=1e-9)
    _require(centered, fmt, "an off-center principal point")
    _require(not np.any(cams.distortion), fmt, "lens distortion")


def _opengl_matrix(cams: Cameras, i: int) -> list[list[float]]:
    """Camera i's 4x4 camera-to-world matrix in OpenGL axes, as nested lists for JSON."""
    return np.concatenate([opengl_to_opencv(cams.c2w[i]), [[0, 0, 0, 1]]]).tolist()


def _world_to_camera(c2w: np.ndarray) -> np.ndarray:
    """(4, 4) world-to-camera matrix of a (3, 4) camera-to-world matrix."""
    rotation = c2w[:, :3].T
    return np.block([[rotation, -rotation @ c2w[:, 3:]], [np.zeros((1, 3)), np.ones((1, 1))]])


def _nerfstudio_camera(cams: Cameras, i: int) -> dict:
    fx, fy, cx, cy = cams.intrinsics[i].tolist()
    k1, k2, p1, p2 = cams.distortion[i].tolist()
    w, h = cams.sizes[i].tolist()
    return {"fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": w, "h": h, "k1": k1, "k2": k2, "p1": p1, "p2": p2}


def _colmap_cameras(cams: Cameras) -> tuple[list[int], list[tuple[str, int, int, np.ndarray]]]:
    """One COLMAP camera per distinct (size, intrinsics, distortion): each image's camera id (1-based) and the table."""
    keys, camera_ids, table = {}, [], []
    for i in range(len(cams)):
        full = np.concatenate([cams.intrinsics[i], cams.distortion[i]])
        key = (*cams.sizes[i].tolist(), *full.tolist())
        if key not in keys:
            keys[key] = len(keys) + 1
            model, params = colmap.compact_params(full)
            table.append((model, *cams.sizes[i].tolist(), params))
        camera_ids.append(keys[key])
    return camera_ids, table


def _observations(cams: Cameras, i: int, points: np.ndarray) -> np.ndarray:
    """(M, 3) pixel x, y and 1-based point id of the `points` (P, 3) in front of camera i and inside its image."""
    w2c = _world_to_camera(cams.c2w[i])
    xyz = points @ w2c[:3, :3].T + w2c[:3, 3]
    front = np.flatnonzero(xyz[:, 2] > 1e-9)
    xy = torch.from_numpy(xyz[front, :2] / xyz[front, 2:])
    coeffs = torch.from_numpy(cams.distortion[i]).expand(len(front), 4)
    fx, fy, cx, cy = cams.intrinsics[i]
    uv = distort(xy, coeffs).numpy() * [fx, fy] + [cx, cy]
    inside = np.all((uv >= 0) & (uv < cams.sizes[i]), axis=1)
    return np.concatenate([uv[inside], front[inside, None] + 1.0], 1)


def _write_colmap_bin(folder: Path, camera_table, names, w2c, camera_ids, observations, points, colors) -> None:
    with open(folder / "cameras.bin", "wb") as f:
        f.write(struct.pack("<Q", len(camera_table)))
        for cam_id, (model, width, height, params) in enumerate(camera_table, 1):
            f.write(struct.pack("<iiQQ", cam_id, colmap.MODEL_IDS[model], width, height))
            f.write(np.asarray(params, "<f8").tobytes())
    with open(folder / "images.bin", "wb") as f:
        f.write(struct.pack("<Q", len(names)))
        for image_id, (name, m, cam_id, obs) in enumerate(zip(names, w2c, camera_ids, observations), 1):
            f.write(struct.pack("<i7di", image_id, *colmap.rotation_to_quaternion(m[:3, :3]), *m[:3, 3], cam_id))
            f.write(name.encode() + b"\0" + struct.pack("<Q", len(obs)))
            record = np.zeros(len(obs), colmap.POINT2D)
            record["xy"], record["point3d_id"] = obs[:, :2], obs[:, 2]
            f.write(record.tobytes())
    tracks = _tracks(observations, len(points))
    with open(folder / "points3D.bin", "wb") as f:
        f.write(struct.pack("<Q", len(points)))
        for k, (xyz, rgb, track) in enumerate(zip(points, colors, tracks), 1):
            f.write(struct.pack("<Q3d3Bd", k, *xyz, *rgb, 0.0) + struct.pack("<Q", len(track)))
            f.write(np.array([tuple(t) for t in track], colmap.TRACK).tobytes())


def _write_colmap_txt(folder: Path, camera_table, names, w2c, camera_ids, observations, points, colors) -> None:
    lines = ["# Camera list with one line of data per camera:", "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]",
             f"# Number of cameras: {len(camera_table)}"]
    for cam_id, (model, width, height, params) in enumerate(camera_table, 1):
        lines.append(f"{cam_id} {model} {width} {height} {_numbers(params)}")
    (folder / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = ["# Image list with two lines of data per image:",
             "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
             "#   POINTS2D[] as (X, Y, POINT3D_ID)", f"# Number of images: {len(names)}"]
    for image_id, (name, m, cam_id, obs) in enumerate(zip(names, w2c, camera_ids, observations), 1):
        pose = _numbers(np.concatenate([colmap.rotation_to_quaternion(m[:3, :3]), m[:3, 3]]))
        lines.append(f"{image_id} {pose} {cam_id} {name}")
        lines.append(" ".join(f"{x!r} {y!r} {int(p)}" for x, y, p in obs.tolist()))
    (folder / "images.txt").write_text("\n".join(lines) + "\n")
    lines = ["# 3D point list with one line of data per point:",
             "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)",
             f"# Number of points: {len(points)}"]
    for k, (xyz, rgb, track) in enumerate(zip(points, colors, _tracks(observations, len(points))), 1):
        track_text = " ".join(f"{image_id} {idx}" for image_id, idx in track)
        lines.append(f"{k} {_numbers(xyz)} {' '.join(str(int(c)) for c in rgb)} 0.0 {track_text}".rstrip())
    (folder / "points3D.txt").write_text("\n".join(lines) + "\n")


def _tracks(observations: list[np.ndarray], n_points: int) -> list[list[tuple[int, int]]]:
    """For each point, the (1-based image id, index in that image's observations) pairs that see it."""
    tracks = [[] for _ in range(n_points)]
    for image_id, obs in enumerate(observations, 1):
        for idx, point_id in enumerate(obs[:, 2].astype(np.int64)):
            tracks[point_id - 1].append((image_id, idx))
    return tracks


def _numbers(values) -> str:
    """Floats separated by spaces, each in the shortest form that reads back exactly."""
    return " ".join(repr(float(v)) for v in values)


def _mask_image(mask: np.ndarray) -> np.ndarray:
    return mask.astype(np.uint8) * 255


def _downscaled(image: np.ndarray, factor: int) -> np.ndarray:
    """The block mean of `image` (H, W[, C]) over factor x factor pixels; H and W must be multiples of factor."""
    h, w = image.shape[:2]
    if h % factor or w % factor:
        raise ValueError(f"a {w}x{h} image does not divide into {factor}x{factor} blocks")
    blocks = image.reshape(h // factor, factor, w // factor, factor, *image.shape[2:]).astype(np.float64)
    return np.round(blocks.mean(axis=(1, 3))).astype(np.uint8)


def _write_images(images: list[np.ndarray], out: Path, folder: str, names: list[str], downscales=()) -> None:
    """Each image as PNG in out/folder/name, and block-mean copies in out/folder_{d}/name for each d."""
    for image, name in zip(images, names):
        _save_image(out / folder / name, image)
        for d in downscales:
            _save_image(out / f"{folder}_{d}" / name, _downscaled(image, d))


def _save_image(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, image)


def _save_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))
