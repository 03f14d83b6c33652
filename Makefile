# Two commands on a fresh machine: `make demo` (train, evaluate, export a built-in scene) and `make test`.
PYTHON ?= python3
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)

.PHONY: setup system-deps demo test bench docs

setup: $(VENV)/.installed

# open3d needs libusb-1.0 at import time, and EGL with Mesa for headless screenshots (`voxnerf view --screenshot`);
# install them where we can (root + apt), else say how in one line.
system-deps:
	@$(PYTHON) -c "import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library('usb-1.0') else 1)" || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -q libusb-1.0-0 >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libusb-1.0-0 >/dev/null 2>&1; } ; \
	else echo "voxnerf: open3d needs libusb-1.0 (Debian/Ubuntu: sudo apt-get install libusb-1.0-0)"; fi
	@$(PYTHON) -c "import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library('EGL') else 1)" || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -q libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1; } ; \
	else echo "voxnerf: headless screenshots need EGL (Debian/Ubuntu: sudo apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri)"; fi

$(VENV)/.installed: pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory system-deps
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch
	$(PIP) -e '.[dev]'
	@touch $@

demo: setup
	$(BIN)/voxnerf demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/lego_cpu.py

# docs/commands.md and docs/config.md, generated from the typer app and the config dataclasses (tests/test_docs.py).
docs: setup
	$(BIN)/python -m voxnerf.cli.reference docs
