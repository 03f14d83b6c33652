"""Typed training configuration: dataclasses whose fields are the documentation; YAML presets fill them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

import yaml

from voxnerf.data.space import SPACES
from voxnerf.errors import VoxnerfError
from voxnerf.fields import field_class
from voxnerf.fields.base import known_options
from voxnerf.fields.bricks import BRICK
from voxnerf.fields.voxels import SparseVoxelConfig
from voxnerf.ranges import AT_LEAST_ONE, BELOW_ONE, FRACTION, NON_NEGATIVE, OPEN_FRACTION, POSITIVE, UP_TO_ONE, Range
from voxnerf.render.occupancy import OccupancyConfig
from voxnerf.render.renderer import RenderConfig


@dataclass
class Level:
    """One stage of the coarse-to-fine schedule, active until `until` (fraction of the training budget)."""

    until: float
    resolution: int  # grid cells per axis at this stage (the grid subdivides up to it)
    image_scale: float  # training images resized by this factor (progressive resolution)


@dataclass
class OptimConfig:
    lr_grid: float = 0.1  # Adam learning rate of the grid's density and features
    lr_decoder: float = 5e-3  # Adam learning rate of the color MLP (1e-3 learned it too slowly for a 300 s CPU
    #                            run: lego_100 +0.3 dB, real photos +0.4-0.5 dB;
    #                            benchmarks/log/2026-11-25-real-captures-300s.md)
    lr_color_maps: float = 1e-3  # Adam learning rate of the per-image color maps (field.color_maps)
    lr_final_ratio: float = 0.1  # learning rates decay exponentially to this fraction at the end
    lr_ranks: str = "sqrt"  # N data-parallel ranks average N batches a step: rates x sqrt(N) | x N ("linear")
    target_samples: int = 1 << 18  # samples per step; the ray batch is resized toward it (GPU-sized; configs/cpu.yaml)
    min_rays: int = 1024
    max_rays: int = 65536
    entropy_weight: float = 1e-3  # binary-entropy penalty on ray opacity: no haze in front of the background (DVGO)
    alpha_weight: float = 0.01  # binary cross-entropy of ray opacity against the pixel's alpha (masks, transparent
    #                              backgrounds): the silhouette as a loss of its own, beside the colors on random
    #                              backgrounds (benchmarks/log/2026-12-06-silhouette-glare.md)
    sparsity_weight: float = 0.0  # L1 penalty on sample opacity (pushes empty space to zero density; erodes thin parts)
    distortion_weight: float = 0.0  # Mip-NeRF 360 distortion loss per ray: weight in one stretch (floaters, haze)
    tv_density: float = 0.0  # total variation on the raw density of the grid's vertices a step reads (smooths floaters)
    tv_features: float = 0.0  # total variation on their features
    tv_vertices: int = 16384  # vertices drawn per step for total variation, among the rows the samples read


@dataclass
class TrainConfig:
    field: object = dataclasses.field(default_factory=SparseVoxelConfig)  # the field kind and its options
    render: RenderConfig = dataclasses.field(default_factory=RenderConfig)
    occupancy: OccupancyConfig = dataclasses.field(default_factory=OccupancyConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    levels: list[Level] = dataclasses.field(default_factory=lambda: [
        Level(0.1, 32, 0.25), Level(0.3, 64, 0.5), Level(0.6, 128, 1.0), Level(1.0, 256, 1.0)])
    space: str = "box"  # box (bounded object) | contract (unbounded 360 scene) | ndc (forward-facing); voxnerf.data.space
    contract_inner: float = 0.5  # contract: the least share of the grid's half-width the unit box fills (normalize)
    pixels_per_cell: float = 4.0  # photos over (this x the finest resolution)^2 pixels train downscaled (--downscale)
    max_steps: int = 20000  # training stops at whichever of max_steps / max_time comes first
    max_time: float = 0.0  # seconds of training (evaluation excluded); 0 = no limit
    precision: str = "auto"  # auto (fp16 on CUDA; bf16 on a CPU with native bf16, else fp32) | bf16 | fp16 | fp32;
    #                          fp16 trains with a GradScaler (on a CPU: a slow stand-in for CUDA, a check)
    seed: int = 0
    log_every: int = 50  # steps between metric lines (CSV/JSONL/TensorBoard)
    checkpoint_every: int = 1000  # steps between atomic checkpoints
    eval_every_view: int = 1  # evaluate every k-th test view at the end (1 = all)
    threads: int = 0  # torch CPU threads (0 = one per core that other processes leave free, rechecked every 2 s)


def _build(cls, data: dict, where: str):
    """Instantiate dataclass `cls` from a dict, rejecting unknown keys with their dotted name."""
    if not isinstance(data, dict):
        raise VoxnerfError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise VoxnerfError(f"{where}: unknown option '{key}' (known: {', '.join(known)})")
        if key == "levels":
            if not isinstance(value, list):
                raise VoxnerfError(f"{where}.levels: expected a list of levels")
            kwargs[key] = [_build(Level, v, f"{where}.levels[{i}]") for i, v in enumerate(value)]
        elif key == "field" and cls is TrainConfig:
            kwargs[key] = _build_field(value, f"{where}.field")
        elif key in _NESTED and cls is TrainConfig:
            kwargs[key] = _build(_NESTED[key], value, f"{where}.{key}")
        else:
            kwargs[key] = _checked(value, known[key].type, f"{where}.{key}")
    return cls(**kwargs)


def _checked(value, type_name: str, where: str):
    """`value` if it fits the field's annotated scalar type (ints are accepted as floats, and so are numbers such
    as 1e-5 that YAML 1.1, PyYAML's, reads as strings for want of a dot), else VoxnerfError."""
    expected = {"int": int, "float": (int, float), "str": str, "bool": bool}.get(str(type_name))
    if type_name == "float" and isinstance(value, str):
        value = _float_or_text(value)
    if expected is not None and (not isinstance(value, expected) or (type_name != "bool" and isinstance(value, bool))):
        raise VoxnerfError(f"{where}: expected {type_name}, got {value!r}")
    return float(value) if type_name == "float" else value


