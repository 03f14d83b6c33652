"""NeuS / IDR (DTU, BlendedMVS): `cameras_sphere.npz` with `world_mat_i` and `scale_mat_i` for each image.

`world_mat_i` (4x4) is the projection K [R | t] from world coordinates to pixels of image i (OpenCV axes);
`scale_mat_i` maps NeuS's normalized space, where the object lies in the unit sphere, into world coordinates
(a uniform scale and a translation, the same for every image). Images are `image/` (or `images/`) in name
order, masks the same in `mask/`; image i goes with matrix i. Every 8th image is held out for testing.

Where the scene lives: cameras are returned in world coordinates (the decomposition of `world_mat_i`, as
IDR's load_K_Rt_from_P does for world_mat @ scale_mat, without OpenCV). The box of interest is the cube
around scale_mat's sphere, center +- radius, so the unit box of the run's box space (`voxnerf.data.normalize`) is
exactly NeuS's normalized space.
`scale_mat_0` is kept in `scene.extras["scale_mat"]`, the mask files in `extras["mask_paths"]`.
Downscale is ignored: the format ships one resolution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxnerf.data.bounds import near_far_from_box
from voxnerf.data.camera_checks import check_one_size
from voxnerf.data.cameras import Cameras
from voxnerf.data.files import list_images, read_numpy
from voxnerf.data.formats.writing import mask_image, require_holds, world_to_camera, write_images
from voxnerf.data.images import background_of, load_images, load_masks
from voxnerf.data.scene import Scene, split_every_nth
from voxnerf.errors import SceneError

NAME = "neus"
FILE = "cameras_sphere.npz"
IMAGE_FOLDERS = ("image", "images")
MAX_RELATIVE_SKEW = 1e-3


def detect(root: Path) -> bool:
    return (root / FILE).is_file()


def load(root: Path, with_images: bool = True, **_) -> Scene:
    path = root / FILE
    archive = read_numpy(path)
    if isinstance(archive, np.ndarray):
        raise SceneError(path, "expected an .npz archive of world_mat_i and scale_mat_i arrays, got one array")
    paths = list_images(_image_folder(root))
    images, sizes = load_images(paths, with_images)
    check_one_size(paths, sizes)
    cameras = _cameras(archive, path, sizes)
    scale_mat = _scale_mat(archive, path, len(paths))
    radius = scale_mat[0, 0]
    bbox = np.stack([scale_mat[:3, 3] - radius, scale_mat[:3, 3] + radius])
    near, far = near_far_from_box(cameras.centers, bbox)
    mask_paths = _mask_paths(root, len(paths))
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
        masks=None if mask_paths is None else load_masks(mask_paths, sizes, with_images),
        extras={"scale_mat": scale_mat, "mask_paths": mask_paths},
    )


def _image_folder(root: Path) -> Path:
    for name in IMAGE_FOLDERS:
        if (root / name).is_dir():
            return root / name
    raise SceneError(root / IMAGE_FOLDERS[0], f"folder not found (NeuS images live in {' or '.join(IMAGE_FOLDERS)}/)")


def _matrix(archive: dict, key: str, path: Path) -> np.ndarray:
    """archive[key] as a finite float64 (4, 4) matrix, or SceneError naming the key."""
    if key not in archive:
        raise SceneError(path, f"missing array '{key}' (one world_mat_i and scale_mat_i per image)")
    m = archive[key]
    if m.dtype.kind not in "fiu":
        raise SceneError(path, f"'{key}' holds {m.dtype} values, expected numbers")
    m = m.astype(np.float64)
    if m.shape != (4, 4):
        raise SceneError(path, f"'{key}' has shape {m.shape}, expected 4x4")
    if not np.all(np.isfinite(m)):
        raise SceneError(path, f"'{key}' contains NaN or inf")
    return m


def _cameras(archive: dict, path: Path, sizes: np.ndarray) -> Cameras:
    """Cameras of the (N, 2) images from world_mat_0 .. world_mat_{N-1}."""
    intrinsics, c2w = [], []
    for i in range(len(sizes)):
        key = f"world_mat_{i}"
        k, pose = decompose_projection(_matrix(archive, key, path)[:3], path, key)
        intrinsics.append([k[0, 0], k[1, 1], k[0, 2], k[1, 2]])
        c2w.append(pose)
    return Cameras(np.stack(c2w), np.array(intrinsics), sizes, np.zeros((len(sizes), 4)))


def decompose_projection(p: np.ndarray, path: Path, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Split a projection matrix P = K [R | t] into intrinsics and pose, by an RQ decomposition in numpy.

    Args:
        p: (3, 4) projection matrix (any nonzero scale).
        path, key: where it came from, for errors.
    Returns:
        K (3, 3) upper triangular with K[2, 2] = 1 and positive focal lengths, and c2w (3, 4) (OpenCV).
    """
    m = p[:, :3]
    if not np.abs(m).max() or abs(np.linalg.det(m)) < 1e-12 * np.abs(m).max() ** 3:
        raise SceneError(path, f"'{key}' is a degenerate projection (its 3x3 part is singular)")
    flip = np.eye(3)[::-1]
    q, u = np.linalg.qr((flip @ m).T)
    k, r = flip @ u.T @ flip, flip @ q.T
    signs = np.diag(np.sign(np.diag(k)))
    k, r = k @ signs, signs @ r
    if np.linalg.det(r) < 0:
        r = -r  # P and -P are the same camera; pick the sign that makes R a rotation
    k = k / k[2, 2]
    if abs(k[0, 1]) > MAX_RELATIVE_SKEW * k[0, 0]:
        raise SceneError(path, f"'{key}' has pixel skew {k[0, 1]:g}, which pinhole cameras here cannot hold")
    center = -np.linalg.solve(m, p[:, 3])
    return k, np.concatenate([r.T, center[:, None]], 1)


