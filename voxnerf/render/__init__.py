"""From a field to pixels: the model (field + occupancy estimator), ray marching through the occupancy,
compositing in FP32, and whole views rendered in chunks.

May import: `voxnerf.errors`, `voxnerf.system`, `voxnerf.data`, `voxnerf.fields`. Never training or runs.
"""
