"""Light meshes: a face budget, marched on a slightly blurred density, then decimated.

The density's noise at the scale of a cell makes the dense mesh's surface crumpled; quadric decimation folds that
into fewer, larger faces whose neighbours meet at sharp angles (on ethiopianHead_8, 15 degrees of roughness
became 41 at 100,000 faces), and smoothing the decimated mesh hardly helps (32 after Taubin or averaging). A light
mesh is therefore marched on the density blurred by a Gaussian of LIGHT_BLUR cells (`mesh.lattice_block`: sigma
clipped at twice the iso value's, then blurred, which keeps parts a fraction of a cell thin), then decimated by
quadric error (fast-simplification: the same surfaces as open3d's `simplify_quadric_decimation` in a tenth of the
time). Measured in benchmarks/log/2026-12-07-light-textured-mesh.md: a wider blur smooths more and loses lego's
thin parts, a narrower one leaves the head rough; Taubin steps after decimation smoothed the real meshes a little
more but cost lego 0.5 dB of color and roughened a clean one.
"""

from __future__ import annotations

import fast_simplification
import numpy as np
import open3d as o3d

LIGHT_FACES = 100_000  # the default face budget of a textured (.obj, .glb) mesh
LIGHT_BLUR = 0.5  # grid cells: standard deviation of the density's blur before a light mesh is marched


def decimate(mesh: o3d.geometry.TriangleMesh, target_faces: int) -> o3d.geometry.TriangleMesh:
    """The mesh decimated to about `target_faces` triangles by quadric error (as is when it has no more), with
    vertex normals; faces that collapse to a line or a point are dropped."""
    faces = np.asarray(mesh.triangles)
    if len(faces) > target_faces:
        points, faces = fast_simplification.simplify(np.asarray(mesh.vertices), faces, 1 - target_faces / len(faces))
        mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(points), o3d.utility.Vector3iVector(faces))
        mesh.remove_degenerate_triangles()
        mesh.remove_unreferenced_vertices()
    mesh.compute_vertex_normals()
    return mesh
