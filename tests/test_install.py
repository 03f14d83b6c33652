"""The package as an index and a user see it: one import name, the presets inside it, the version, the metadata.
(.ci/install_check goes further: it installs the wheel in a fresh virtualenv and trains from another folder.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import voxnerf

REPO = Path(__file__).resolve().parents[1]


def source_files() -> list[str]:
    """The checkout's files as a clone would have them: tracked, or new and not ignored (no build leftovers)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True, text=True).stdout
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel `pip wheel .` builds from a clean copy of this checkout (no dependencies, no build isolation)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the wheel is built from the files git knows")
    source = tmp_path_factory.mktemp("source")
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source),
                    "-w", str(out)], check=True, capture_output=True)
    (path,) = out.glob("voxnerf-*.whl")
    return zipfile.ZipFile(path)


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    return wheel.read(next(n for n in wheel.namelist() if n.endswith(f".dist-info/{name}"))).decode()


def test_the_wheel_installs_one_import_name_with_the_presets_inside(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"voxnerf"}
    presets = {p.name for p in (REPO / "configs").glob("*.yaml")}
    assert presets and {f"voxnerf/configs/{p}" for p in presets} <= set(names)
    assert {"voxnerf/cli/main.py", "voxnerf/scenes/__init__.py"} <= set(names)
    assert "voxnerf = voxnerf.cli.entry:main" in dist_info(wheel, "entry_points.txt")


def test_the_wheel_carries_what_an_index_shows(wheel):
    head, body = dist_info(wheel, "METADATA").split("\n\n", 1)
    for field in (f"Version: {voxnerf.__version__}", "Summary: Sparse-voxel NeRF", "Requires-Python: >=3.10",
                  "License-Expression: MIT", "License-File: LICENSE", "Project-URL: Documentation",
                  "Classifier: Programming Language :: Python :: 3.11"):
        assert field in head, f"METADATA lacks {field!r}"
    assert body.startswith("# voxnerf")  # the README is the long description


def test_the_unpacked_wheel_finds_its_presets_and_scenes_from_another_folder(wheel, tmp_path):
    site = tmp_path / "site"
    wheel.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = ("import voxnerf, voxnerf.scenes; from voxnerf.train.presets import preset_path\n"
             "for name in ('cpu', 'configs/360.yaml', 'object-masked.yaml'):\n"
             "    print(preset_path(name).resolve())\n"
             "print(voxnerf.scenes.__file__)")
    done = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(site)})
    paths = [Path(line) for line in done.stdout.split()]
    assert len(paths) == 4 and all(p.is_file() and p.is_relative_to(site.resolve()) for p in paths), done.stdout


def test_version_prints_the_package_version():
    done = subprocess.run([sys.executable, "-m", "voxnerf", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"voxnerf {voxnerf.__version__}"
