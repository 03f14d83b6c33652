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
from voxnerf.train.distributed import World, compare_fingerprints

STEPS = 300
HOOKS = Path(__file__).with_name("rank_hooks.py")
TINY = ["--quiet", "--device", "cpu",
        "--set", "levels=[{until: 0.3, resolution: 16, image_scale: 0.5}, {until: 1.0, resolution: 32, image_scale: 1.0}]",
        "--set", "optim.target_samples=16384", "--set", "optim.min_rays=256",
        "--set", "optim.max_rays=2048", "--set", "occupancy.warmup_steps=50", "--set", "log_every=50"]


def voxnerf(*args: str | Path, cwd: Path, timeout: float = 120, hooks: tuple = (),
            **env: str) -> subprocess.CompletedProcess:
    """`python -m voxnerf ARGS...` with one thread per process and extra environment variables; with `hooks`
    (options of tests/rank_hooks.py), through that file."""
    start = [HOOKS, *hooks, "--"] if hooks else ["-m", "voxnerf"]
    command = [sys.executable, *map(str, start), *map(str, args)]
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
                     *TINY, cwd=workdir, hooks=("--dump", workdir / "dumps"))
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
    dumps = workdir / "resumed"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(HOOKS), "--dump", str(dumps), "--", "train", str(scene_dir), "--out", "two", "--resume",
               "--max-steps", str(STEPS + 40), "--threads", "1", "--quiet", "--device", "cpu"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert torch.load(two_process_run / "checkpoint.pt", weights_only=False)["step"] == STEPS + 40
    assert_same_model(torch.load(dumps / "rank0.pt"), torch.load(dumps / "rank1.pt"))
    assert psnr_of(two_process_run) > 25


@pytest.mark.parametrize("fault, words", [("exit", ["worker 1 of 2 exited with status 3"]),
                                           ("hang", ["rank 0: read-row all-reduce (MAX) failed", "Timed out"])])
def test_a_worker_that_dies_or_hangs_ends_the_job_with_a_clear_message(fault, words, workdir: Path,
                                                                      scene_dir: Path):
    start = time.monotonic()
    result = voxnerf("train", scene_dir, "--out", f"fault-{fault}", "--nproc", "2", "--threads", "2",
                     "--max-steps", STEPS, *TINY, cwd=workdir, timeout=90, hooks=("--fault", f"1:20:{fault}"),
                     VOXNERF_COLLECTIVE_TIMEOUT="4")
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    launcher = [line for line in result.stderr.splitlines() if line.startswith("voxnerf: error: worker")]
    assert launcher == (["voxnerf: error: worker 1 of 2 exited with status 3; the other workers were stopped"]
                        if fault == "exit" else []), result.stderr
    assert time.monotonic() - start < 60


def gradients_on_rank(out: Path) -> int:
    """Rank body of the row-sparse all-reduce test. One row space holds three tables of 100 rows: rank r reads the
    first at rows r, r + 2, r + 4, ... (gradient 1 + r) and both ranks at row 1 (gradient 10); rank 1 alone reads
    the second (as features beside density) at row 50, which the first never reads; no rank reads the third. Rank 1
    leaves one small parameter without gradient; each rank counts 10 + r samples, rank 0 alone sends its clock and
    rank 1 alone a stop request (as the trainer does). Saves the reduced gradients, the summed statistics and the
    collectives run."""
    from voxnerf.fields.row_space import RowSpace
    from voxnerf.train.distributed import World, world_from_env

    collectives = []
    run = World._run
    World._run = lambda self, what, *args, **kwargs: (collectives.append(what), run(self, what, *args, **kwargs))
    with world_from_env(torch.device("cpu")) as world:
        table, column, idle = (torch.zeros(100, *shape, requires_grad=True) for shape in [(3,), (), (2,)])
        small, unused = torch.zeros(4, requires_grad=True), torch.zeros(2, requires_grad=True)
        space = RowSpace("test rows", {"table": table, "column": column, "idle": idle})
        rows = torch.arange(world.rank, 40, 2).unsqueeze(-1)  # (N, 1): a stencil of one row, weight 1
        loss = (1.0 + world.rank) * space.interpolate("table", rows, torch.ones(len(rows), 1)).sum()
        loss = loss + 10.0 * space.interpolate("table", torch.tensor([[1]]), torch.ones(1, 1)).sum()
        if world.rank == 1:
            loss = loss + 4.0 * space.interpolate("column", torch.tensor([[50]]), torch.ones(1, 1)).sum()
        loss.backward()
        space.close()
        small.grad = torch.full((4,), float(world.rank))
        unused.grad = torch.ones(2) if world.rank == 0 else None
        statistics = [10.0 + world.rank, 100.0 if world.is_main else 0.0, float(world.rank == 1)]
        counted = world.all_reduce_gradients([table, small, column, idle, unused], statistics, [space])
        torch.save({"table": table.grad, "column": column.grad, "idle": idle.grad, "small": small.grad,
                    "unused": unused.grad, "counted": counted, "collectives": collectives},
                   out / f"rank{world.rank}.pt")
    return 0


