"""What kind of capture a scene is, from its images and cameras: "object", "forward" or "unbounded".

`detect_layout(scene)` applies these rules in order:

1. "object" when the images have alpha (`scene.background` is set) or the scene has foreground masks: the
   capture says itself what is object and what is not.
2. "forward" when the cameras face one way: every camera's forward axis is within FORWARD_MAX_ANGLE of their
   mean, and the cameras' spread (largest distance of a center from the centers' mean) is at most
   FORWARD_MAX_SPREAD times the scene's depth (`convergence_depth`: how far ahead the optical axes meet, or
   infinite when they are near parallel or fan out).
3. "object" when the format is one made for object captures (blender, neus) and the cameras look around a
   common point.
4. "unbounded" otherwise: cameras all around (or looking in many directions) and opaque images, so the scene
   goes on behind the subject, as in COLMAP 360° captures.
"""

from __future__ import annotations

import numpy as np

from voxnerf.data.cameras import Cameras
from voxnerf.data.scene import Scene

LAYOUTS = ("object", "forward", "unbounded")
OBJECT_FORMATS = ("blender", "neus")
FORWARD_MAX_ANGLE = 35.0  # degrees between a forward-facing camera's axis and the cameras' mean axis
FORWARD_MAX_SPREAD = 0.35  # spread of forward-facing camera centers, as a fraction of the scene's depth
PARALLEL_SINE = np.sin(np.radians(1.0))  # optical axes closer than this to parallel meet nowhere in particular


def detect_layout(scene: Scene) -> str:
    """The layout of `scene` by the rules in the module docstring: "object", "forward" or "unbounded"."""
    if scene.background is not None or scene.masks is not None or scene.extras.get("mask_paths"):
        return "object"
    if is_forward_facing(scene.cameras):
        return "forward"
    if scene.format in OBJECT_FORMATS:
        return "object"
    return "unbounded"


def is_forward_facing(cameras: Cameras) -> bool:
    """Whether all forward axes are within FORWARD_MAX_ANGLE of their mean and the centers' spread is at most
    FORWARD_MAX_SPREAD times `convergence_depth`."""
    if axis_spread(cameras) > FORWARD_MAX_ANGLE:
        return False
    return center_spread(cameras) <= FORWARD_MAX_SPREAD * convergence_depth(cameras)


def axis_spread(cameras: Cameras) -> float:
    """Largest angle in degrees between a camera's forward axis and the mean forward axis (180 if they cancel)."""
    mean = cameras.forward.mean(0)
    if np.linalg.norm(mean) < 1e-9:
        return 180.0
    cosines = cameras.forward @ (mean / np.linalg.norm(mean))
    return float(np.degrees(np.arccos(np.clip(cosines, -1.0, 1.0))).max())


def center_spread(cameras: Cameras) -> float:
    """Largest distance of a camera center from the mean center, world units."""
    return float(np.linalg.norm(cameras.centers - cameras.centers.mean(0), axis=-1).max())


def convergence_depth(cameras: Cameras) -> float:
    """Median distance along the cameras' forward axes to the point closest (least squares) to all optical axes.

    Infinite when the axes are near parallel (their RMS angle to the mean axis under about one degree: the
    point is ill-determined) or when that point lies behind most cameras (axes that fan out).
    """
    dirs = cameras.forward
    proj = np.eye(3)[None] - dirs[:, :, None] * dirs[:, None, :]
    normal = proj.mean(0)
    if np.linalg.eigvalsh(normal)[0] < PARALLEL_SINE**2:
        return float("inf")
    point = np.linalg.solve(normal, np.einsum("nij,nj->i", proj, cameras.centers) / len(cameras))
    depth = float(np.median(np.einsum("ni,ni->n", point - cameras.centers, dirs)))
    return depth if depth > 0 else float("inf")


def top_down_axes(cameras: Cameras) -> np.ndarray:
    """(2, 3) orthonormal axes a, b of the plane perpendicular to the cameras' `up`, with (a, b, up) right-handed:
    coordinates (x @ a, x @ b) view the scene from above, not mirrored. a is world x made perpendicular to up
    (world y when x is within about 25 degrees of up), so a z-up scene is drawn with x right and y up."""
    up = cameras.up
    helper = np.eye(3)[0] if abs(up[0]) < 0.9 else np.eye(3)[1]
    a = helper - (helper @ up) * up
    a /= np.linalg.norm(a)
    return np.stack([a, np.cross(up, a)])