def _float_or_text(text: str) -> float | str:
    """The number a string such as '1e-5' spells, else the string itself."""
    try:
        return float(text)
    except ValueError:
        return text


_NESTED = {"render": RenderConfig, "occupancy": OccupancyConfig, "optim": OptimConfig}


def _build_field(data: dict, where: str):
    """The options of the field kind named by `data["kind"]` (default: the sparse voxel field)."""
    if not isinstance(data, dict):
        raise VoxnerfError(f"{where}: expected a mapping, got {type(data).__name__}")
    kind = data.get("kind", SparseVoxelConfig.kind)
    if not isinstance(kind, str):
        raise VoxnerfError(f"{where}.kind: expected str, got {kind!r}")
    return _build(field_class(kind, where).Config, data, where)


def saved_config_options(saved: dict) -> dict:
    """A checkpoint's saved TrainConfig dict less the options this version does not know, at every level (another
    version's: since removed, or added after this one), so that a run of another version still loads."""
    out = known_options(TrainConfig, saved)
    for key, section in _NESTED.items():
        if isinstance(out.get(key), dict):
            out[key] = known_options(section, out[key])
    field = out.get("field")
    if isinstance(field, dict):
        out["field"] = known_options(field_class(field.get("kind", SparseVoxelConfig.kind)).Config, field)
    if isinstance(out.get("levels"), list):
        out["levels"] = [known_options(Level, level) if isinstance(level, dict) else level for level in out["levels"]]
    return out


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(text: str) -> dict:
    """'optim.lr_grid=0.05' -> {'optim': {'lr_grid': 0.05}} (the value is parsed as YAML)."""
    if "=" not in text:
        raise VoxnerfError(f"--set {text}: expected KEY=VALUE, e.g. optim.lr_grid=0.05")
    key, value = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise VoxnerfError(f"--set {text}: expected a dotted option name before '=', e.g. optim.lr_grid")
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as e:
        raise VoxnerfError(f"--set {text}: malformed YAML value ({str(e).splitlines()[0]})") from None
    out: dict = {}
    node = out
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = parsed
    return out


