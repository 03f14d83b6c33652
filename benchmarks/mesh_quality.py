"""A run's density meshes and their numbers (issues 25, 40): meshes at the fixed and the automatic iso value, colored
from the photos (the default export) and, as before issue 25, by the field seen head-on (unsmoothed, on the grid's
vertices), scored against the scene's test views; a before/after picture of the two; a light mesh (decimated to
--light faces) with vertex colors and with a texture.

    voxnerf train ../shared/data/nerf_synthetic/lego_100 --max-time 300 --out runs/lego
    python benchmarks/mesh_quality.py runs/lego --png docs/export_lego.png
    voxnerf train ../shared/data/captures/ethiopianHead_8 --max-time 300 --out runs/head
    python benchmarks/mesh_quality.py runs/head --png docs/export_head.png

The scores need the ground truth's silhouettes: images with alpha (NeRF-Synthetic) or foreground masks (a masked
capture such as ethiopianHead_8).

For each mesh it prints the vertex and face counts, its topology (connected components, boundary and non-manifold
edges, open3d's manifold tests), its roughness (mean angle between the normals of adjacent faces: facets and
speckle raise it), the export time, and two scores on the test views: the IoU of the
mesh's silhouette (open3d ray casting) with the ground-truth alpha (or mask) > 0.5, and the PSNR of the mesh's interpolated
vertex colors against the ground-truth colors where both cover a pixel. For the run itself ("surface") it prints how
thick its rendered surface is: the median and 90th percentile over the test views' object pixels of the depth spread
of each ray's compositing weights, in cells (a haze several cells deep blurs renders and crumples meshes). The PNG
shows the automatic-iso-value mesh from near the first test camera, rendered by `voxnerf.view.occupancy.screenshot`: left the head-on, unsmoothed
mesh (before issue 25), right the default export; `--smoothing N` and `--samples N` variants are drawn beside it as
PNG_smoothingN.png and PNG_samplesN.png. The light mesh is exported twice, with vertex colors ("light_vertex") and
as a GLB with a texture ("light_texture"), and PNG_texture.png shows the first test view: the photo, the default
export's vertex colors, the light mesh's vertex colors and its texture (ray cast, nearest-neighbour upscaled).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import open3d as o3d
import torch
from weight_spread import weight_spread

from voxnerf.data.rays import image_rays
from voxnerf.data.scene import Scene
from voxnerf.export import export_mesh
from voxnerf.export.box import crop_box
from voxnerf.export.depth import spread_views
from voxnerf.export.atlas import faces_for_texture
from voxnerf.export.iso import DEFAULT_ISO, auto_iso
from voxnerf.export.mesh import default_samples
from voxnerf.export.texture import TEXTURE_SIZE, mesh_colors
from voxnerf.run.load import Run, load_run
from voxnerf.view.occupancy import screenshot, viewpoint

VIEWS = 25  # test views scored (evenly spread; all when there are fewer)


def topology(mesh: o3d.geometry.TriangleMesh) -> dict:
    """Counts of vertices, faces, components, boundary edges (one face) and non-manifold edges (3+ faces), and
    open3d's manifold tests (not `is_watertight`: its self-intersection test is quadratic, minutes on 500k faces)."""
    edges = np.sort(np.asarray(mesh.triangles)[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, faces_per_edge = np.unique(edges, axis=0, return_counts=True)
    return {"vertices": len(mesh.vertices), "faces": len(mesh.triangles),
            "components": len(mesh.cluster_connected_triangles()[1]),
            "boundary_edges": int((faces_per_edge == 1).sum()), "nonmanifold_edges": int((faces_per_edge > 2).sum()),
            "edge_manifold": bool(mesh.is_edge_manifold()), "vertex_manifold": bool(mesh.is_vertex_manifold())}


def roughness(mesh: o3d.geometry.TriangleMesh) -> float:
    """Mean angle in degrees between the normals of the two faces of each edge shared by exactly two faces."""
    triangles = np.asarray(mesh.triangles)
    mesh.compute_triangle_normals()
    normals = np.asarray(mesh.triangle_normals)
    edges = np.sort(triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    _, inverse, counts = np.unique(edges, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = counts[inverse] == 2
    order = np.argsort(inverse[shared], kind="stable")
    faces = (np.flatnonzero(shared) // 3)[order].reshape(-1, 2)
    cosine = np.clip((normals[faces[:, 0]] * normals[faces[:, 1]]).sum(1), -1, 1)
    return round(float(np.degrees(np.arccos(cosine)).mean()), 2)


def view_scores(mesh: o3d.geometry.TriangleMesh, scene: Scene) -> dict:
    """Silhouette IoU and color PSNR (vertex colors or texture, `mesh_colors`) of the mesh against up to VIEWS test
    views of the scene."""
    caster = o3d.t.geometry.RaycastingScene()
    caster.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    inter = union = 0
    errors = []
    test = scene.split_indices("test")
    for i in test[spread_views(len(test), VIEWS)]:
        origins, dirs = (t.numpy() for t in image_rays(scene.cameras, i))
        hits = caster.cast_rays(o3d.core.Tensor(np.concatenate([origins, dirs], 1).astype(np.float32)))
        image = scene.rgba(i).reshape(-1, 4).astype(np.float64) / 255
        hit, truth = np.isfinite(hits["t_hit"].numpy()), image[:, 3] > 0.5
        inter, union = inter + (hit & truth).sum(), union + (hit | truth).sum()
        both = hit & truth
        color = mesh_colors(mesh, hits["primitive_ids"].numpy()[both], hits["primitive_uvs"].numpy()[both])
        errors.append((color - image[both, :3]) ** 2)
    return {"silhouette_iou": round(float(inter / union), 4),
            "color_psnr": round(float(-10 * np.log10(np.concatenate(errors).mean())), 2)}


def color_view(mesh: o3d.geometry.TriangleMesh, scene: Scene, i: int) -> np.ndarray:
    """(H, W, 3) float64 image of the mesh's colors (`mesh_colors`) seen by camera i, white where it is missed."""
    caster = o3d.t.geometry.RaycastingScene()
    caster.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    origins, dirs = (t.numpy() for t in image_rays(scene.cameras, i))
    hits = caster.cast_rays(o3d.core.Tensor(np.concatenate([origins, dirs], 1).astype(np.float32)))
    hit = np.isfinite(hits["t_hit"].numpy())
    image = np.ones((len(hit), 3))
    image[hit] = mesh_colors(mesh, hits["primitive_ids"].numpy()[hit], hits["primitive_uvs"].numpy()[hit])
    w, h = scene.cameras.sizes[i]
    return image.reshape(h, w, 3)


def write_color_views(scene: Scene, meshes: list, out: Path, width: int = 400) -> None:
    """A PNG of the first test view: the photo on white, then each mesh's colors (`color_view`), each scaled to
    about `width` pixels wide (nearest neighbour)."""
    i = scene.split_indices("test")[0]
    rgba = scene.rgba(i).astype(np.float64) / 255
    photo = rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:]) if rgba.shape[-1] == 4 else rgba
    panels = [photo] + [color_view(m, scene, i) for m in meshes]
    scale = max(1, round(width / photo.shape[1]))
    row = np.concatenate([np.kron(p, np.ones((scale, scale, 1))) for p in panels], axis=1)
    iio.imwrite(out, (np.clip(row, 0, 1) * 255).round().astype(np.uint8))


def ray_spread(run: Run, scene: Scene, every: int = 4) -> dict:
    """Median and 90th percentile, over every `every`-th object pixel (alpha > 0.5) of up to VIEWS test views, of
    the depth spread of each ray's compositing weights in cells (`weight_spread`): how thick the rendered surface is."""
    spreads = []
    test = scene.split_indices("test")
    for i in test[spread_views(len(test), VIEWS)]:
        origins, dirs = image_rays(scene.cameras, i)
        pick = torch.from_numpy(np.flatnonzero(scene.rgba(i)[..., 3].reshape(-1) > 127)[::every])
        unit = torch.as_tensor(run.to_unit(origins[pick].numpy()), dtype=torch.float32, device=run.device)
        spreads.append(weight_spread(run.model, unit, dirs[pick].to(run.device), run.config.render).cpu().numpy())
    values = np.concatenate(spreads)
    return {"ray_spread_median": round(float(np.median(values)), 2),
            "ray_spread_p90": round(float(np.percentile(values, 90)), 2)}


def measure(run: Run, scene: Scene, iso: float, out: Path, **options) -> tuple[o3d.geometry.TriangleMesh, dict]:
    """Export the density mesh at `iso` to `out` (`options`: more `export_mesh` arguments), time it, and score it."""
    start = time.perf_counter()
    mesh = export_mesh(run, out, iso=iso, **options)
    seconds = time.perf_counter() - start
    shape = {} if mesh.has_textures() else {**topology(mesh), "roughness_deg": roughness(mesh)}  # atlas: split faces
    return mesh, {"iso": round(iso, 4), **options, "export_s": round(seconds, 2), "faces": len(mesh.triangles),
                  **shape, **view_scores(mesh, scene)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run whose scene has alpha or masks (lego_100, ethiopianHead_8)")
    parser.add_argument("--png", type=Path, required=True, help="the before/after picture to write")
    parser.add_argument("--mesh", type=Path, default=None, help="where to write the automatic-iso-value mesh "
                                                               "(default: RUN/mesh_auto.ply)")
    parser.add_argument("--samples", type=int, nargs="*", default=[],
                        help="also score (and draw, beside --png) marching cubes on this many samples per axis (the "
                             "trilinear density sampled finer than the grid)")
    parser.add_argument("--smoothing", type=int, nargs="*", default=[],
                        help="also score (and draw, beside --png) these steps of neighbour averaging")
    parser.add_argument("--light", type=int, default=faces_for_texture(TEXTURE_SIZE),
                        help="faces of the light mesh, scored with vertex colors and with a texture (default: the "
                             "most the default texture size holds)")
    args = parser.parse_args()
    run = load_run(args.run)
    scene = run.scene()
    if not scene.has_alpha:
        parser.error(f"{args.run}: its scene has neither alpha nor masks: no silhouettes to score against")
    start = time.perf_counter()
    chosen = auto_iso(run, crop_box(run))
    iso_s = time.perf_counter() - start
    _, fixed = measure(run, scene, DEFAULT_ISO, args.run / "mesh_fixed.ply")
    grid = run.model.estimator.resolution
    before, head_on = measure(run, scene, chosen.iso, args.run / "mesh_head_on.ply", colors="field", smoothing=0,
                              samples=grid)
    options = [{"smoothing": t} for t in args.smoothing] + [{"samples": n} for n in args.samples]
    variants = [measure(run, scene, chosen.iso, args.run / "mesh_variant.ply", **o) for o in options]
    mesh, auto = measure(run, scene, chosen.iso, args.mesh or args.run / "mesh_auto.ply")
    auto |= {"iso_s": round(iso_s, 2), "iso_iou": round(chosen.iou, 4), "iso_rays": chosen.rays}
    auto["samples"] = default_samples(grid)
    light, light_vertex = measure(run, scene, chosen.iso, args.run / "mesh_light.ply", target_faces=args.light)
    textured_mesh, textured = measure(run, scene, chosen.iso, args.run / "mesh_light.glb", target_faces=args.light,
                                      texture=True)
    textured["texture"] = list(np.asarray(textured_mesh.textures[0]).shape[:2])
    write_color_views(scene, [mesh, light, textured_mesh], args.png.with_name(f"{args.png.stem}_texture.png"))
    test = scene.cameras.subset(scene.split_indices("test")[:1])
    view = viewpoint(run, test)
    pictures = [screenshot([m], args.png, view, width=640, height=600, zoom=0.7) for m in (before, mesh)]
    iio.imwrite(args.png, np.concatenate(pictures, axis=1))
    for option, (variant, _) in zip(options, variants):
        name = "".join(f"{k}{v}" for k, v in option.items())
        screenshot([variant], args.png.with_name(f"{args.png.stem}_{name}.png"), view, width=640, height=600,
                   zoom=0.7)
    print(json.dumps({"fixed": fixed, "head_on": head_on, "variants": [v for _, v in variants], "auto": auto,
                      "light_vertex": light_vertex, "light_texture": textured,
                      "surface": ray_spread(run, scene), "png": str(args.png)}, indent=2))


if __name__ == "__main__":
    main()
