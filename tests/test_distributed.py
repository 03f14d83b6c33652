"""Distributed training on CPU (gloo): `voxnerf train --nproc 2` and torchrun keep every rank identical, match a
single process's quality, resume, and end cleanly when a worker dies or hangs.

Each run starts real processes with one thread each on a tiny toy scene (32 px, a 16^3 then 32^3 grid), so the
module stays around a minute on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import voxnerf.scenes as toy_scenes
from voxnerf.errors import VoxnerfError
from voxnerf.train.distributed import World, compare_fingerprints, parse_fault

STEPS = 300
TINY = ["--quiet", "--device", "cpu",
        "--set", "levels=[{until: 0.3, resolution: 16, image_scale: 0.5}, {until: 1.0, resolution: 32, image_scale: 1.0}]",
        "--set", "optim.target_samples=16384", "--set", "optim.min_rays=256",
        "--set", "optim.max_rays=2048", "--set", "occupancy.warmup_steps=50", "--set", "log_every=50"]


def voxnerf(*args: str | Path, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """`python -m voxnerf ARGS...` with one thread per process and extra environment variables."""
    command = [sys.executable, "-m", "voxnerf", *map(str, args)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=environment)


def psnr_of(run: Path) -> float:
    """The mean test PSNR a run folder's eval.json reports."""
    return json.loads((run / "eval.json").read_text())["mean"]["psnr"]


def assert_same_model(a: dict, b: dict) -> None:
    """Two saved models (voxnerf.render.model.Model.state) hold bit-identical topology, occupancy and parameters."""
    assert a["field"]["grid_resolution"] == b["field"]["grid_resolution"]
    assert a["estimator"]["resolution"] == b["estimator"]["resolution"]
    for part in (a["field"]["tensors"], a["estimator"]):
        other = b["field"]["tensors"] if part is a["field"]["tensors"] else b["estimator"]
        for key, value in part.items():
            if torch.is_tensor(value):
                assert torch.equal(value, other[key]), f"{key} differs"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("distributed")


@pytest.fixture(scope="module")
def scene_dir(workdir: Path) -> Path:
    return toy_scenes.make_scene("sphere", workdir / "sphere", n_train=20, n_val=2, n_test=2, size=32,
                                 n_samples=128)


@pytest.fixture(scope="module")
def two_process_run(workdir: Path, scene_dir: Path) -> Path:
    """A 2-process run (each rank saves its final field to dumps/), then its run folder."""
    result = voxnerf("train", scene_dir, "--out", "two", "--nproc", "2", "--threads", "2", "--max-steps", STEPS,
                     *TINY, cwd=workdir, VOXNERF_TEST_DUMP_RANKS=str(workdir / "dumps"))
    assert result.returncode == 0, result.stderr
    assert "test  PSNR" in result.stdout and result.stdout.count("checkpoint  ") == 1  # rank 0 alone reports
    return workdir / "two"


def test_both_ranks_end_with_identical_parameters_and_topology(two_process_run: Path, workdir: Path):
    rank0 = torch.load(workdir / "dumps" / "rank0.pt")
    rank1 = torch.load(workdir / "dumps" / "rank1.pt")
    assert rank0["field"]["grid_resolution"] == 32  # the run went through a subdivision (and the prune before it)
    assert_same_model(rank0, rank1)
    checkpoint = torch.load(two_process_run / "checkpoint.pt", weights_only=False)
    assert checkpoint["step"] == STEPS
    assert_same_model(checkpoint["model"], rank0)


