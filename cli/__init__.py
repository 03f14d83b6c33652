"""The `voxnerf` command: a thin typer layer over the library."""
