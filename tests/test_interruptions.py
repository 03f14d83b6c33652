"""No lost work: one writer per run folder, signals sent to a real `voxnerf train` process end with the latest state
saved, a full disk keeps the previous checkpoint, and runs are only continued or scored on their own scene."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch

import voxnerf.scenes as toy_scenes
from voxnerf.data import load_scene
from voxnerf.data.formats import write_scene
from voxnerf.data.formats.writing import mask_image
from voxnerf.run.checkpoint import CHECKPOINT
from voxnerf.run.folder import LOCK

TINY = ["--device", "cpu", "--threads", "1", "--quiet", "--config", "blender",
        "--set", "levels=[{until: 1.0, resolution: 16, image_scale: 1.0}]", "--set", "optim.target_samples=4096",
        "--set", "optim.min_rays=128", "--set", "optim.max_rays=256", "--set", "occupancy.warmup_steps=20",
        "--set", "log_every=5"]
LONG = ["--max-steps", "100000", "--set", "checkpoint_every=100000"]  # runs until a signal; no periodic save
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> tuple[Path, Path]:
    """Two small toy scenes (sphere, box) in Blender format."""
    root = tmp_path_factory.mktemp("scenes")
    return tuple(toy_scenes.make_scene(name, root / name, n_train=12, n_val=0, n_test=2, size=16, n_samples=32)
                 for name in ("sphere", "box"))


def start(*args, env: dict | None = None) -> subprocess.Popen:
    """`python -m voxnerf ARGS...` started in the background, its stdout and stderr captured as text."""
    return subprocess.Popen([sys.executable, "-m", "voxnerf", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**ENV, **(env or {})})


def run(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voxnerf", *map(str, args)], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=120)


def logged_steps(run_dir: Path) -> list[int]:
    """The steps of the run's metrics.jsonl rows (a torn last line is skipped)."""
    path = run_dir / "metrics.jsonl"
    steps = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass
    return steps