def test_the_gradient_all_reduce_sends_the_rows_read_and_gives_the_mean(tmp_path):
    from voxnerf.train.launch import launch_local

    assert launch_local(2, gradients_on_rank, tmp_path) == 0
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    expected = torch.zeros(ranks[0]["table"].shape)
    expected[0:40:2] += 1.0 / 2
    expected[1:40:2] += 2.0 / 2
    expected[1] += 10.0
    column = torch.zeros(ranks[0]["column"].shape)
    column[50] = 2.0  # a row of the shared mask that the other table never read, on one rank only
    for got in ranks:
        assert torch.equal(got["table"], expected)
        assert torch.equal(got["column"], column)
        assert got["idle"] is None  # no gradient on any rank: none after the exchange either
        assert torch.equal(got["small"], torch.full((4,), 0.5))
        assert torch.equal(got["unused"], torch.full((2,), 0.5))  # a gradient on one rank: the mean with zeros
        assert got["counted"] == [21.0, 100.0, 1.0]  # summed: the samples, rank 0's clock, rank 1's stop request
        assert got["collectives"] == ["read-row all-reduce (MAX)", "gradient all-reduce"]


def trainer_for(scene_dir: Path, out: Path, world: World | None = None):
    """A Trainer on the toy sphere at 32^3 with total variation on (its vertex pairs are reads too)."""
    from voxnerf.data import load_scene
    from voxnerf.run.config import load_config
    from voxnerf.train.trainer import Trainer

    cfg = load_config(None, [{"levels": [{"until": 1.0, "resolution": 32, "image_scale": 1.0}],
                              "occupancy": {"warmup_steps": 2}, "render": {"checkpoint_chunk": 1000},
                              "optim": {"target_samples": 8192, "tv_density": 1e-3, "tv_features": 1e-3}}])
    return Trainer(load_scene(scene_dir), cfg, out, torch.device("cpu"), quiet=True, world=world)


OUTSIDE_ROWS = torch.arange(3000, 3100)  # grid vertices a test loss reads straight from the table...
OUTSIDE_WEIGHT = 1000.0  # ...with a weight that dwarfs the rendering loss's gradient there


def reading_outside_the_declared_path(trainer) -> None:
    """Add to the trainer's loss a term that indexes the grid's features directly, not through its row space."""
    field = trainer.model.field
    regularization = field.regularization
    field.regularization = lambda optim, generator: (regularization(optim, generator)
                                                     + OUTSIDE_WEIGHT * field.grid.features[OUTSIDE_ROWS].sum())


def undeclared_read_on_rank(scene_dir: Path, out: Path) -> int:
    """Rank body: a training step whose loss reads grid rows outside the declared path; saves what it raised."""
    from voxnerf.train.distributed import world_from_env

    with world_from_env(torch.device("cpu")) as world:
        trainer = trainer_for(scene_dir, out / f"run{world.rank}", world)
        world.copy_from_main(trainer.model)
        reading_outside_the_declared_path(trainer)
        try:
            trainer.train_step()
            message = None
        except VoxnerfError as e:
            message = str(e)
        (out / f"rank{world.rank}.txt").write_text(repr(message))
    return 0


def test_a_loss_that_reads_grid_rows_outside_the_declared_path_stops_two_ranks_naming_the_table(scene_dir,
                                                                                                tmp_path):
    """Two ranks exchange the grid's gradient only at the rows its row space saw read; a loss that indexes the
    features table itself would have its other rows' gradients dropped (silently, before issue 42). Both ranks
    stop before the exchange with an error naming the table."""
    from voxnerf.train.launch import launch_local

    assert launch_local(2, undeclared_read_on_rank, scene_dir, tmp_path) == 0
    for rank in range(2):
        message = eval((tmp_path / f"rank{rank}.txt").read_text())
        assert message and message.startswith("the table 'features' (grid vertices) got a gradient from a read "
                                              "outside the field's declared reads"), message


