"""Run a benchmark's variants on another git revision beside the working tree: a temporary worktree per revision."""

from __future__ import annotations

import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """A detached worktree of `revision` (its voxnerf package and configs), removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "baseline"
        if (REPO.parent / "shared").exists():  # its benchmark scripts find the data beside their checkout
            (Path(tmp) / "shared").symlink_to(REPO.parent / "shared")
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), revision],
                       check=True, capture_output=True)
        link_mapped_packages(path)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=True)


def link_mapped_packages(tree: Path) -> None:
    """Make a source tree import as its installed package does: a subpackage that pyproject maps from a top-level
    folder (`"voxnerf.cli" = "cli"`) gets a link at its package path (voxnerf/cli -> TREE/cli), so that code run
    from the tree (PYTHONPATH) finds that revision's CLI, toy scenes and presets, not those of the editable install."""
    setuptools = tomllib.loads((tree / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
    for package, folder in setuptools.get("package-dir", {}).items():
        link = tree.joinpath(*package.split("."))
        if "." in package and not link.exists():
            link.symlink_to((tree / folder).resolve(), target_is_directory=True)
