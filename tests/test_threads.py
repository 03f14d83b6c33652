"""The thread policy every command that runs torch follows (voxnerf.system.threads): `--threads N` fixes the count,
else one thread per core that other processes leave free, rechecked during the work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import voxnerf.scenes as toy_scenes
from voxnerf.errors import VoxnerfError
from voxnerf.export import query
from voxnerf.export.query import log_density
from voxnerf.run.load import load_run
from voxnerf.system import threads
from voxnerf.system.threads import ThreadBudget, free_cores
from voxnerf.train.session import train_run
from voxnerf.cli import options
from voxnerf.cli.main import run as voxnerf

N_TEST = 3
SETS = ["levels=[{until: 1.0, resolution: 16, image_scale: 1.0}]", "optim.target_samples=4096",
        "eval_every_view=1"]


class Machine:
    """A stand-in for /proc/stat and the clocks of `voxnerf.system.threads`: other processes keep `others` of every
    one of our cores busy, this process uses no CPU, and each clock reading is `tick` (default RECHECK_S) later than
    the last."""

    def __init__(self, others: float, tick: float = threads.RECHECK_S):
        self.others, self.reads, self.now, self.tick = others, 0, 0.0, tick

    def read_text(self) -> str:
        self.reads += 1
        busy, idle = round(100 * self.others * self.reads), round(100 * (1 - self.others) * self.reads)
        cores = [f"cpu{c} {busy} 0 0 {idle} 0 0 0 0" for c in sorted(os.sched_getaffinity(0))]
        return "\n".join([f"cpu {busy} 0 0 {idle} 0 0 0 0", *cores, "intr 0"]) + "\n"

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now

    def process_time(self) -> float:
        return 0.0


@pytest.fixture(autouse=True)
def own_policy(monkeypatch):
    """Each test starts without a process policy and leaves torch's thread count as it found it."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_policy", None)
    yield
    torch.set_num_threads(before)


def on_machine(monkeypatch, others: float, clock: bool = True) -> Machine:
    """`Machine(others)` as /proc/stat (and, with `clock`, as the clocks) for the rest of the test."""
    machine = Machine(others)
    monkeypatch.setattr(threads, "PROC_STAT", machine)
    if clock:
        monkeypatch.setattr(threads, "time", machine)
    return machine


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run of a few steps on a 16-pixel toy scene with N_TEST test views."""
    root = tmp_path_factory.mktemp("threads")
    scene = toy_scenes.make_scene("sphere", root / "sphere", n_train=4, n_val=0, n_test=N_TEST, size=16,
                                  n_samples=64)
    return train_run(scene, None, root / "run", device="cpu", sets=SETS, max_steps=3, threads=1, quiet=True).out


def test_threads_follow_the_cores_other_processes_leave_free():
    assert [free_cores(busy, 2) for busy in (0.0, 0.2, 0.5, 1.0, 1.9)] == [2, 2, 1, 1, 1]
    assert [free_cores(busy, 8) for busy in (0.0, 2.2, 7.9)] == [8, 6, 1]


@pytest.mark.parametrize("others, start, expected", [(1.0, 2, 1), (0.0, 1, len(os.sched_getaffinity(0)))])
def test_the_default_takes_one_thread_per_core_that_others_leave_free(monkeypatch, others, start, expected):
    on_machine(monkeypatch, others)
    torch.set_num_threads(start)
    ThreadBudget(0).adjust()
    assert torch.get_num_threads() == expected


def test_a_fixed_thread_count_is_kept_however_busy_the_cores_are(monkeypatch):
    on_machine(monkeypatch, others=1.0)
    budget = ThreadBudget(2)
    budget.adjust()
    assert torch.get_num_threads() == 2


def test_the_first_look_comes_soon_after_the_start_then_every_recheck_interval(monkeypatch):
    machine = on_machine(monkeypatch, others=1.0)
    machine.tick = 0.75 * threads.FIRST_LOOK_S
    torch.set_num_threads(2)
    budget = ThreadBudget(0)  # its first look: read 1 at clock tick 1
    budget.adjust()  # tick 2, 0.75 x FIRST_LOOK_S later: too soon
    assert (machine.reads, torch.get_num_threads()) == (1, 2)
    budget.adjust()  # tick 3, 1.5 x FIRST_LOOK_S after the start: the first look at the others
    assert (machine.reads, torch.get_num_threads()) == (2, 1)
    machine.tick = 0.5 * threads.RECHECK_S
    budget.adjust()  # half the recheck interval later: nothing read
    assert machine.reads == 2
    budget.adjust()
    assert machine.reads == 3


def test_a_recheck_reads_proc_stat_at_most_every_recheck_interval(monkeypatch):
    machine = on_machine(monkeypatch, others=1.0, clock=False)  # the real clock: the calls take far less than 2 s
    threads.thread_policy(0)
    for _ in range(100):
        threads.recheck_threads()
    assert machine.reads == 1  # the policy's first look only


@pytest.mark.parametrize("command", [["eval"], ["render"], ["export", "--mesh", "m.ply"], ["viewer"]])
@pytest.mark.parametrize("given, fixed", [([], 0), (["--threads", "1"], 1)])
def test_every_command_sets_the_policy_before_loading_the_run(monkeypatch, tmp_path, command, given, fixed):
    chosen = []
    monkeypatch.setattr(options, "thread_policy", lambda n: chosen.append(n) or threads.thread_policy(n))
    torch.set_num_threads(2)
    with pytest.raises(VoxnerfError, match="no-run"):
        voxnerf([command[0], str(tmp_path / "no-run"), *command[1:], *given])
    assert chosen == [fixed]
    assert torch.get_num_threads() == (1 if fixed else 2)


def test_threads_below_one_are_refused_in_one_place():
    with pytest.raises(VoxnerfError, match="--threads 0: expected at least 1"):
        options.use_threads(0)


@pytest.mark.parametrize("given, expected", [([], 1), (["--threads", "2"], 2)])
def test_eval_rechecks_the_free_cores_between_its_views(monkeypatch, run_dir, given, expected):
    machine = on_machine(monkeypatch, others=1.0)  # every core busy with other work: one thread, unless fixed
    torch.set_num_threads(2)
    assert voxnerf(["eval", str(run_dir), "--device", "cpu", "--quiet", *given]) == 0
    assert torch.get_num_threads() == expected
    if not given:
        assert machine.reads > N_TEST  # the first look, then at least one per rendered view



def test_exports_recheck_the_free_cores_between_density_chunks(monkeypatch, run_dir):
    model = load_run(run_dir, device="cpu").model
    machine = on_machine(monkeypatch, others=1.0)
    torch.set_num_threads(2)
    threads.thread_policy(0)
    log_density(model, np.zeros((3 * query.CHUNK, 3), np.float32))  # marching cubes and --iso auto query this way
    assert torch.get_num_threads() == 1
    assert machine.reads == 1 + 3  # the policy's first look, then one before each chunk
