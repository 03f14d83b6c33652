"""A run's meshes and their numbers: the dense vertex-colored mesh (.ply's default), the light mesh (.obj's and
.glb's default: 100,000 faces, a photo-baked texture over xatlas's charts) with vertex colors and with its texture,
and the light mesh as it was made before (the dense mesh decimated by open3d, no blur, no smoothing), scored
against the scene's test views; a picture of the first test view.

    voxnerf train ../shared/data/nerf_synthetic/lego --downscale 2 --max-time 300 --out runs/lego
    python benchmarks/mesh_quality.py runs/lego --png docs/export_lego_light.png
    voxnerf train ../shared/data/captures/ethiopianHead_8 --max-time 300 --out runs/head
    python benchmarks/mesh_quality.py runs/head --png docs/export_head_light.png

The scores need the ground truth's silhouettes: images with alpha (NeRF-Synthetic) or foreground masks (a masked
capture such as ethiopianHead_8).

For each mesh it prints the vertex and face counts, its topology (connected components, boundary and non-manifold
edges, open3d's manifold tests), its roughness (mean angle between the normals of adjacent faces: facets and
speckle raise it; for the textured mesh, that of the same light mesh with vertex colors, whose vertices are not
split at the charts' seams), the export time, the file's size, and two scores on the test views: the IoU of the
mesh's silhouette (open3d ray casting) with the ground-truth alpha (or mask) > 0.5, and the PSNR of the mesh's
colors (interpolated vertex colors, or the texture) against the ground-truth colors where both cover a pixel. For
the run itself ("surface") it prints how thick its rendered surface is: the median and 90th percentile over the
test views' object pixels of the depth spread of each ray's compositing weights, in cells. The PNG shows the first
test view: the photo, the dense mesh's vertex colors, the light textured mesh (ray cast, nearest-neighbour
upscaled) and the texture image itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import open3d as o3d
import torch
from weight_spread import weight_spread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_export import dihedral_degrees  # noqa: E402  (the one definition of a mesh's roughness)

from voxnerf.data.rays import image_rays
from voxnerf.data.scene import Scene
from voxnerf.export import export_mesh
from voxnerf.export.box import crop_box
from voxnerf.export.depth import spread_views
from voxnerf.export.iso import auto_iso
from voxnerf.export.light import LIGHT_FACES
from voxnerf.export.mesh import clean_mesh, drop_hidden, field_mesh
from voxnerf.export.photo import color_mesh
from voxnerf.export.texture import mesh_colors
from voxnerf.run.load import Run, load_run

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
    """Mean angle in degrees between the normals of the two faces of each edge shared by exactly two faces (the
    tests' own measure, `dihedral_degrees`), to 0.01 degree."""
    return round(dihedral_degrees(mesh), 2)


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
    """A PNG of the first test view: the photo on white, then each mesh's colors (`color_view`), then the last
    mesh's texture, each scaled to about `width` pixels wide (nearest neighbour; the texture resampled to the
    panels' height)."""
    i = scene.split_indices("test")[0]
    rgba = scene.rgba(i).astype(np.float64) / 255
    photo = rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:]) if rgba.shape[-1] == 4 else rgba
    panels = [photo] + [color_view(m, scene, i) for m in meshes]
    scale = max(1, round(width / photo.shape[1]))
    panels = [np.kron(p, np.ones((scale, scale, 1))) for p in panels]
    texture = np.asarray(meshes[-1].textures[0])[::-1].astype(np.float64) / 255  # open3d keeps rows bottom up
    height = panels[0].shape[0]
    rows = np.arange(height) * texture.shape[0] // height
    cols = np.arange(height * texture.shape[1] // texture.shape[0]) * texture.shape[0] // height
    row = np.concatenate(panels + [texture[rows][:, cols]], axis=1)
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
    shape = {} if mesh.has_textures() else {**topology(mesh), "roughness_deg": roughness(mesh)}  # charts: split
    return mesh, {"iso": round(iso, 4), **options, "export_s": round(seconds, 2), "faces": len(mesh.triangles),
                  "file_mb": round(out.stat().st_size / 2 ** 20, 2), **shape, **view_scores(mesh, scene)}


def measure_earlier_light(run: Run, scene: Scene, iso: float, faces: int) -> dict:
    """The light mesh as `--target-faces` made it before: the dense mesh decimated by open3d's quadric decimation,
    no blur, no smoothing, photo vertex colors; timed and scored."""
    start = time.perf_counter()
    mesh = clean_mesh(drop_hidden(field_mesh(run, crop_box(run), iso=iso), run.training_cameras()))
    mesh = mesh.simplify_quadric_decimation(faces)
    mesh.remove_unreferenced_vertices()
    mesh = color_mesh(run, mesh)
    seconds = time.perf_counter() - start
    return {"iso": round(iso, 4), "export_s": round(seconds, 2), "faces": len(mesh.triangles), **topology(mesh),
            "roughness_deg": roughness(mesh), **view_scores(mesh, scene)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run whose scene has alpha or masks (lego, ethiopianHead_8)")
    parser.add_argument("--png", type=Path, required=True, help="the picture of the first test view to write")
    parser.add_argument("--light", type=int, default=LIGHT_FACES, help="faces of the light mesh")
    args = parser.parse_args()
    run = load_run(args.run)
    scene = run.scene()
    if not scene.has_alpha:
        parser.error(f"{args.run}: its scene has neither alpha nor masks: no silhouettes to score against")
    start = time.perf_counter()
    chosen = auto_iso(run, crop_box(run))
    iso_s = time.perf_counter() - start
    dense, auto = measure(run, scene, chosen.iso, args.run / "mesh_dense.ply")
    auto |= {"iso_s": round(iso_s, 2), "iso_iou": round(chosen.iou, 4), "iso_rays": chosen.rays}
    earlier = measure_earlier_light(run, scene, chosen.iso, args.light)
    _, light_vertex = measure(run, scene, chosen.iso, args.run / "mesh_light.ply", target_faces=args.light)
    textured_mesh, textured = measure(run, scene, chosen.iso, args.run / "mesh_light.glb", target_faces=args.light)
    textured["texture"] = list(np.asarray(textured_mesh.textures[0]).shape[:2])
    write_color_views(scene, [dense, textured_mesh], args.png)
    print(json.dumps({"dense": auto, "light_before": earlier, "light_vertex": light_vertex,
                      "light_texture": textured, "surface": ray_spread(run, scene), "png": str(args.png)}, indent=2))


if __name__ == "__main__":
    main()
