"""Toy "real captures": toy objects in front of an opaque analytic background, photographed the way people do.

- `unbounded`: a 360° capture. Objects inside the ball of radius 0.6 at the origin, a tiled shell of radius 15
  around everything, cameras on a ring around the objects looking at the origin.
- `textured`: `unbounded`'s objects and shell speckled (texture enough for structure from motion, `voxnerf
  process`), cameras closer.
- `forward`: a forward-facing (LLFF-like) capture. Three objects at different depths in front of a tiled wall,
  cameras on a small hand-held grid all looking the same way (at the origin, with a little jitter).

World +z is up. Objects stay inside the ball of radius `toy.SCENE_RADIUS` (where `make.render_object` samples)
and the background lies beyond it from every camera, so a ray meets the objects first and then the background.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from voxnerf.data.cameras import Cameras, focal_from_fov
from voxnerf.errors import VoxnerfError
from voxnerf.scenes.backgrounds import Background, Shell, Wall
from voxnerf.scenes.colors import Constant, FaceColors, Radial, RingHue, Speckled
from voxnerf.scenes.make import look_at
from voxnerf.scenes.shapes import Box, Sphere
from voxnerf.scenes.toy import Part, ToyScene

ASPECT = 0.75  # image height / width, as a landscape photo


@dataclass(frozen=True)
class Ring:
    """Cameras around the origin at `distance`, azimuths evenly spaced from a random start, elevations drawn
    uniformly in `elevations` (degrees), each looking at the origin."""

    distance: float
    elevations: tuple[float, float]

    def c2w(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, 3, 4) OpenCV camera-to-world matrices."""
        azimuth = rng.uniform(0, 2 * math.pi) + 2 * math.pi * np.arange(n) / n
        elevation = np.radians(rng.uniform(*self.elevations, size=n))
        unit = np.stack([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)], -1)
        return np.stack([look_at(self.distance * u) for u in unit])


