"""The package as an index and a user see it: one import name, the presets inside it, the version, the metadata.
(.ci/install_check goes further: it installs the wheel in a fresh virtualenv and trains from another folder.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata, resources
from pathlib import Path

import pytest

import voxnerf
from voxnerf.train.session import preset_path

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel `pip wheel .` builds from this checkout (no dependencies, no build isolation: seconds)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(out)], check=True, capture_output=True)
    (path,) = out.glob("voxnerf-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_one_import_name_with_the_presets_inside(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"voxnerf"}
    presets = {p.name for p in (REPO / "configs").glob("*.yaml")}
    assert presets and {f"voxnerf/configs/{p}" for p in presets} <= set(names)
    assert {"voxnerf/cli/main.py", "voxnerf/scenes/__init__.py"} <= set(names)
    entry = wheel.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "voxnerf = voxnerf.cli.entry:main" in entry


def test_the_wheel_carries_what_an_index_shows(wheel):
    meta = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    head = meta.split("\n\n", 1)[0]
    for field in ("Summary: Sparse-voxel NeRF", "Requires-Python: >=3.10", "License: MIT", "Project-URL: Documentation",
                  "Classifier: Programming Language :: Python :: 3.11", "Classifier: License :: OSI Approved"):
        assert field in head, f"METADATA lacks {field!r}"
    assert "# voxnerf" in meta.split("\n\n", 1)[1]  # the README is the long description


def test_presets_are_found_through_the_package_not_the_source_tree():
    installed = Path(str(resources.files("voxnerf.configs")))
    for name in ("blender", "cpu", "360", "llff", "object-masked"):
        path = preset_path(name)
        assert path.parent == installed and path.is_file(), path


def test_version_is_one_number_everywhere():
    done = subprocess.run([sys.executable, "-m", "voxnerf", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"voxnerf {voxnerf.__version__}"
    assert metadata.version("voxnerf") == voxnerf.__version__
