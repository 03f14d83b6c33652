"""`python -m voxnerf ...` runs the CLI (what torchrun launches)."""

from voxnerf_cli.entry import main

main()