def _scale_mat(archive: dict, path: Path, n: int) -> np.ndarray:
    """The (4, 4) scale_mat shared by all images; it must be a uniform scale plus a translation."""
    first = _matrix(archive, "scale_mat_0", path)
    radius = first[0, 0]
    similarity = np.eye(4) * radius
    similarity[:, 3] = first[:, 3]
    if radius <= 0 or not np.allclose(first, similarity, rtol=0, atol=1e-9 * radius) or first[3, 3] != 1:
        raise SceneError(path, "'scale_mat_0' is not a uniform scale plus a translation")
    for i in range(1, n):
        if not np.allclose(_matrix(archive, f"scale_mat_{i}", path), first, rtol=1e-9, atol=0):
            raise SceneError(path, f"'scale_mat_{i}' differs from 'scale_mat_0' (one normalization is expected)")
    return first


def _mask_paths(root: Path, n: int) -> list[Path] | None:
    """The n mask files in `mask/` (name order, matching the images), or None without that folder."""
    if not (root / "mask").is_dir():
        return None
    paths = list_images(root / "mask")
    if len(paths) != n:
        raise SceneError(root / "mask", f"holds {len(paths)} masks for {n} images")
    return paths


def write(scene: Scene, out: Path) -> None:
    """cameras_sphere.npz, image/*.png and mask/*.png.

    scale_mat maps the unit sphere onto the sphere through the corners of the scene's box, so that NeuS sees the
    whole box; loaded back, the box is the cube around that sphere (sqrt(3) times wider than a cubic box).
    """
    cams = scene.cameras
    require_holds(not np.any(cams.distortion), NAME, "lens distortion")
    require_holds(len({tuple(s) for s in cams.sizes}) == 1, NAME, "images of different sizes")
    scale_mat = np.eye(4) * 0.5 * np.linalg.norm(scene.bbox[1] - scene.bbox[0])
    scale_mat[:, 3] = [*scene.center, 1.0]
    arrays = {}
    for i in range(len(cams)):
        fx, fy, cx, cy = cams.intrinsics[i]
        k = np.array([[fx, 0, cx, 0], [0, fy, cy, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
        arrays[f"world_mat_{i}"] = k @ world_to_camera(cams.c2w[i])
        arrays[f"scale_mat_{i}"] = scale_mat
    np.savez(out / FILE, **arrays)
    names = [f"{i:03d}.png" for i in range(len(cams))]
    write_images(scene.images, out, "image", names)
    if scene.masks is not None:
        write_images([mask_image(m) for m in scene.masks], out, "mask", names)
