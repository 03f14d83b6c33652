"""Looking at a run: rendered views and videos along camera paths, camera-path files, the web viewer (viser)
and the open3d view of the occupancy.

May import every stage below it: `voxnerf.errors`, `system`, `data`, `fields`, `render`, `run`, `train` (the
viewer can follow a training in progress), `export` (surface colors for the occupancy view).
"""
