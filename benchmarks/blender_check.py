"""What Blender's own importers make of voxnerf's OBJ and GLB files, and a render of the textured ones (issue 40).

Runs in a Python that has Blender as a module (`bpy`, not a voxnerf dependency: hundreds of MB), e.g.

    python3.11 -m venv /tmp/bpy && /tmp/bpy/bin/pip install bpy
    voxnerf export runs/lego --mesh lego.glb --target-faces 20000
    voxnerf export runs/lego --mesh lego.obj --target-faces 20000
    voxnerf export runs/lego --mesh lego_colors.glb --target-faces 20000 --vertex-colors
    /tmp/bpy/bin/python benchmarks/blender_check.py lego.glb lego.obj lego_colors.glb \\
        --camera ../shared/data/nerf_synthetic/lego_100/transforms_test.json --png docs/export_lego_blender.png

For each file it prints the meshes Blender built: vertices, faces, UV layers, color attributes and the sizes of
the images their materials use. With --camera (a NeRF-Synthetic transforms file, whose camera matrices are
Blender's own) it renders every textured file from the first camera with Cycles on the CPU, showing the texture as
it is (emission, no relighting), beside that view's photo: a file turned the wrong way or with a broken texture
shows at a glance.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix

SIZE = 400  # rendered pixels a side


def import_file(path: Path) -> None:
    """Empty the scene and import `path` with Blender's importer for its format."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    if path.suffix.lower() == ".obj":
        bpy.ops.wm.obj_import(filepath=str(path))
    else:
        bpy.ops.import_scene.gltf(filepath=str(path))


def meshes() -> list[dict]:
    """What the scene's meshes hold: vertex and face counts, UV layers, color attributes, image sizes."""
    found = []
    for ob in bpy.context.scene.objects:
        if ob.type == "MESH":
            me = ob.data
            images = [list(n.image.size) for m in me.materials if m and m.use_nodes for n in m.node_tree.nodes
                      if n.type == "TEX_IMAGE" and n.image]
            found.append({"vertices": len(me.vertices), "faces": len(me.polygons), "uv_layers": len(me.uv_layers),
                          "color_attributes": len(me.color_attributes), "images": images})
    return found


def render(frame: dict, fov: float, out: Path) -> np.ndarray:
    """Render the scene from a NeRF-Synthetic camera `frame` (horizontal field of view `fov`) on white, each
    material's image shown as emission; (SIZE, SIZE, 3) uint8."""
    scene = bpy.context.scene
    camera = bpy.data.objects.new("camera", bpy.data.cameras.new("camera"))
    camera.data.angle = fov
    camera.matrix_world = Matrix(frame["transform_matrix"])
    scene.collection.objects.link(camera)
    scene.camera = camera
    scene.world = bpy.data.worlds.new("white")
    scene.world.use_nodes = True
    scene.world.node_tree.nodes["Background"].inputs[0].default_value = (1, 1, 1, 1)
    for ob in scene.objects:
        for material in ob.data.materials if ob.type == "MESH" else []:
            nodes, links = material.node_tree.nodes, material.node_tree.links
            emit = nodes.new("ShaderNodeEmission")
            links.new(next(n for n in nodes if n.type == "TEX_IMAGE").outputs["Color"], emit.inputs["Color"])
            links.new(emit.outputs["Emission"], nodes["Material Output"].inputs["Surface"])
    scene.render.engine, scene.cycles.device, scene.cycles.samples = "CYCLES", "CPU", 16
    scene.view_settings.view_transform = "Standard"
    scene.render.resolution_x = scene.render.resolution_y = SIZE
    scene.render.filepath = str(out)
    bpy.ops.render.render(write_still=True)
    image = bpy.data.images.load(str(out))
    pixels = np.array(image.pixels[:]).reshape(SIZE, SIZE, 4)[::-1, :, :3]  # Blender's rows are bottom up
    return (pixels * 255).round().astype(np.uint8)


def photo(transforms: Path, frame: dict) -> np.ndarray:
    """The frame's photo on white, scaled to SIZE pixels (nearest), (SIZE, SIZE, 3) uint8."""
    image = bpy.data.images.load(str((transforms.parent / frame["file_path"]).with_suffix(".png")))
    w, h = image.size
    rgba = np.array(image.pixels[:]).reshape(h, w, 4)[::-1]
    rgb = rgba[..., :3] * rgba[..., 3:] + 1 - rgba[..., 3:]
    rows, cols = (np.arange(SIZE) * h // SIZE), (np.arange(SIZE) * w // SIZE)
    return (rgb[rows][:, cols] * 255).round().astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+", help=".obj and .glb files written by voxnerf export")
    parser.add_argument("--camera", type=Path, help="a NeRF-Synthetic transforms_*.json: render from its first camera")
    parser.add_argument("--png", type=Path, help="where to write the photo and the renders side by side")
    args = parser.parse_args()
    transforms = json.loads(args.camera.read_text()) if args.camera else None
    panels, report = [], {}
    for path in args.files:
        import_file(path)
        report[str(path)] = meshes()
        if transforms and any(m["images"] for m in report[str(path)]):
            if not panels:
                panels.append(photo(args.camera, transforms["frames"][0]))
            panels.append(render(transforms["frames"][0], transforms["camera_angle_x"],
                                 args.png.with_name(f"{args.png.stem}_{path.stem}{path.suffix[1:]}.png")))
    print(json.dumps(report, indent=2))
    if panels and args.png:
        out = bpy.data.images.new("panels", SIZE * len(panels), SIZE)
        row = np.concatenate(panels, 1)[::-1].astype(np.float32) / 255
        out.pixels = np.concatenate([row, np.ones(row.shape[:2] + (1,), np.float32)], -1).ravel()
        out.filepath_raw, out.file_format = str(args.png), "PNG"
        out.save()


if __name__ == "__main__":
    main()