def test_two_processes_reach_the_quality_of_one_training_on_their_global_batch(two_process_run: Path,
                                                                             workdir: Path, scene_dir: Path):
    """Each rank draws a full batch, so two ranks step on twice the rays of one: a single process given that
    global batch and the rules two ranks follow (learning rates x 2 by the CPU preset's linear rule, occupancy
    schedule counted in rays) reaches the same quality."""
    doubled = ["--set", "optim.target_samples=32768", "--set", "optim.min_rays=512", "--set", "optim.max_rays=4096",
               "--set", "optim.lr_grid=0.2", "--set", "optim.lr_decoder=0.002",
               "--set", "occupancy.warmup_steps=25", "--set", f"occupancy.decay={0.95 ** 2}"]
    result = voxnerf("train", scene_dir, "--out", "one", "--threads", "1", "--max-steps", STEPS, *TINY, *doubled,
                     cwd=workdir)
    assert result.returncode == 0, result.stderr
    one, two = psnr_of(workdir / "one"), psnr_of(two_process_run)
    assert one > 25 and abs(one - two) < 0.5, (one, two)


def test_torchrun_resumes_a_distributed_run(two_process_run: Path, workdir: Path, scene_dir: Path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "voxnerf", "train", str(scene_dir), "--out", "two", "--resume", "--max-steps", str(STEPS + 40),
               "--threads", "1", "--quiet", "--device", "cpu"]
    dumps = workdir / "resumed"
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "VOXNERF_TEST_DUMP_RANKS": str(dumps)})
    assert result.returncode == 0, result.stderr
    assert torch.load(two_process_run / "checkpoint.pt", weights_only=False)["step"] == STEPS + 40
    assert_same_model(torch.load(dumps / "rank0.pt"), torch.load(dumps / "rank1.pt"))
    assert psnr_of(two_process_run) > 25


@pytest.mark.parametrize("fault, words", [("exit", ["worker 1 of 2 exited with status 3"]),
                                           ("hang", ["rank 0: gradient all-reduce failed", "Timed out"])])
def test_a_worker_that_dies_or_hangs_ends_the_job_with_a_clear_message(fault, words, workdir: Path,
                                                                      scene_dir: Path):
    start = time.monotonic()
    result = voxnerf("train", scene_dir, "--out", f"fault-{fault}", "--nproc", "2", "--threads", "2",
                     "--max-steps", STEPS, *TINY, cwd=workdir, timeout=90,
                     VOXNERF_TEST_FAULT=f"1:20:{fault}", VOXNERF_COLLECTIVE_TIMEOUT="4")
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - start < 60


def gradients_on_rank(out: Path) -> int:
    """Rank body of the row-sparse all-reduce test: rank r touches rows r, r + 2, r + 4, ... of a large table and
    row 1 of both; a second table of the same rows (as density beside features) has its row 50 touched by rank 1
    alone and no gradient on rank 0; a third has a gradient on no rank; rank 1 leaves one small parameter without
    gradient; each rank counts 10 + r samples, rank 0 alone sends its clock and rank 1 alone a stop request (as the
    trainer does). Rank 0 says which rows it read the large table at (as a grid does), rank 1 leaves its gradients
    to be scanned. Saves the reduced gradients, the summed statistics and the collectives run."""
    from voxnerf.train.distributed import SPARSE_ROWS, World, world_from_env

    collectives = []
    run = World._run
    World._run = lambda self, what, *args, **kwargs: (collectives.append(what), run(self, what, *args, **kwargs))
    with world_from_env(torch.device("cpu")) as world:
        table = torch.zeros(SPARSE_ROWS + 10, 3, requires_grad=True)
        column = torch.zeros(SPARSE_ROWS + 10, requires_grad=True)
        idle = torch.zeros(SPARSE_ROWS + 10, 2, requires_grad=True)
        small, unused = torch.zeros(4, requires_grad=True), torch.zeros(2, requires_grad=True)
        rows = torch.arange(world.rank, 40, 2)
        table.grad = torch.zeros_like(table).index_fill_(0, rows, 1.0 + world.rank)
        table.grad[1] += 10.0
        if world.rank == 1:
            column.grad = torch.zeros_like(column)
            column.grad[50] = 4.0
        small.grad = torch.full((4,), float(world.rank))
        unused.grad = torch.ones(2) if world.rank == 0 else None
        statistics = [10.0 + world.rank, 100.0 if world.is_main else 0.0, float(world.rank == 1)]
        reads = {id(table): [rows, torch.tensor([1, 1])]} if world.is_main else {}
        counted = world.all_reduce_gradients([table, small, column, idle, unused], statistics, reads)
        torch.save({"table": table.grad, "column": column.grad, "idle": idle.grad, "small": small.grad,
                    "unused": unused.grad, "counted": counted, "collectives": collectives},
                   out / f"rank{world.rank}.pt")
    return 0


