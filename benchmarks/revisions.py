"""Run a benchmark's variants on another git revision beside the working tree: a temporary worktree per revision."""

from __future__ import annotations

import subprocess
import tempfile
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
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=True)
