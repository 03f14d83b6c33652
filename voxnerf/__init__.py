"""voxnerf: a sparse-voxel NeRF trainer in plain PyTorch."""

__version__ = "0.1.0"
