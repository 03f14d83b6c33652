"""Configuration ranges (the training configuration's and each field kind's), and the run folder's lock."""

from __future__ import annotations

import math

import pytest

from voxnerf.errors import VoxnerfError
from voxnerf.fields import FIELDS
from voxnerf.run.config import config_to_dict, load_config, numeric_options, option_ranges, parse_override
from voxnerf.run.folder import RunLock, RunLocked
from voxnerf.train.presets import preset_path


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_every_numeric_option_of_every_field_kind_has_a_range(kind):
    options = numeric_options(config_to_dict(load_config(None, [{"field": {"kind": kind}}])))
    assert options, "no numeric options found"
    assert not [key for _, key, _ in options if key not in option_ranges(FIELDS[kind].Config)]


@pytest.mark.parametrize("override, name", [
    ({"max_time": -5}, "max_time = -5"),
    ({"threads": -1}, "threads = -1"),
    ({"checkpoint_every": 0}, "checkpoint_every = 0"),
    ({"log_every": 0}, "log_every = 0"),
    ({"eval_every_view": 0}, "eval_every_view = 0"),
    ({"render": {"step_ratio": 0}}, "render.step_ratio = 0"),
    ({"render": {"march_chunk": 0}}, "render.march_chunk = 0"),
    ({"occupancy": {"update_every": 0}}, "occupancy.update_every = 0"),
    ({"occupancy": {"decay": 1.5}}, "occupancy.decay = 1.5"),
    ({"optim": {"min_rays": 0}}, "optim.min_rays = 0"),
    ({"optim": {"target_samples": -1}}, "optim.target_samples = -1"),
    ({"optim": {"lr_grid": math.nan}}, "optim.lr_grid = nan"),
    ({"optim": {"lr_decoder": 0.0}}, "optim.lr_decoder = 0"),
    ({"optim": {"lr_final_ratio": math.inf}}, "optim.lr_final_ratio = inf"),
    ({"optim": {"entropy_weight": -0.1}}, "optim.entropy_weight = -0.1"),
    ({"levels": [{"until": 1.0, "resolution": 0, "image_scale": 1.0}]}, r"levels\[0\].resolution = 0"),
    ({"levels": [{"until": 1.0, "resolution": 32, "image_scale": 0.0}]}, r"levels\[0\].image_scale = 0"),
    ({"field": {"alpha_init": 1.0}}, "field.alpha_init = 1"),
    ({"field": {"kind": "dense_grid", "vertices": 1}}, "field.vertices = 1"),
])
def test_zero_negative_and_nan_counts_budgets_ratios_and_rates_are_refused_by_dotted_name(override, name):
    with pytest.raises(VoxnerfError, match=rf"^config: {name}: expected"):
        load_config(None, [override])


def test_max_rays_below_min_rays_is_refused():
    with pytest.raises(VoxnerfError, match="optim.max_rays = 100 is below optim.min_rays = 1024"):
        load_config(None, [{"optim": {"max_rays": 100}}])


def test_an_unknown_learning_rate_rule_for_ranks_is_refused():
    with pytest.raises(VoxnerfError, match="optim.lr_ranks 'cubic': expected one of sqrt, linear"):
        load_config(None, [{"optim": {"lr_ranks": "cubic"}}])


def test_the_presets_are_within_range():
    for name in ("blender", "cpu", "llff", "360", "object-masked"):
        load_config(preset_path(name))


def test_a_held_run_folder_refuses_a_second_writer_and_is_free_once_released(tmp_path):
    notes = []
    with RunLock(tmp_path / "run", notes.append):
        with pytest.raises(RunLocked, match=r"another voxnerf process \(pid \d+ on \S+\) is writing this run folder"):
            RunLock(tmp_path / "run", notes.append).__enter__()
    with RunLock(tmp_path / "run", notes.append):
        pass
    assert notes == []  # a cleanly released lock is not a stale one


@pytest.mark.parametrize("text, value", [("optim.tv_density=1e-5", 1e-5), ("optim.lr_grid=2E-2", 0.02),
                                         ("optim.lr_grid=0.05", 0.05), ("optim.lr_grid=1", 1.0)])
def test_numbers_in_exponent_notation_are_read_as_floats(text, value):
    """PyYAML (YAML 1.1) reads 1e-5 as a string for want of a dot; a float option takes it as the number."""
    cfg = load_config(None, [parse_override(text)])
    section, name = text.split("=")[0].split(".")
    assert getattr(getattr(cfg, section), name) == value


def test_a_word_for_a_float_option_is_still_refused():
    with pytest.raises(VoxnerfError, match="optim.lr_grid: expected float, got 'fast'"):
        load_config(None, [parse_override("optim.lr_grid=fast")])
