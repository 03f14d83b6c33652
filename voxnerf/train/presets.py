"""Which preset a scene trains with, and the run's configuration built from it: the preset for the scene's layout
(configs/), the overlays for the device, then --set overrides and the explicit flags."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Callable

import torch

from voxnerf import configs as presets
from voxnerf.data.layout import detect_layout
from voxnerf.data.scene import Scene
from voxnerf.errors import VoxnerfError
from voxnerf.run.config import TrainConfig, check_override, load_config, parse_override, read_preset
from voxnerf.system.device import cpu_has_fast_bf16

CONFIGS = Path(str(resources.files(presets)))  # the presets ship inside the package (configs/ in the repo)


def silent(message: str) -> None:
    """The default `say`: notes are dropped."""


def preset_path(name_or_path: str | Path) -> Path:
    """A shipped preset as `train` names it ('blender', 'blender.yaml' or 'configs/blender.yaml', when no such file
    is here) -> the installed file; anything else is taken as a path."""
    path = Path(name_or_path)
    shipped = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if path.parent in (Path("."), Path("configs")) and not path.is_file() and shipped.is_file():
        return shipped
    return path


CPU_OVERLAY = "cpu"  # configs/cpu.yaml: the CPU sizing applied over a layout's preset
FP32_OVERLAY = "cpu-fp32"  # configs/cpu-fp32.yaml: over configs/cpu.yaml where the CPU has no native bf16 (fp32 steps)
FP32_PRESETS = ("llff", "blender")  # the presets whose every-capture rows it raised by the rule
# (benchmarks/log/2026-12-02-precision-and-tables.md)


def default_config(scene: Scene, out: Path, resume: bool, device: torch.device,
                   say: Callable[[str], None] = silent) -> tuple[Path, list[Path]]:
    """The run's own config.yaml when resuming; else the preset for the scene's layout and the device (see
    `preset_for`), which is told to `say`. Returns the preset and the overlays applied over it, in order."""
    if resume and (out / "config.yaml").is_file():
        return out / "config.yaml", []
    name, overlays, why = preset_for(scene, device)
    shown = " + ".join(f"configs/{n}.yaml" for n in (name, *overlays))
    say(f"preset      {shown} ({why}; --config to choose another)")
    return preset_path(name), [preset_path(o) for o in overlays]


def preset_for(scene: Scene, device: torch.device = torch.device("cpu")) -> tuple[str, list[str], str]:
    """The preset for a scene's detected layout (voxnerf.data.layout), the overlays for the device (configs/cpu.yaml
    on a CPU: the layout presets are sized for a GPU; then configs/cpu-fp32.yaml for FP32_PRESETS where the CPU has no
    native bf16, so `precision: auto` trains in fp32), and the reason."""
    layout = detect_layout(scene)
    if layout == "forward":
        name, why = "llff", "forward-facing cameras"
    elif layout == "unbounded":
        name, why = "360", "cameras around an unbounded scene"
    elif scene.has_masks and scene.background is None:
        name, why = "object-masked", "object capture with masks"
    else:
        name, why = "blender", "object capture with a transparent background"
    if device.type != "cpu":
        return name, [], f"{why}; on {device.type.upper()}: 262k samples per step, grid up to 256^3"
    why = f"{why}; on a CPU: smaller batches, grid up to 128^3, a 300 s budget"
    if cpu_has_fast_bf16() or name not in FP32_PRESETS:
        return name, [CPU_OVERLAY], why
    return name, [CPU_OVERLAY, FP32_OVERLAY], f"{why}; no native bf16 (fp32 steps): a narrower color MLP"


def checked_override(override: dict, option: str) -> dict:
    """`override` if it is valid on its own (`check_override`), else VoxnerfError blaming `option`."""
    try:
        check_override(override, "config")
    except VoxnerfError as e:
        raise VoxnerfError(f"{option}: {e}") from None
    return override


def build_config(path: Path, sets: list[str], max_steps: int | None, max_time: float | None,
                 threads: int | None, overlays: list[Path] = (), saved: bool = False) -> TrainConfig:
    """Preset (`saved`: a run's own config.yaml, see `load_config`), then its overlays (presets too), then --set
    overrides, then the explicit flags (later wins); a bad value is blamed on its option."""
    overrides = [read_preset(p) for p in overlays]
    overrides += [checked_override(parse_override(s), f"--set {s}") for s in sets]
    flags = {"max_steps": (max_steps, "--max-steps"), "max_time": (max_time, "--max-time"),
             "threads": (threads, "--threads")}
    overrides += [checked_override({k: v}, f"{flag} {v}") for k, (v, flag) in flags.items() if v is not None]
    cfg = load_config(path, overrides, saved)
    if not cfg.max_steps and not cfg.max_time:
        raise VoxnerfError("max_steps and max_time are both 0: training would never stop (set one of them)")
    return cfg