@dataclass(frozen=True)
class Grid:
    """A hand-held forward-facing capture: centers on a near-square grid spanning `extent` (x, z) around `center`,
    moved by up to `jitter` along each axis, each looking at the origin moved by up to `aim_jitter`."""

    center: tuple[float, float, float]
    extent: tuple[float, float]
    jitter: float
    aim_jitter: float

    def c2w(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, 3, 4) OpenCV camera-to-world matrices, in row-major grid order."""
        cols = math.ceil(math.sqrt(n * self.extent[0] / self.extent[1]))
        rows = math.ceil(n / cols)
        x = _spread(cols)[np.arange(n) % cols] * self.extent[0]
        z = -_spread(rows)[np.arange(n) // cols] * self.extent[1]
        offsets = np.stack([x, np.zeros(n), z], -1) + rng.uniform(-self.jitter, self.jitter, (n, 3))
        aims = rng.uniform(-self.aim_jitter, self.aim_jitter, (n, 3))
        return np.stack([look_at(np.asarray(self.center) + o, a) for o, a in zip(offsets, aims)])


Rig = Ring | Grid


def _spread(k: int) -> np.ndarray:
    """(k,) evenly spaced positions over [-0.5, 0.5] ([0] for k = 1)."""
    return np.linspace(-0.5, 0.5, k) if k > 1 else np.zeros(1)


@dataclass(frozen=True)
class Capture:
    """A toy real capture: what is photographed and how.

    Attributes:
        name: the catalog name (`voxnerf scene make NAME`).
        description: one line for `voxnerf scene list`.
        layout: the camera layout it stands for, as `voxnerf.data.layout.detect_layout` names it.
        objects: the toy objects near the origin.
        background: the opaque surface behind them.
        rig: where the cameras are.
        camera_angle_x: horizontal field of view of every camera, radians.
    """

    name: str
    description: str
    layout: str
    objects: ToyScene
    background: Background
    rig: Rig
    camera_angle_x: float

    def cameras(self, n: int, width: int, seed: int) -> Cameras:
        """n pinhole cameras of width x round(ASPECT * width) pixels, placed by the rig from `seed`."""
        height = round(ASPECT * width)
        focal = focal_from_fov(self.camera_angle_x, width)
        c2w = self.rig.c2w(n, np.random.default_rng(seed))
        return Cameras(c2w, np.tile([focal, focal, width / 2, height / 2], (n, 1)), np.tile([width, height], (n, 1)), np.zeros((n, 4)))

    def parameters(self) -> dict:
        """Everything that defines the capture, as plain values (for groundtruth.json)."""
        return {
            "scene": self.name,
            "description": self.description,
            "layout": self.layout,
            "objects": self.objects.parameters(),
            "background": {"kind": type(self.background).__name__, **asdict(self.background)},
            "rig": {"kind": type(self.rig).__name__, **asdict(self.rig)},
            "camera_angle_x": self.camera_angle_x,
        }


_BALL = Sphere(center=(0.0, 0.0, 0.26), radius=0.26)
_TABLE = Box(center=(0.0, 0.0, -0.2), half_size=(0.3, 0.3, 0.18))
_CRATE = Box(center=(0.38, 0.3, -0.05), half_size=(0.2, 0.2, 0.28))

_UNBOUNDED = Capture(
    "unbounded",
    "360° capture: ball on a box at the origin inside a tiled shell of radius 15, cameras on a ring at 2.6",
    "unbounded",
    ToyScene(
        "unbounded",
        "ball (r 0.26) resting above a box (0.6 x 0.6 x 0.36), colored by direction and by face",
        (
            Part(_BALL, Radial(center=(0.0, 0.0, 0.26))),
            Part(_TABLE, FaceColors(_TABLE)),
        ),
    ),
    Shell(radius=15.0),
    Ring(distance=2.6, elevations=(5.0, 35.0)),
    1.2,
)

CAPTURES: dict[str, Capture] = {
    capture.name: capture
    for capture in (
        _UNBOUNDED,
        Capture(
            "textured",
            "the unbounded objects speckled, in a speckled shell of radius 4, cameras on a ring at 1.8 (for structure from motion)",
            "unbounded",
            ToyScene(
                "textured",
                "ball (r 0.26) above a box (0.6 x 0.6 x 0.36), speckled in cubes of 0.04",
                (
                    Part(_BALL, Speckled(Radial(center=(0.0, 0.0, 0.26)), 0.04)),
                    Part(_TABLE, Speckled(FaceColors(_TABLE), 0.04)),
                ),
            ),
            Shell(radius=4.0, speckles=6),
            Ring(distance=1.8, elevations=(10.0, 40.0)),
            1.2,
        ),
        Capture(
            "forward",
            "forward-facing capture: ball, crate and small ball 2.4-3.5 from the cameras before a tiled wall at 6, hand-held grid",
            "forward",
            ToyScene(
                "forward",
                "orange ball (near, left), face-colored crate (far, right), rainbow ball (middle, top)",
                (
                    Part(Sphere(center=(-0.4, -0.35, -0.1), radius=0.28), Constant((0.95, 0.55, 0.1))),
                    Part(_CRATE, FaceColors(_CRATE)),
                    Part(Sphere(center=(0.1, -0.1, 0.5), radius=0.18), RingHue(center=(0.1, -0.1, 0.5))),
                ),
            ),
            Wall(point=(0.0, 3.0, 0.0), normal=(0.0, 1.0, 0.0), tile=0.6),
            Grid(center=(0.0, -3.0, 0.0), extent=(1.0, 0.6), jitter=0.03, aim_jitter=0.1),
            1.0,
        ),
    )
}


def get_capture(name: str) -> Capture:
    """The capture called `name`, or VoxnerfError listing the known names."""
    if name not in CAPTURES:
        raise VoxnerfError(f"unknown toy capture '{name}' (known: {', '.join(CAPTURES)})")
    return CAPTURES[name]
