"""Toy voxel scenes with exact ground truth: geometry, density, color, occupancy, surface samples, renders.

    import voxnerf.scenes as toy_scenes
    scene = toy_scenes.get("sphere")                                   # a ToyScene
    scene.sdf(x), scene.density(x), scene.color(x), scene.normal(x)   # x (N, 3) -> (N,) / (N, 3)
    scene.occupancy(64)                                                # (64, 64, 64) bool over [-1, 1]^3
    points, normals = scene.sample_surface(10000, seed=0)
    toy_scenes.render_rays(scene.field, origins, dirs, near, far)      # reference volume renderer
    toy_scenes.make_scene("sphere", "out/sphere")                      # a Blender-format folder
    toy_scenes.make_capture("unbounded", "out/u", "colmap")            # a toy real capture, opaque images
    scene, depths = toy_scenes.capture_scene("forward", n_views=8, width=32)   # the same, in memory
"""

from voxnerf.scenes.captures import CAPTURES, Capture, get_capture
from voxnerf.scenes.catalog import SCENES, get
from voxnerf.scenes.make import CAMERA_ANGLE_X, CAMERA_DISTANCE, SAMPLES_PER_RAY, make_scene, orbit_cameras, render_view
from voxnerf.scenes.make_capture import capture_scene, make_capture
from voxnerf.scenes.reference import Rendered, composite_weights, render_rays
from voxnerf.scenes.toy import DENSITY_EPS, DENSITY_SCALE, SCENE_RADIUS, ToyScene

__all__ = [
    "CAPTURES",
    "CAMERA_ANGLE_X",
    "CAMERA_DISTANCE",
    "DENSITY_EPS",
    "DENSITY_SCALE",
    "SAMPLES_PER_RAY",
    "SCENES",
    "SCENE_RADIUS",
    "Capture",
    "Rendered",
    "ToyScene",
    "capture_scene",
    "composite_weights",
    "get",
    "get_capture",
    "make_capture",
    "make_scene",
    "orbit_cameras",
    "render_rays",
    "render_view",
]