def test_the_gradient_all_reduce_sends_touched_rows_and_gives_the_mean(tmp_path):
    from voxnerf.train.distributed import launch_local

    assert launch_local(2, gradients_on_rank, tmp_path) == 0
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    expected = torch.zeros(ranks[0]["table"].shape)
    expected[0:40:2] += 1.0 / 2
    expected[1:40:2] += 2.0 / 2
    expected[1] += 10.0
    column = torch.zeros(ranks[0]["column"].shape)
    column[50] = 2.0  # a row of the shared mask that the other table never touched, on one rank only
    for got in ranks:
        assert torch.equal(got["table"], expected)
        assert torch.equal(got["column"], column)
        assert got["idle"] is None  # no gradient on any rank: none after the exchange either
        assert torch.equal(got["small"], torch.full((4,), 0.5))
        assert torch.equal(got["unused"], torch.full((2,), 0.5))  # a gradient on one rank: the mean with zeros
        assert got["counted"] == [21.0, 100.0, 1.0]  # summed: the samples, rank 0's clock, rank 1's stop request
        assert len(got["collectives"]) == 2  # one MAX of the shared mask, one SUM of everything else


def test_the_rows_a_step_reads_cover_every_nonzero_gradient_row(scene_dir, tmp_path):
    """The grid rows a training step read under autograd (`Field.recording_reads`: the samples' stencils, the total
    variation's vertex pairs, recomputed chunks under gradient checkpointing) include every row its loss gives a
    nonzero gradient, so ranks that exchange only those rows lose no gradient; and they are the rows exchanged."""
    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train.distributed import _nonzero_rows, _touched_mask
    from voxnerf.train.trainer import Trainer

    cfg = load_config(None, [{"levels": [{"until": 1.0, "resolution": 32, "image_scale": 1.0}],
                              "occupancy": {"warmup_steps": 2}, "render": {"checkpoint_chunk": 1000},
                              "optim": {"target_samples": 8192, "tv_density": 1e-3, "tv_features": 1e-3}}])
    trainer = Trainer(load_scene(scene_dir), cfg, tmp_path, torch.device("cpu"), quiet=True)
    grid = trainer.model.field.grid
    seen = []

    def spy(parameters, statistics, reads):
        assert set(reads) == {id(grid.density), id(grid.features)}
        read = _touched_mask([grid.density, grid.features], reads).bool()
        nonzero = _nonzero_rows([grid.density.grad, grid.features.grad], len(grid.density), read.device).bool()
        seen.append((int(read.sum()), int(nonzero.sum()), bool((nonzero & ~read).any())))
        return list(statistics)

    trainer.world.all_reduce_gradients = spy
    for _ in range(4):
        trainer.train_step()
        trainer.step += 1
    assert len(seen) == 4
    for read, nonzero, missed in seen:
        assert not missed and nonzero > 1000 and read <= 1.1 * nonzero, (read, nonzero)


def test_the_touched_mask_is_the_rows_read_when_every_table_with_a_gradient_reports_its_reads():
    from voxnerf.train.distributed import _touched_mask

    density, features = torch.zeros(100, requires_grad=True), torch.zeros(100, 4, requires_grad=True)
    density.grad, features.grad = torch.zeros(100), torch.zeros(100, 4)
    density.grad[[3, 60]] = 1.0
    features.grad[7, 2] = -1.0
    reads = [torch.tensor([3, 3, 60]), torch.tensor([7, 90])]  # row 90 was read, its gradient happens to be 0
    read = _touched_mask([density, features], {id(density): reads, id(features): reads})
    assert read.nonzero().squeeze(-1).tolist() == [3, 7, 60, 90]
    scanned = _touched_mask([density, features], {id(density): reads})  # features did not say: scan both
    assert scanned.nonzero().squeeze(-1).tolist() == [3, 7, 60]
    features.grad = None
    assert _touched_mask([density, features], {id(density): reads}).sum() == 4  # no gradient, nothing to say


