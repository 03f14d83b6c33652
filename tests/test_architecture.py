"""The package's shape: every module imports, stages import only the stages below them, and no import cycle."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import voxnerf

BELOW = {  # each stage of voxnerf/ and the stages it may import (its own modules always)
    "errors": set(),
    "configs": set(),  # the presets: package data, no code
    "ranges": set(),  # the values a numeric option may take: the configuration's and each field kind's
    "system": {"errors"},
    "data": {"errors", "system"},
    "process": {"errors", "system", "data"},
    "fields": {"errors", "system", "data", "ranges"},
    "render": {"errors", "system", "data", "ranges", "fields"},
    "run": {"errors", "system", "data", "ranges", "fields", "render"},
    "train": {"errors", "system", "data", "ranges", "fields", "render", "run", "configs"},
    "export": {"errors", "system", "data", "ranges", "fields", "render", "run"},
    "view": {"errors", "system", "data", "ranges", "fields", "render", "run", "train", "export"},
    "scenes": {"errors", "system", "data"},  # toy scenes with ground truth: written in the formats data/ reads
    "cli": {"errors", "system", "data", "process", "ranges", "fields", "render", "run", "train", "export", "view",
            "scenes", "configs"},
}
MAPPED = ("voxnerf.cli", "voxnerf.scenes", "voxnerf.configs")  # subpackages whose folders are top-level in the repo
ENTRY_POINTS = {"voxnerf", "voxnerf.__main__"}  # the package's docstring and `python -m voxnerf` (the CLI)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name -> its file."""
    found = {}
    for package in [voxnerf, *map(importlib.import_module, MAPPED)]:
        found[package.__name__] = Path(package.__file__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            spec = info.module_finder.find_spec(info.name, None)
            found[info.name] = Path(spec.origin)
    return found


def imported(module: str, path: Path, known: set[str], top_level_only: bool) -> set[str]:
    """The voxnerf modules `module` imports (a `from PACKAGE import submodule` names the submodule); with
    `top_level_only`, only the imports run when the module is imported (not those inside functions or under
    `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    nodes = _top_level(tree.body) if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("voxnerf.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "voxnerf":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return out - {module}


def _top_level(body: list[ast.stmt]):
    """The statements run at import time: the module body, into `try` and plain `if` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body + node.orelse + node.finalbody)


def stage(module: str) -> str:
    """The stage a module belongs to: its subpackage, or the root module's own name (`errors`)."""
    return module.split(".")[1]


def test_every_module_imports():
    for name in modules():
        if name not in ("voxnerf.__main__", "voxnerf.cli.entry"):  # they start the CLI / take over SIGINT
            importlib.import_module(name)


def test_every_module_belongs_to_a_stage():
    strays = [m for m in modules() if m not in ENTRY_POINTS and stage(m) not in BELOW]
    assert not strays, f"modules outside the stages (add them to a subpackage, or a stage to BELOW): {strays}"


def test_stages_import_only_the_stages_below_them():
    found = modules()
    wrong = []
    for name, path in found.items():
        if name in ENTRY_POINTS:
            continue
        for target in imported(name, path, set(found), top_level_only=False):
            if target not in ENTRY_POINTS and stage(target) != stage(name) and stage(target) not in BELOW[stage(name)]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the stage order:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    found = modules()
    graph = {name: imported(name, path, set(found), top_level_only=True) for name, path in found.items()}
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every import below it is seen

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target] if target in path else [name, target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[name] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_order_rule_catches_an_upward_import(tmp_path):
    fake = tmp_path / "occupancy.py"
    fake.write_text("from voxnerf.train.trainer import Trainer\n")
    targets = imported("voxnerf.render.occupancy", fake, {"voxnerf.train.trainer"}, top_level_only=False)
    assert {stage(t) for t in targets} - BELOW["render"] == {"train"}


def test_the_cycle_check_sees_imports_run_at_import_time_only(tmp_path):
    fake = tmp_path / "mod.py"
    fake.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from voxnerf.run.load import Run\n"
                    "import voxnerf.data.scene\n\ndef f():\n    from voxnerf.train import session\n")
    known = {"voxnerf.run.load", "voxnerf.data.scene", "voxnerf.train.session"}
    assert imported("voxnerf.x.mod", fake, known, top_level_only=True) == {"voxnerf.data.scene"}
    assert imported("voxnerf.x.mod", fake, known, top_level_only=False) == known


def test_every_subpackage_ships_with_the_install():
    pyproject = (Path(voxnerf.__file__).parents[1] / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(voxnerf[\w.]*)"', re.search(r"^packages = \[(.*?)\]", pyproject, re.S | re.M)[1]))
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert packages <= listed, f"missing from pyproject's packages: {sorted(packages - listed)}"
