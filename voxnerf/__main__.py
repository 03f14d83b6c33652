"""`python -m voxnerf ...` runs the CLI (what torchrun launches)."""

from voxnerf.cli.entry import main

main()