def test_one_process_keeps_the_gradient_of_a_read_outside_the_declared_path(scene_dir, tmp_path):
    """A single process exchanges nothing, so a loss that indexes the table directly trains as it says: the
    gradient of the direct read is in the table's .grad beside the declared reads' gradient."""
    trainer = trainer_for(scene_dir, tmp_path)
    reading_outside_the_declared_path(trainer)
    features = trainer.model.field.grid.features
    seen = []

    def spy(parameters, statistics, spaces):
        (space,) = spaces
        assert space.undeclared == ["features"]
        seen.append(features.grad.clone())
        return list(statistics)

    trainer.world.all_reduce_gradients = spy
    trainer.train_step()
    (grad,) = seen
    direct = torch.zeros(len(grad), dtype=torch.bool).index_fill_(0, OUTSIDE_ROWS, True)
    assert (grad[direct] - OUTSIDE_WEIGHT).abs().max() < 1.0  # the direct read's gradient is there...
    assert grad[~direct].abs().max() < 1.0 and grad[~direct].abs().sum() > 0  # ...beside the declared reads'


def test_the_rows_a_step_reads_cover_every_nonzero_gradient_row(scene_dir, tmp_path):
    """The grid rows a training step read under autograd (`Field.row_spaces`: the samples' stencils, the total
    variation's vertex pairs, recomputed chunks under gradient checkpointing) include every row its loss gives a
    nonzero gradient, so ranks that exchange only those rows lose no gradient; and they are the rows exchanged."""

    trainer = trainer_for(scene_dir, tmp_path)
    grid = trainer.model.field.grid
    seen = []

    def spy(parameters, statistics, spaces):
        (space,) = spaces
        assert space.tables == {"density": grid.density, "features": grid.features} and not space.undeclared
        read = space.read_mask().bool()
        nonzero = (grid.density.grad != 0) | (grid.features.grad != 0).any(1)
        seen.append((int(read.sum()), int(nonzero.sum()), bool((nonzero & ~read).any())))
        return list(statistics)

    trainer.world.all_reduce_gradients = spy
    for _ in range(4):
        trainer.train_step()
        trainer.step += 1
    assert len(seen) == 4
    for read, nonzero, missed in seen:
        assert not missed and nonzero > 1000 and read <= 1.1 * nonzero, (read, nonzero)


def test_the_read_mask_is_the_rows_the_space_saw_read():
    from voxnerf.fields.row_space import RowSpace

    density, features = torch.zeros(100, requires_grad=True), torch.zeros(100, 4, requires_grad=True)
    space = RowSpace("vertices", {"density": density, "features": features})
    assert space.read_mask().sum() == 0
    space.interpolate("density", torch.tensor([[3], [3], [60]]), torch.ones(3, 1))
    with torch.no_grad():
        space.interpolate("features", torch.tensor([[5]]), torch.ones(1, 1))  # builds no graph: no gradient
    space.interpolate("features", torch.tensor([[7, 90]]), torch.ones(1, 2))
    space.close()
    assert space.read_mask().nonzero().squeeze(-1).tolist() == [3, 7, 60, 90]


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


@pytest.mark.parametrize("exitcode, line, status", [
    (3, "voxnerf: error: worker 1 of 2 exited with status 3; the other workers were stopped", 3),
    (-9, "voxnerf: error: worker 1 of 2 was killed by SIGKILL; the other workers were stopped", 1),
    (2, None, 2),  # the worker printed its own error line
    (143, None, 143),  # stopped by SIGTERM after saving, and said so
])
def test_a_failed_worker_gives_the_job_its_status_and_one_line_unless_it_said_why(exitcode, line, status, capsys):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from voxnerf.train.launch import failed_status

    assert failed_status(1, ProcessFailure(1, 4321, exitcode, "<N/A>"), 2) == status
    assert capsys.readouterr().err.splitlines() == ([line] if line else [])


def test_a_worker_that_raised_shows_its_traceback(capsys, tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from voxnerf.train.launch import failed_status

    stack = "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nRuntimeError: boom\n"
    error_file = tmp_path / "error.json"  # as torch's launcher records an exception in a worker
    error_file.write_text(json.dumps({"message": {"message": "RuntimeError: boom",
                                                  "extraInfo": {"py_callstack": stack, "timestamp": "0"}}}))
    assert failed_status(0, ProcessFailure(0, 4321, 1, str(error_file)), 2) == 1
    assert capsys.readouterr().err == f"voxnerf: error: worker 0 of 2 failed:\n{stack}\n"