def read_preset(path: Path) -> dict:
    """A YAML preset's options as a dict (a missing or malformed file is a VoxnerfError naming it)."""
    if not path.is_file():
        raise VoxnerfError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise VoxnerfError(f"{path}: malformed YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise VoxnerfError(f"{path}: expected a mapping of options, got {type(data).__name__}")
    return data


def compose_presets(paths: Sequence[Path]) -> dict:
    """Preset files' options merged in order (later wins), as `load_config` lays overlays over a preset: one preset
    that any revision of the code reads (benchmarks hand it to earlier checkouts)."""
    data = {}
    for path in paths:
        data = _merge(data, read_preset(Path(path)))
    return data


def load_config(path: str | Path | None = None, overrides: list[dict] | None = None,
                saved: bool = False) -> TrainConfig:
    """A TrainConfig from defaults, then a YAML preset (`saved`: a run's own config.yaml, less the options this
    version does not know, `saved_config_options`), then override dicts (later wins)."""
    data = read_preset(Path(path)) if path is not None else {}
    if saved:
        data = saved_config_options(data)
    for o in overrides or []:
        data = _merge(data, o)
    where = str(path) if path else "config"
    cfg = _build(TrainConfig, data, where)
    check_ranges(cfg, where)
    check_levels(cfg.levels, where)
    if cfg.space not in SPACES:
        raise VoxnerfError(f"{where}: space '{cfg.space}': expected one of {', '.join(SPACES)}")
    if cfg.max_steps <= 0 and cfg.max_time <= 0:
        raise VoxnerfError(f"{where}: set max_steps or max_time (both are 0: training would never stop)")
    if cfg.optim.lr_ranks not in LR_RANK_RULES:
        raise VoxnerfError(f"{where}: optim.lr_ranks '{cfg.optim.lr_ranks}': expected one of "
                           f"{', '.join(LR_RANK_RULES)}")
    if cfg.optim.max_rays < cfg.optim.min_rays:
        raise VoxnerfError(f"{where}: optim.max_rays = {cfg.optim.max_rays} is below optim.min_rays = "
                           f"{cfg.optim.min_rays}")
    return cfg


LR_RANK_RULES = {  # optim.lr_ranks: the learning rates' factor for a step of N ranks (voxnerf.train.trainer)
    "sqrt": math.sqrt,  # the square-root rule for Adam (Malladi et al., NeurIPS 2022): safe for many GPUs
    "linear": float,  # the linear rule (Goyal et al., 2017): faster for the few ranks of one CPU (configs/cpu.yaml)
}


# Every numeric option of TrainConfig by its dotted name (those of the field kind are its Config's RANGES);
# `check_ranges` applies them.
RANGES = {
    "max_steps": NON_NEGATIVE, "max_time": NON_NEGATIVE, "seed": NON_NEGATIVE, "log_every": AT_LEAST_ONE,
    "checkpoint_every": AT_LEAST_ONE, "eval_every_view": AT_LEAST_ONE, "threads": Range(0, 4096),
    "contract_inner": OPEN_FRACTION, "pixels_per_cell": Range(0.5, 1024),
    "render.step_ratio": Range(0, 4, low_open=True), "render.alpha_min": BELOW_ONE,
    "render.transmittance_min": BELOW_ONE, "render.color_weight_min": BELOW_ONE, "render.march_chunk": AT_LEAST_ONE,
    "render.checkpoint_chunk": NON_NEGATIVE,
    "occupancy.warmup_steps": NON_NEGATIVE, "occupancy.update_every": AT_LEAST_ONE, "occupancy.decay": FRACTION,
    "occupancy.threshold": BELOW_ONE, "occupancy.min_fraction": FRACTION,
    "optim.lr_grid": POSITIVE, "optim.lr_decoder": POSITIVE, "optim.lr_color_maps": POSITIVE,
    "optim.lr_final_ratio": UP_TO_ONE,
    "optim.target_samples": AT_LEAST_ONE, "optim.min_rays": AT_LEAST_ONE, "optim.max_rays": AT_LEAST_ONE,
    "optim.entropy_weight": NON_NEGATIVE, "optim.alpha_weight": NON_NEGATIVE, "optim.sparsity_weight": NON_NEGATIVE,
    "optim.distortion_weight": NON_NEGATIVE, "optim.tv_density": NON_NEGATIVE, "optim.tv_features": NON_NEGATIVE,
    "optim.tv_vertices": AT_LEAST_ONE,
    "levels.until": UP_TO_ONE, "levels.resolution": Range(BRICK, 4096), "levels.image_scale": UP_TO_ONE,
}


def option_ranges(field_config: type) -> dict[str, Range]:
    """The Range of every numeric option by its dotted name: TrainConfig's own (RANGES) and those the field kind's
    options dataclass `field_config` declares (its RANGES, as field.NAME; a kind without numeric options may declare
    none)."""
    own = getattr(field_config, "RANGES", {})
    return {**RANGES, **{f"field.{name}": limits for name, limits in own.items()}}


def numeric_options(data: dict, prefix: str = "") -> list[tuple[str, str, float]]:
    """(dotted name, its RANGES key, value) of every number in a config dict (levels[i].x has the key levels.x)."""
    found = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            found += numeric_options(value, name + ".")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                found += [(f"{name}[{i}].{n}", f"{name}.{n}", v) for n, _, v in numeric_options(item)]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append((name, name, value))
    return found


def check_ranges(cfg: TrainConfig, where: str) -> None:
    """VoxnerfError naming the first option (dotted) that is NaN, infinite or outside its range (`option_ranges`; an
    option of a field kind that declares no range for it need only be finite)."""
    ranges = option_ranges(type(cfg.field))
    for name, key, value in numeric_options(config_to_dict(cfg)):
        if not math.isfinite(value):
            raise VoxnerfError(f"{where}: {name} = {value}: expected a finite number")
        limits = ranges.get(key)
        if limits is not None and not limits.admits(value):
            raise VoxnerfError(f"{where}: {name} = {value:g}: expected {limits}")


def check_override(override: dict, where: str) -> None:
    """An override dict on its own: known keys of the right types within their ranges (levels well formed);
    checks that involve other options wait for the whole configuration (`load_config`)."""
    cfg = _build(TrainConfig, override, where)
    check_ranges(cfg, where)
    check_levels(cfg.levels, where)


def check_levels(levels: list[Level], where: str) -> None:
    """Levels must end at 1.0 with resolutions that double from the first (the occupancy subdivides by 2). The
    first level's resolution is where the estimator and the field start."""
    if not levels or abs(levels[-1].until - 1.0) > 1e-9:
        raise VoxnerfError(f"{where}: levels must be non-empty and the last must have until: 1.0")
    for i, level in enumerate(levels):
        if level.resolution <= 0 or level.resolution % BRICK:
            raise VoxnerfError(f"{where}: levels[{i}].resolution {level.resolution}: expected a positive multiple "
                               f"of {BRICK}")
    for a, b in zip(levels, levels[1:]):
        if b.resolution not in (a.resolution, 2 * a.resolution) or b.until <= a.until:
            raise VoxnerfError(f"{where}: each level's resolution must equal or double the previous one, "
                               f"with increasing 'until' (got {a.resolution}->{b.resolution})")


def config_to_dict(cfg: TrainConfig) -> dict:
    return asdict(cfg)
