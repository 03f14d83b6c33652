"""The one error type users see: a file (or option) and what is wrong with it."""

from __future__ import annotations

from pathlib import Path


class VoxnerfError(Exception):
    """A problem with user input, reported by the CLI as one line with no traceback."""


class SceneError(VoxnerfError):
    """Bad scene input: names the offending file and the problem.

    Args:
        path: the file or folder at fault.
        problem: what is wrong, in a few words.
    """

    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")