def wait_until(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for_step(run_dir: Path, step: int) -> None:
    wait_until(lambda: max(logged_steps(run_dir), default=0) >= step, f"step {step} in {run_dir}")


def checkpoint_step(run_dir: Path) -> int:
    return torch.load(run_dir / CHECKPOINT, weights_only=False)["step"]


def stderr_lines(process) -> list[str]:
    return process.stderr.strip().splitlines() if isinstance(process.stderr, str) else []


def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_sigterm_stops_training_and_saves_the_latest_state(scenes, tmp_path):
    out = tmp_path / "run"
    process = start("train", scenes[0], "--out", out, *TINY, *LONG)
    wait_for_step(out, 30)
    process.send_signal(signal.SIGTERM)
    result = finish(process)
    assert result.returncode == 143
    assert "Traceback" not in result.stderr
    assert checkpoint_step(out) >= max(logged_steps(out)) >= 30
    assert f"checkpoint saved to {out / CHECKPOINT} at step {checkpoint_step(out)}" in stderr_lines(result)[-1]
    assert not (out / "eval.json").exists()


def test_a_second_ctrl_c_while_stopping_does_not_drop_the_save(scenes, tmp_path):
    out = tmp_path / "run"
    process = start("train", scenes[0], "--out", out, *TINY, *LONG)
    wait_for_step(out, 30)
    process.send_signal(signal.SIGINT)
    first = process.stderr.readline()
    assert first.startswith("voxnerf: SIGINT: stopping after this step and saving")
    process.send_signal(signal.SIGINT)
    result = finish(process)
    assert result.returncode == 130
    assert "Traceback" not in result.stderr
    assert stderr_lines(result)[0].startswith("voxnerf: SIGINT again: still saving and exiting")
    assert checkpoint_step(out) >= max(logged_steps(out)) >= 30


def test_ctrl_c_while_the_libraries_load_exits_with_one_line(tmp_path):
    process = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "voxnerf", "info", tmp_path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    for line in process.stderr:  # Python reports each import as it ends: the CLI's entry, then torch and the rest
        if line.rstrip().endswith("voxnerf.cli.entry"):
            break
    process.send_signal(signal.SIGINT)
    result = finish(process)
    assert result.returncode == 130
    assert [line for line in stderr_lines(result) if not line.startswith("import time:")] == ["voxnerf: interrupted"]


def test_ctrl_c_during_the_final_scoring_says_the_checkpoint_is_saved(tmp_path):
    scene = toy_scenes.make_scene("sphere", tmp_path / "many-views", n_train=8, n_val=0, n_test=400, size=16,
                                  n_samples=16)
    out = tmp_path / "run"
    process = start("train", scene, "--out", out, *TINY, "--max-steps", "20")
    wait_until(lambda: (out / CHECKPOINT).is_file() and checkpoint_step(out) == 20, "the final checkpoint")
    process.send_signal(signal.SIGINT)
    result = finish(process)
    assert result.returncode == 130
    assert stderr_lines(result)[-1].startswith("interrupted during the final scoring; the trained checkpoint is saved")
    assert checkpoint_step(out) == 20 and not (out / "eval.json").exists()


def test_a_second_train_on_the_same_folder_is_refused_while_the_first_runs(scenes, tmp_path):
    out = tmp_path / "run"
    first = start("train", scenes[0], "--out", out, *TINY, *LONG)
    wait_for_step(out, 10)
    second = run("train", scenes[0], "--out", out, "--overwrite", *TINY, "--max-steps", "10")
    assert second.returncode == 2
    assert stderr_lines(second) == [f"voxnerf: error: {out}: another voxnerf process (pid {first.pid} on "
                                    f"{os.uname().nodename}) is writing this run folder; wait for it to end or "
                                    f"choose another --out"]
    first.send_signal(signal.SIGTERM)
    assert finish(first).returncode == 143
    assert checkpoint_step(out) >= 10


def test_a_killed_run_leaves_no_stale_lock_orphan_files_or_repeated_metric_rows(scenes, tmp_path):
    out = tmp_path / "run"
    args = ["train", scenes[0], "--out", out, *TINY, "--set", "checkpoint_every=30", "--max-steps", "90"]
    process = start(*args)
    wait_for_step(out, 35)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (out / LOCK).read_text().startswith(f"pid {process.pid} ")
    orphan = out / f".{CHECKPOINT}.k3x9.tmp"
    orphan.write_bytes(b"half a checkpoint")
    rows_past_checkpoint = sum(step > checkpoint_step(out) for step in logged_steps(out))
    assert rows_past_checkpoint > 0
    resumed = run(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"note: took over the lock of {out} left by pid {process.pid}" in resumed.stdout
    assert f"note: dropped {rows_past_checkpoint} metric rows" in resumed.stdout
    assert re.search(r"note: removed [12] temporary file\(s\)", resumed.stdout), resumed.stdout  # 2: killed mid-write
    assert not orphan.exists()
    assert logged_steps(out) == list(range(5, 91, 5))
    csv_steps = [int(row.split(",")[-3]) for row in (out / "metrics.csv").read_text().splitlines()[1:]]
    assert csv_steps == list(range(5, 91, 5))
    assert (out / LOCK).read_text() == ""


def test_an_interrupted_overwrite_leaves_nothing_of_the_old_run(scenes, tmp_path):
    out = tmp_path / "run"
    assert run("train", scenes[0], "--out", out, *TINY, "--max-steps", "20").returncode == 0
    (out / "renders").mkdir()
    process = start("train", scenes[0], "--out", out, "--overwrite", *TINY, *LONG)
    wait_until(lambda: not (out / "eval.json").exists(), "the old run's outputs to go")
    wait_for_step(out, 10)
    process.send_signal(signal.SIGTERM)
    assert finish(process).returncode == 143
    assert not (out / "eval.json").exists() and not (out / "renders").exists()
    assert checkpoint_step(out) >= 10 and min(logged_steps(out)) == 5


def test_runs_are_continued_and_scored_only_on_their_own_scene(scenes, tmp_path):
    sphere, box = scenes
    out = tmp_path / "run"
    assert run("train", sphere, "--out", out, *TINY, "--max-steps", "10").returncode == 0
    scores = (out / "eval.json").read_text()
    checks = [
        (run("eval", out, "--scene", box, "--device", "cpu"), f"--scene {box}: not the scene {out} was trained on"),
        (run("train", box, "--out", out, "--resume", *TINY, "--max-steps", "20"),
         f"--resume {out / CHECKPOINT}: it was trained on {sphere}, not on {box}"),
        (run("train", sphere, "--out", out, "--resume", *TINY, "--max-steps", "20", "--set", "field.feature_dim=8"),
         f"--resume {out / CHECKPOINT}: its field differs from this run's configuration (field feature_dim 12 vs 8)"),
    ]
    for result, line in checks:
        assert result.returncode == 2 and len(stderr_lines(result)) == 1, result.stderr
        assert stderr_lines(result)[0].startswith(f"voxnerf: error: {line}"), result.stderr
    assert (out / "eval.json").read_text() == scores and checkpoint_step(out) == 10
    moved = tmp_path / "moved-sphere"
    sphere.rename(moved)
    try:
        assert run("eval", out, "--scene", moved, "--device", "cpu").returncode == 0
    finally:
        moved.rename(sphere)


def test_a_run_continues_in_the_box_it_recorded(scenes, tmp_path):
    """An earlier version may have framed the same photos in another box of interest (the masks' visual hull
    changed): --resume continues the run in its own box rather than refusing it."""
    out = tmp_path / "run"
    assert run("train", scenes[0], "--out", out, *TINY, "--max-steps", "10").returncode == 0
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    own = [[v * 0.9 for v in corner] for corner in ckpt["scene"]["bbox"]]
    ckpt["scene"]["bbox"] = own
    torch.save(ckpt, out / CHECKPOINT)
    result = run("train", scenes[0], "--out", out, "--resume", *TINY, "--max-steps", "20")
    assert result.returncode == 0, result.stderr
    resumed = torch.load(out / CHECKPOINT, weights_only=False)
    assert resumed["step"] == 20 and resumed["scene"]["bbox"] == own


def test_a_run_whose_masks_changed_is_not_resumed(scenes, tmp_path):
    """A masked capture's box of interest is its masks' visual hull: masks edited since the checkpoint would frame
    another box, so --resume refuses in one line naming the mask folder (a run continued in its old box before). A
    checkpoint of an earlier version, which recorded no masks, still resumes."""
    sphere = load_scene(scenes[0])
    capture = write_scene(dataclasses.replace(sphere, images=[image[..., :3] for image in sphere.images],
                                              background=None), "llff", tmp_path / "capture")
    (capture / "masks").mkdir()
    for i, image in enumerate(sphere.images):
        iio.imwrite(capture / "masks" / f"image_{i:03d}.png", mask_image(image[..., 3] > 127))
    out = tmp_path / "run"
    assert run("train", capture, "--out", out, *TINY, "--max-steps", "10").returncode == 0
    for path in sorted((capture / "masks").iterdir()):
        mask = iio.imread(path)
        mask[:, : mask.shape[1] // 2] = 0
        iio.imwrite(path, mask)
    result = run("train", capture, "--out", out, "--resume", *TINY, "--max-steps", "20")
    assert result.returncode == 2 and len(stderr_lines(result)) == 1, result.stderr
    assert stderr_lines(result)[0].startswith(f"voxnerf: error: --resume {out / CHECKPOINT}: "), result.stderr
    assert f"its masks in {capture / 'masks'} differ from those the run was trained on" in result.stderr
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    del ckpt["scene"]["mask_fingerprint"]
    torch.save(ckpt, out / CHECKPOINT)
    result = run("train", capture, "--out", out, "--resume", *TINY, "--max-steps", "20")
    assert result.returncode == 0, result.stderr
    assert checkpoint_step(out) == 20


def test_a_dying_peer_leaves_rank_0s_latest_state_saved(scenes, tmp_path):
    """Rank 1 exits at its 25th step (tests/rank_hooks.py puts the fault there)."""
    out = tmp_path / "run"
    hooks = Path(__file__).with_name("rank_hooks.py")
    result = subprocess.run([sys.executable, hooks, "--fault", "1:25:exit", "--", "train", scenes[0], "--out", out,
                             "--nproc", "2", *TINY, *LONG], capture_output=True, text=True, timeout=120,
                            env={**ENV, "VOXNERF_COLLECTIVE_TIMEOUT": "10"})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert checkpoint_step(out) >= 20, result.stderr
    assert f"rank 0 saved its latest state (step {checkpoint_step(out)})" in result.stderr or \
        f"checkpoint saved to {out / CHECKPOINT} at step {checkpoint_step(out)}" in result.stderr, result.stderr


def test_two_ranks_stop_together_on_a_signal_and_at_the_end_of_rank_0s_time_budget(scenes, tmp_path):
    """The stop requests and rank 0's clock travel with each step's gradients: a SIGTERM (to the launcher, which
    passes it on) and the time budget end both ranks at the same step, saved, with no collective left hanging (ranks
    that stopped apart would wait in different collectives until the timeout; a finished job also compares the
    ranks' fields before it exits 0)."""
    out = tmp_path / "signal"
    process = start("train", scenes[0], "--out", out, "--nproc", "2", *TINY, *LONG,
                    env={"VOXNERF_COLLECTIVE_TIMEOUT": "20"})
    wait_for_step(out, 30)
    process.send_signal(signal.SIGTERM)
    result = finish(process)
    assert result.returncode == 143, result.stderr
    assert "Traceback" not in result.stderr and "hung" not in result.stderr
    assert checkpoint_step(out) >= max(logged_steps(out)) >= 30
    timed = tmp_path / "timed"
    result = run("train", scenes[0], "--out", timed, "--nproc", "2", *TINY, "--max-time", "3",
                 env={"VOXNERF_COLLECTIVE_TIMEOUT": "20"})
    assert result.returncode == 0, result.stderr
    elapsed = torch.load(timed / CHECKPOINT, weights_only=False)["elapsed"]
    assert 3.0 <= elapsed < 4.5  # rank 0's training time: the budget, and at most part of a step more


FULL_DISK = """
import errno, os, sys
from voxnerf.cli.main import main

real_fdopen, saves = os.fdopen, []


class FullDisk:
    '''A file on a disk that fills up after 1000 bytes.'''

    def __init__(self, file):
        self.file, self.written = file, 0

    def write(self, data):
        self.written += len(data)
        if self.written > 1000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def fdopen(fd, mode="r", *args, **kwargs):
    file = real_fdopen(fd, mode, *args, **kwargs)
    if "w" in mode:
        saves.append(fd)
        if len(saves) > 1:  # the first checkpoint fits, the disk is full from the second on
            return FullDisk(file)
    return file


os.fdopen = fdopen
sys.argv = ["voxnerf", *sys.argv[1:]]
main()
"""


def test_a_full_disk_keeps_the_previous_checkpoint_and_says_so_in_one_line(scenes, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", FULL_DISK, "train", scenes[0], "--out", out, *TINY,
                             "--set", "checkpoint_every=10", "--max-steps", "100"], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.returncode == 2
    assert stderr_lines(result) == [f"voxnerf: error: {out}: no space left on the device while writing {CHECKPOINT} "
                                    f"(the previous {CHECKPOINT} is kept; free some space and continue with --resume)"]
    assert checkpoint_step(out) == 10
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


READER_LEAVES = """
import sys
from voxnerf.cli.main import main


class LeftPipe:
    '''stdout whose reader leaves once it has read 1000 characters (`voxnerf train --help | head -5`): the writes
    after that fail.'''

    def __init__(self, file):
        self.file, self.written = file, 0

    def write(self, data):
        if self.written >= 1000:
            raise BrokenPipeError(32, "Broken pipe")
        self.written += len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


sys.stdout = LeftPipe(sys.stdout)
sys.argv = ["voxnerf", *sys.argv[1:]]
main()
"""


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly():
    result = subprocess.run([sys.executable, "-c", READER_LEAVES, "train", "--help"], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.returncode == 141  # as a shell tool ended by SIGPIPE
    assert result.stderr == ""