def test_a_step_of_n_ranks_counts_in_rays_for_the_occupancy_schedule_and_the_learning_rates(scene_dir, tmp_path):
    """N ranks step on N batches: warm-up ends after the same rays, an update decays scores as far as N single
    updates, and the learning rates grow with sqrt(N) (the default rule) or N (`optim.lr_ranks: linear`)."""
    from voxnerf.data import load_scene
    from voxnerf.render.occupancy import OccupancyConfig
    from voxnerf.run.config import load_config
    from voxnerf.train.strategy import occupancy_for_ranks
    from voxnerf.train.trainer import Trainer

    cfg = OccupancyConfig(warmup_steps=101, update_every=16, decay=0.9)
    assert occupancy_for_ranks(cfg, 1) == cfg
    two = occupancy_for_ranks(cfg, 2)
    assert (two.warmup_steps, two.update_every, two.decay) == (51, 16, pytest.approx(0.81))
    rates = {}
    for rule, size in [("sqrt", 1), ("sqrt", 4), ("linear", 4)]:
        cfg = load_config(None, [{"optim": {"lr_ranks": rule}}])
        trainer = Trainer(load_scene(scene_dir), cfg, tmp_path, torch.device("cpu"), quiet=True,
                          world=World(rank=0, size=size))
        trainer._set_learning_rates(0.0)
        rates[rule, size] = [group["lr"] for group in trainer.optimizer.param_groups]
        assert trainer.strategy.occupancy == occupancy_for_ranks(trainer.cfg.occupancy, size)
    assert rates["sqrt", 4] == pytest.approx([2 * lr for lr in rates["sqrt", 1]])
    assert rates["linear", 4] == pytest.approx([4 * lr for lr in rates["sqrt", 1]])


def draws(generator: torch.Generator) -> list[int]:
    return torch.randint(0, 2**30, (4,), generator=generator).tolist()


def test_every_rank_draws_its_own_rays_and_rank_0_draws_what_one_process_would():
    single = World().generator(7)
    ranks = [World(rank=r, size=2).generator(7) for r in range(2)]
    assert draws(ranks[0]) == draws(single) != draws(ranks[1])
    state = single.get_state()
    resumed = [World(rank=r, size=2).generator(7, state, step=100) for r in range(2)]
    assert draws(resumed[0]) == draws(single)  # rank 0 continues the checkpoint's stream
    assert draws(resumed[1]) not in (draws(World(rank=1, size=2).generator(7)), draws(resumed[0]))


def test_fingerprints_that_differ_name_the_rank_and_the_quantity():
    reference = torch.tensor([54272.0, 12345, 900, 1.5, 40.0], dtype=torch.float64)
    near = reference.clone()
    near[3:] *= 1 + 1e-9  # parameter sums agree within float tolerance
    compare_fingerprints(torch.stack([reference, reference, near]), "step 3")
    bricks = reference.clone()
    bricks[0] += 512
    with pytest.raises(VoxnerfError, match="rank 2 has state size 54784.*rank 0 has 54272"):
        compare_fingerprints(torch.stack([reference, reference, bricks]), "step 3")
    features = reference.clone()
    features[3] += 0.01
    with pytest.raises(VoxnerfError, match="at step 3: rank 1 has parameter sum"):
        compare_fingerprints(torch.stack([reference, features]), "step 3")
    compare_fingerprints(torch.stack([reference, features]), "step 3", topology_only=True)


def test_a_malformed_fault_hook_is_refused():
    assert parse_fault("1:20:exit", rank=1) == (20, "exit") and parse_fault("1:20:exit", rank=0) is None
    with pytest.raises(VoxnerfError, match="VOXNERF_TEST_FAULT"):
        parse_fault("1:twenty:exit", rank=1)
