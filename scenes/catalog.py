"""The named toy scenes. Each lies inside the ball of radius `toy.SCENE_RADIUS` around the origin, so every
camera of `voxnerf.scenes.make` sees it whole. No size is a dyadic fraction (0.5, 0.25, ...), so no face or tangent
plane lies on a cell boundary of a power-of-two grid over [-1, 1]^3: ground-truth occupancy has no ties."""

from __future__ import annotations

from voxnerf.errors import VoxnerfError
from voxnerf.scenes.colors import Constant, FaceColors, Radial, RingHue
from voxnerf.scenes.shapes import Box, Sphere, Torus
from voxnerf.scenes.toy import Part, ToyScene

_BOX = Box(center=(0.0, 0.0, 0.0), half_size=(0.55, 0.4, 0.3))
_PAIR_BOX = Box(center=(0.45, 0.0, 0.0), half_size=(0.24, 0.24, 0.24))

SCENES: dict[str, ToyScene] = {
    scene.name: scene
    for scene in (
        ToyScene(
            "sphere",
            "ball of radius 0.6 at the origin, colored by direction",
            (Part(Sphere(center=(0.0, 0.0, 0.0), radius=0.6), Radial(center=(0.0, 0.0, 0.0))),),
        ),
        ToyScene(
            "box",
            "axis-aligned box 1.1 x 0.8 x 0.6 at the origin, one flat color per face",
            (Part(_BOX, FaceColors(_BOX)),),
        ),
        ToyScene(
            "torus",
            "thin ring about the z axis: radius 0.6, tube radius 0.08, rainbow hue around it",
            (Part(Torus(center=(0.0, 0.0, 0.0), major=0.6, minor=0.08), RingHue(center=(0.0, 0.0, 0.0))),),
        ),
        ToyScene(
            "two_objects",
            "orange ball (r 0.3 at x=-0.45) and blue cube (half 0.24 at x=0.45), empty space between",
            (
                Part(Sphere(center=(-0.45, 0.0, 0.0), radius=0.3), Constant((0.95, 0.55, 0.1))),
                Part(_PAIR_BOX, Constant((0.15, 0.3, 0.9))),
            ),
        ),
    )
}


def get(name: str) -> ToyScene:
    """The toy scene called `name`, or VoxnerfError listing the known names."""
    if name not in SCENES:
        raise VoxnerfError(f"unknown toy scene '{name}' (known: {', '.join(SCENES)})")
    return SCENES[name]
