"""Optional multi-process training: the torchrun environment, the process group, and the few collectives the trainer
needs. A `World()` with the defaults is the single process, where every collective returns its input.

Gradients are averaged with an explicit all-reduce over the parameters' `.grad`, not with DistributedDataParallel.
DDP builds its reducer (gradient buckets, autograd hooks) once for a fixed set of parameters, but the grid's
`density` (V,) and `features` (V, C) are replaced by tensors of another length at every prune and subdivide;
DDP would need rebuilding at each topology change, and its broadcast of buffers would fight the occupancy state
we keep identical by construction. Two all-reduces per step after `backward()` (`World.all_reduce_gradients`) do
what DDP's reducer would, on whatever parameters exist at that step.

Every rank takes the same decisions: the initial field is seeded alike, gradients are the same after the
all-reduce (so Adam steps alike and parameters stay bit-identical), the occupancy statistic is reduced with MAX
before thresholding, and the schedule uses rank 0's clock (the trainer sends it with the gradients, as it does
the stop requests). `check_identical` compares a fingerprint of the field across ranks (at start, at each
topology change, at the end) and fails loudly if they have drifted apart.

Collectives run under a timeout (env VOXNERF_COLLECTIVE_TIMEOUT, seconds): a worker that dies or hangs ends the
job with a VoxnerfError (PeerLost) naming the collective instead of a job that waits forever; rank 0 saves its
latest state before it ends (`Trainer.train`).

Backend: gloo on CPU; NCCL on CUDA when each local rank has a GPU of its own (NCCL refuses two ranks on one GPU,
so ranks sharing a GPU fall back to gloo). The NCCL path is the same code with CUDA communication tensors.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

from voxnerf.errors import VoxnerfError

TIMEOUT_ENV = "VOXNERF_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # rank 0's evaluations at --eval-at times must fit in it: the other ranks wait meanwhile
FAULT_ENV = "VOXNERF_TEST_FAULT"  # tests only: "RANK:STEP:exit" or "RANK:STEP:hang" makes that rank fail there
DUMP_ENV = "VOXNERF_TEST_DUMP_RANKS"  # tests only: a folder where every rank saves its final field as rankR.pt
TOPOLOGY = ("state size", "integer state checksum", "occupied cells")
PARAMETERS = ("parameter sum", "float buffer sum")
CHECKSUM_PRIME = 2**31 - 1


class PeerLost(VoxnerfError):
    """A collective failed: another rank died or hung."""


def choose_backend(device: torch.device, local_world_size: int) -> str:
    """'nccl' for CUDA ranks that each have a GPU, else 'gloo' (CPU, or several ranks sharing a GPU)."""
    if device.type == "cuda" and torch.cuda.device_count() >= local_world_size and dist.is_nccl_available():
        return "nccl"
    return "gloo"


SPARSE_ROWS = 1 << 16  # parameters with this many rows or more are all-reduced row-sparse
NO_READS: Mapping[int, list[torch.Tensor]] = MappingProxyType({})  # no table says where it was read: scan them all


@dataclass
class World:
    """This process's place in the job and the collectives over all ranks; the defaults are the single process.

    Attributes:
        rank, size: this rank and the number of ranks.
        local_rank: the rank on this machine (which GPU it uses).
        device: the training device of this rank (None: the caller's choice, single process).
        backend: 'gloo' or 'nccl'; None when there is no process group.
        timeout_s: the collective timeout.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device | None = None
    backend: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes checkpoints, logs, progress and evaluations."""
        return self.rank == 0

    @property
    def comm_device(self) -> torch.device:
        """Where communication tensors live: the rank's GPU under NCCL, the CPU under gloo."""
        return self.device if self.backend == "nccl" else torch.device("cpu")

    # ---- what each rank does alone ------------------------------------------------------------------------
    def generator(self, seed: int, state: torch.Tensor | None = None, step: int = 0,
                  device: torch.device | str = "cpu") -> torch.Generator:
        """This rank's random stream (rays, jitter) on `device`, different on every rank.

        Rank 0 uses `seed` (and the checkpoint's `state` when resuming), exactly as a single process does. A stream
        that cannot be continued (rank r > 0, whose state the checkpoint does not hold, or a state saved by a
        generator on another kind of device) starts fresh at seed + r + size * step, which no rank has used before.
        """
        g = torch.Generator(device=device)
        if self.is_main and state is not None:
            g.set_state(state.cpu())
        else:
            g.manual_seed(seed + self.rank + self.size * step)
        return g

    # ---- collectives --------------------------------------------------------------------------------------
    def all_reduce_gradients(self, parameters, statistics: Sequence[float] = (),
                             reads: Mapping[int, list[torch.Tensor]] = NO_READS) -> list[float]:
        """Replace every parameter's .grad by its mean over the ranks, in two collectives; sum `statistics` alongside.

        Row tables of SPARSE_ROWS rows or more (the grid's density and features) send only the rows some rank
        touched: the rows the step read them at (`reads`, from `Field.recording_reads`), or else the rows of their
        gradients that are nonzero (a scan of the whole gradient). Tables with the same number of rows share one
        row space (density and features name the same grid vertices) and so one touched-row mask. The exchange is
        one MAX all-reduce of the masks (a byte per row), then one SUM all-reduce of everything else together:
        which parameters have a gradient, `statistics`, the small parameters' gradients (the MLP) and the touched
        rows of every table. Untouched rows are zero on every rank and stay so. A step's rays reach a small part
        of the grid, so this moves a fraction of the tables (issue 12), and the step's few numbers ride along
        instead of paying for collectives of their own.

        A parameter without a gradient on every rank keeps none (as a single process leaves it to Adam); one that
        has a gradient somewhere gets the mean with zeros for the ranks that have none. Under a GradScaler call it
        on the scaled gradients, before `scaler.step`: every rank then sees the same gradients, finds the same
        infs and updates its scale alike.

        Args:
            parameters: the model's parameters, in the same order on every rank.
            statistics: numbers of this rank's step to sum over the ranks (e.g. its sample count).
            reads: rows each row table was read at under autograd this step, by id of the table's parameter.
        Returns:
            `statistics` summed over the ranks in float32 (exact for integers below 2^24; a value only one rank
            sends comes back rounded to float32).
        """
        if self.size == 1:
            return list(statistics)
        params = list(parameters)
        groups: dict[int, list[torch.Tensor]] = {}
        for p in params:
            if p.dim() >= 1 and len(p) >= SPARSE_ROWS:
                groups.setdefault(len(p), []).append(p)
        tables = {id(p) for group in groups.values() for p in group}
        small = [p for p in params if id(p) not in tables]
        rows = self._touched_rows(list(groups.values()), reads)
        # what each parameter sends after the flags and statistics: all of a small one, its touched rows of a table
        entries = [(p, None, p.numel()) for p in small]
        entries += [(p, index, len(index) * math.prod(p.shape[1:]))
                    for group, index in zip(groups.values(), rows) for p in group]
        head = len(params) + len(statistics)
        flat = torch.empty(head + sum(n for *_, n in entries), dtype=torch.float32, device=self.comm_device)
        flat[:head] = torch.tensor([p.grad is not None for p in params] + list(statistics), dtype=torch.float32)
        offset = head
        for p, index, n in entries:
            _gather_into(flat[offset:offset + n], p.grad, index)
            offset += n
        self._run("gradient all-reduce", dist.all_reduce, flat)
        values = flat[:head].tolist()
        present = {id(p): v > 0 for p, v in zip(params, values)}  # a gradient on some rank
        flat /= self.size
        offset = head
        for p, index, n in entries:
            _scatter_from(flat[offset:offset + n], p, index, present[id(p)])
            offset += n
        for p in params:
            if not present[id(p)]:
                p.grad = None
        return values[len(params):]  # the statistics, summed

    def _touched_rows(self, groups: list[list[torch.Tensor]],
                      reads: Mapping[int, list[torch.Tensor]]) -> list[torch.Tensor]:
        """For each group of tables sharing a row count, the rows (K,) some rank touched: one MAX all-reduce of
        every group's one-byte mask (`_touched_mask`)."""
        masks = [_touched_mask(group, reads) for group in groups]
        if not masks:
            return []
        buf = torch.cat(masks).to(self.comm_device)
        self._run("touched-row all-reduce (MAX)", dist.all_reduce, buf, op=dist.ReduceOp.MAX)
        device = groups[0][0].device
        return [_rows_of(m).to(device) for m in torch.split(buf, [len(m) for m in masks])]

    def max_(self, t: torch.Tensor) -> torch.Tensor:
        """`t` replaced in place by its element-wise maximum over the ranks; returns it."""
        if self.size == 1:
            return t
        buf = t.to(self.comm_device)
        self._run("occupancy all-reduce (MAX)", dist.all_reduce, buf, op=dist.ReduceOp.MAX)
        if buf is not t:
            t.copy_(buf)
        return t

    def check_identical(self, model, when: str, topology_only: bool = False) -> None:
        """Raise VoxnerfError if any rank's model differs from rank 0's (see `model_fingerprint`)."""
        if self.size == 1:
            return
        mine = model_fingerprint(model).to(self.comm_device)
        gathered = [torch.empty_like(mine) for _ in range(self.size)]
        self._run(f"rank check at {when}", dist.all_gather, gathered, mine)
        compare_fingerprints(torch.stack(gathered).cpu(), when, topology_only)

    def copy_from_main(self, model) -> None:
        """Give every rank rank 0's parameters, as DDP does when it wraps a model.

        Needed at the start: the grid is seeded, but the decoder's initialization draws from each process's
        global random state. The ranks' topologies are checked first (a broadcast needs equal shapes).
        """
        if self.size == 1:
            return
        self.check_identical(model, "the start", topology_only=True)
        with torch.no_grad():
            for p in model.parameters():
                buf = p.detach().to(self.comm_device)
                self._run("broadcast of the initial parameters", dist.broadcast, buf, src=0)
                p.copy_(buf)

    def _run(self, what: str, collective: Callable, *args, **kwargs) -> None:
        try:
            collective(*args, **kwargs)
        except RuntimeError as e:  # gloo and NCCL report a lost peer or a timeout as RuntimeError subclasses
            raise PeerLost(
                f"rank {self.rank}: {what} failed: another worker died or hung (collective timeout "
                f"{self.timeout_s:g} s, {TIMEOUT_ENV}): {first_sentence(e)}") from None

    # ---- lifetime -----------------------------------------------------------------------------------------
    def __enter__(self) -> "World":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Leave the process group (a gloo group also after a failure, or the process aborts at exit; an NCCL
        group with work pending can hang there, so after a failure it is left to the process's end). After a
        normal end the ranks first meet at a barrier, so that none tears its connections down while a peer's last
        collective is still in flight (once seen as a rank aborting at exit under torchrun)."""
        if self.backend is None or not dist.is_initialized():
            return
        if exc_type is None:
            self._run("barrier at the end of the job", dist.barrier)
        if exc_type is None or self.backend == "gloo":
            dist.destroy_process_group()


@dataclass
class FaultyWorld(World):
    """Tests only (FAULT_ENV): a World whose rank exits or hangs at its `fault` = (step, 'exit' | 'hang'), counted
    in gradient reductions. Ordinary jobs never build one, so their collectives carry no test hook."""

    fault: tuple[int, str] = (0, "exit")
    steps: int = field(default=0, init=False)

    def all_reduce_gradients(self, parameters, statistics: Sequence[float] = (),
                             reads: Mapping[int, list[torch.Tensor]] = NO_READS) -> list[float]:
        self.steps += 1
        if self.steps == self.fault[0]:
            print(f"voxnerf: test fault: rank {self.rank} {self.fault[1]}s at step {self.steps}", file=sys.stderr,
                  flush=True)
            if self.fault[1] == "exit":
                os._exit(3)
            while True:
                time.sleep(60)
        return super().all_reduce_gradients(parameters, statistics, reads)


def _gather_into(out: torch.Tensor, grad: torch.Tensor | None, index: torch.Tensor | None) -> None:
    """Fill `out` (flat, float32, on the communication device) with the rows `index` of `grad` (all of it when
    index is None), or with zeros when there is no gradient; rows go straight into `out` where they can."""
    if grad is None:
        out.zero_()
    elif index is None:
        out.copy_(grad.reshape(-1))
    elif out.device == grad.device and out.dtype == grad.dtype:
        torch.index_select(grad, 0, index, out=out.view(len(index), *grad.shape[1:]))
    else:
        out.copy_(grad.index_select(0, index).reshape(-1))


def _scatter_from(mean: torch.Tensor, p: torch.Tensor, index: torch.Tensor | None, present: bool) -> None:
    """Set `p.grad` from `mean` (flat, as `_gather_into` packed it): the whole gradient when index is None, else its
    rows `index` (the other rows stay as they are: zero on every rank). A table with no gradient of its own gets a
    zero one first when some rank had one (`present`)."""
    if index is None:
        p.grad = mean.view_as(p).to(p.device, p.dtype)
        return
    if p.grad is None and present:
        p.grad = torch.zeros_like(p)
    if p.grad is not None:
        p.grad.index_copy_(0, index, mean.view(len(index), *p.shape[1:]).to(p.device, p.dtype))


def _rows_of(mask: torch.Tensor) -> torch.Tensor:
    """(K,) int64 positions of the nonzero bytes of a (V,) uint8 mask. On the CPU through numpy, whose nonzero of a
    bool array is ~8x faster than torch's (0.4 against 2.9 ms for 0.75M entries on one thread)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.contiguous().numpy().view(np.bool_)).astype(np.int64, copy=False))
    return torch.nonzero(mask).squeeze(-1)


def _touched_mask(tables: list[torch.Tensor], reads: Mapping[int, list[torch.Tensor]]) -> torch.Tensor:
    """(V,) uint8: 1 at the rows of `tables` (parameters sharing V rows) whose gradient may be nonzero. The rows they
    were read at when `reads` has them all (a scatter of a few hundred thousand indices), else the rows where a
    gradient is nonzero (a read of every gradient: ~10 ms for 0.75M x 13 floats on one CPU thread)."""
    num_rows, device = len(tables[0]), tables[0].device
    with_grad = [p for p in tables if p.grad is not None]
    if not all(id(p) in reads for p in with_grad):
        return _nonzero_rows([p.grad for p in with_grad], num_rows, device)
    lists = {id(reads[id(p)]): reads[id(p)] for p in with_grad}  # tables sharing their reads list them once
    rows = [r for read in lists.values() for r in read]
    mask = torch.zeros(num_rows, dtype=torch.uint8, device=device)
    return mask.index_fill_(0, torch.cat(rows).long(), 1) if rows else mask


def _nonzero_rows(grads: list[torch.Tensor], num_rows: int, device: torch.device) -> torch.Tensor:
    """(num_rows,) uint8: 1 where a row of any of `grads` (each (num_rows, ...)) has a nonzero entry. Rows are read
    as 8-byte words where they allow (faster than comparing floats; -0.0 counts as nonzero, which only sends a row
    more)."""
    touched = torch.zeros(num_rows, dtype=torch.bool, device=device)
    for grad in grads:
        rows = grad.reshape(num_rows, -1)
        if rows.is_contiguous() and rows.shape[1] * rows.element_size() % 8 == 0:
            rows = rows.view(torch.int64)
        touched |= rows.any(1)
    return touched.to(torch.uint8)


def model_fingerprint(model) -> torch.Tensor:
    """A cheap summary of a model (field and estimator), (5,) float64: the TOPOLOGY entries then the PARAMETERS.

    Integer and bool state (brick coordinates, occupancy) enters a checksum that weights each value by its
    position (mod a prime), so it sees both which bricks exist and their order (the order names the table rows).
    """
    size, checksum, params, buffers = 0, 0, 0.0, 0.0
    parameters = {id(p) for p in model.parameters()}
    for t in model.state_dict(keep_vars=True).values():
        size += t.numel()
        flat = t.detach().reshape(-1).cpu()
        if not flat.is_floating_point():
            position = torch.arange(1, len(flat) + 1)
            checksum = (checksum + int(((flat.long() * position) % CHECKSUM_PRIME).sum())) % CHECKSUM_PRIME
        elif id(t) in parameters:
            params += float(flat.double().sum())
        else:
            buffers += float(flat.double().sum())
    occupied = float(model.estimator.occupied.sum())
    return torch.tensor([size, checksum, occupied, params, buffers], dtype=torch.float64)


def compare_fingerprints(fingerprints: torch.Tensor, when: str, topology_only: bool = False,
                         rtol: float = 1e-6) -> None:
    """Raise VoxnerfError naming the first rank and quantity that differ from rank 0.

    Args:
        fingerprints: (ranks, 5) float64, one `model_fingerprint` per rank.
        when: where in training the check runs (for the message).
        topology_only: compare the TOPOLOGY entries only.
        rtol: relative tolerance of the parameter sums (the topology entries must be equal).
    """
    reference = fingerprints[0]
    names = TOPOLOGY if topology_only else TOPOLOGY + PARAMETERS
    for rank, row in enumerate(fingerprints[1:], start=1):
        for i, name in enumerate(names):
            exact = i < len(TOPOLOGY)
            a, b = row[i].item(), reference[i].item()
            if (a != b) if exact else abs(a - b) > rtol * max(abs(a), abs(b), 1.0):
                raise VoxnerfError(
                    f"ranks diverged at {when}: rank {rank} has {name} {a:.10g}, rank 0 has {b:.10g} (every rank "
                    f"must take the same topology decisions; was the scene or config different on some machine?)")


def first_sentence(error: Exception) -> str:
    """The gist of a backend error: its first sentence, without the '[source.cc:123] ' prefix gloo adds."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip())
    return text.split(". ")[0].splitlines()[0] if text else type(error).__name__


def parse_fault(text: str | None, rank: int) -> tuple[int, str] | None:
    """FAULT_ENV 'RANK:STEP:exit|hang' -> (STEP, kind) when it names this rank, else None."""
    if not text:
        return None
    try:
        target, step, kind = text.split(":")
        if kind not in ("exit", "hang"):
            raise ValueError
        return (int(step), kind) if int(target) == rank else None
    except ValueError:
        raise VoxnerfError(f"{FAULT_ENV}={text}: expected RANK:STEP:exit or RANK:STEP:hang") from None


def timeout_from_env() -> float:
    """The collective timeout in seconds: TIMEOUT_ENV, else DEFAULT_TIMEOUT_S."""
    text = os.environ.get(TIMEOUT_ENV)
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if value <= 0:
        raise VoxnerfError(f"{TIMEOUT_ENV}={text}: expected a positive number of seconds")
    return value


def world_from_env(device: torch.device) -> World:
    """The World this process belongs to: a torchrun job (RANK, WORLD_SIZE, LOCAL_RANK set) or a single process.

    Under torchrun this joins the process group: CUDA ranks take GPU LOCAL_RANK (modulo the GPUs present).
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(device=device)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    backend, timeout = choose_backend(device, local_size), timeout_from_env()
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as e:
        raise VoxnerfError(f"rank {rank}: could not join the {size}-process job ({backend}): {e}") from None
    fault = parse_fault(os.environ.get(FAULT_ENV), rank)
    if fault is not None:
        return FaultyWorld(rank, size, local_rank, device, backend, timeout, fault)
    return World(rank, size, local_rank, device, backend, timeout)


def dump_rank_state(model, world: World) -> None:
    """Tests only: with DUMP_ENV set, save this rank's final model to DUMP_ENV/rank{R}.pt."""
    folder = os.environ.get(DUMP_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        torch.save(model.state(), Path(folder) / f"rank{world.rank}.pt")


# ---- launching N local workers (`voxnerf train --nproc N`) ------------------------------------------------------
def free_port() -> int:
    """A TCP port free on this machine now (for the local rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(index: int, nproc: int, port: int, fn: Callable[..., int], args: tuple) -> None:
    """One spawned rank: the torchrun environment, then `fn(*args)`; its return value is the exit status."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(index), LOCAL_RANK=str(index),
                      WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
    try:
        code = fn(*args)
    except VoxnerfError as e:
        print(f"voxnerf: error: {e}", file=sys.stderr, flush=True)
        code = 2
    except KeyboardInterrupt:  # Ctrl-C before training started (training itself stops and saves)
        code = 130
    sys.stdout.flush()
    sys.exit(code)


def launch_local(nproc: int, fn: Callable[..., int], *args) -> int:
    """Run `fn(*args)` in `nproc` spawned processes as ranks 0..nproc-1 of one job, as torchrun does on one node.

    `fn` must be importable (it is pickled by name) and returns the worker's exit status. When one worker fails,
    the others are stopped. Ctrl-C reaches every worker (they checkpoint and exit), and this waits for them.

    Returns:
        0 when every worker succeeded, else the failed worker's exit status; a worker killed by a signal or one
        exiting with another status than 2 (a reported error), 130 or 143 (stopped by SIGINT or SIGTERM, after
        saving) is reported on stderr. SIGTERM to this process reaches the workers.
    """
    from torch.multiprocessing import start_processes

    context = start_processes(_worker, args=(nproc, free_port(), fn, args), nprocs=nproc, join=False,
                              start_method="spawn")
    with forward_sigterm(context.processes):
        return _join(context, nproc)


@contextlib.contextmanager
def forward_sigterm(processes: list):
    """While entered (in the main thread), SIGTERM to this process is passed on to the live `processes` (which
    save and exit) instead of ending it before them."""
    def forward(signum, frame):
        for process in processes:
            if process.is_alive():
                process.terminate()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _join(context, nproc: int) -> int:
    """Wait for the workers of `context` (see `launch_local`); returns the job's exit status."""
    from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

    while True:
        try:
            if context.join():
                return 0
        except KeyboardInterrupt:
            continue
        except ProcessExitedException as e:
            if e.signal_name or e.exit_code not in (2, 130, 143):
                how = f"was killed by {e.signal_name}" if e.signal_name else f"exited with status {e.exit_code}"
                print(f"voxnerf: error: worker {e.error_index} of {nproc} {how}; the other workers were stopped",
                      file=sys.stderr, flush=True)
            return 1 if e.signal_name else e.exit_code
        except ProcessRaisedException as e:
            print(f"voxnerf: error: worker {e.error_index} of {nproc} failed:\n{e}", file=sys.stderr, flush=True)
            return 1
