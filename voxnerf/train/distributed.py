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

import datetime
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from voxnerf.errors import VoxnerfError
from voxnerf.fields.row_space import RowSpace

TIMEOUT_ENV = "VOXNERF_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # rank 0's evaluations at --eval-at times must fit in it: the other ranks wait meanwhile
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
                             spaces: Sequence[RowSpace] = ()) -> list[float]:
        """Replace every parameter's .grad by its mean over the ranks, in two collectives and one host read; sum
        `statistics` alongside.

        The tables of the field's row spaces (`spaces`, from `Field.row_spaces`: the grid's density and features)
        send only the rows some rank read this step; every other parameter is sent whole. First the ranks agree on
        what moves (`_agree`: one MAX all-reduce of a byte buffer, read once on the host): the rows some rank read,
        which parameters have a gradient somewhere, and every rank's statistics. Then one SUM all-reduce carries
        the gradients: the other parameters' (the MLP) whole, the tables' at those rows. Rows no rank read have a
        zero gradient on every rank and keep it. A step's rays reach a small part of the grid, so this moves a
        fraction of the tables (benchmarks/log/2026-11-23-cuda-path-and-ranks.md). A table that got a gradient
        outside the declared reads (`RowSpace.undeclared`) would lose rows: that is an error naming the table.

        A parameter without a gradient on every rank keeps none (as a single process leaves it to Adam); one that
        has a gradient somewhere gets the mean with zeros for the ranks that have none. Under a GradScaler call it
        on the scaled gradients, before `scaler.step`: every rank then sees the same gradients, finds the same
        infs and updates its scale alike.

        Args:
            parameters: the model's parameters, in the same order on every rank (the spaces' tables among them).
            statistics: numbers of this rank's step to sum over the ranks (e.g. its sample count).
            spaces: the field's row spaces, their reads noted, in the same order on every rank.
        Returns:
            `statistics` summed over the ranks (in float64).
        """
        if self.size == 1:
            return list(statistics)
        for space in spaces:
            check_declared(space)
        params = list(parameters)
        rows, present, summed = self._agree(params, statistics, spaces)
        tables = {id(p) for space in spaces for p in space.tables.values()}
        # what each parameter sends: all of an ordinary one, the read rows of a table
        entries = [(p, None, p.numel()) for p in params if id(p) not in tables]
        entries += [(p, index, len(index) * math.prod(p.shape[1:]))
                    for space, index in zip(spaces, rows) for p in space.tables.values()]
        flat = torch.empty(sum(n for *_, n in entries), dtype=torch.float32, device=self.comm_device)
        offset = 0
        for p, index, n in entries:
            _gather_into(flat[offset:offset + n], p.grad, index)
            offset += n
        self._run("gradient all-reduce", dist.all_reduce, flat)
        flat /= self.size
        offset = 0
        for p, index, n in entries:
            _scatter_from(flat[offset:offset + n], p, index, present[id(p)])
            offset += n
        for p in params:
            if not present[id(p)]:
                p.grad = None
        return summed

    def _agree(self, params: list[torch.Tensor], statistics: Sequence[float], spaces: Sequence[RowSpace]
               ) -> tuple[list[torch.Tensor], dict[int, bool], list[float]]:
        """What the gradient all-reduce moves, agreed on in one MAX all-reduce of a byte buffer and one read of it
        on the host (`_to_host`): each space's read-row mask (`RowSpace.read_mask`, a byte per row), a byte per
        parameter (it has a gradient), and the statistics of every rank as float64 bytes in a slot of its own (the
        other ranks send zeros there, so the byte-wise maximum is the sender's value).

        Returns:
            the rows (K,) int64 of each space some rank read, on the space's device; whether each parameter (by
            id) has a gradient on some rank; the statistics summed over the ranks.
        """
        masks = [space.read_mask() for space in spaces]
        slots = torch.zeros(self.size, len(statistics), dtype=torch.float64)
        slots[self.rank] = torch.tensor(list(statistics), dtype=torch.float64)
        flags = torch.tensor([p.grad is not None for p in params], dtype=torch.uint8)
        parts = [*masks, flags, slots.view(-1).view(torch.uint8)]
        buf = torch.cat([part.to(self.comm_device) for part in parts])
        self._run("read-row all-reduce (MAX)", dist.all_reduce, buf, op=dist.ReduceOp.MAX)
        *mask_bytes, flag_bytes, slot_bytes = np.split(_to_host(buf), np.cumsum([len(part) for part in parts])[:-1])
        rows = [torch.from_numpy(np.flatnonzero(m.view(np.bool_))).to(mask.device)  # numpy: ~8x torch's speed
                for m, mask in zip(mask_bytes, masks)]
        present = {id(p): bool(flag) for p, flag in zip(params, flag_bytes)}
        summed = slot_bytes.view(np.float64).reshape(self.size, len(statistics)).sum(0)
        return rows, present, summed.tolist()

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


def _to_host(t: torch.Tensor) -> np.ndarray:
    """`t` as a numpy array on the host: the exchange's one host read (a device-to-host copy under NCCL)."""
    return t.cpu().numpy()


def check_declared(space: RowSpace) -> None:
    """VoxnerfError naming the first table of `space` that got a gradient outside the declared reads this step."""
    if space.undeclared:
        raise VoxnerfError(
            f"the table '{space.undeclared[0]}' ({space.name}) got a gradient from a read outside the field's "
            f"declared reads (Field.row_spaces): ranks exchange its gradient only at the rows read there, so the "
            f"other rows' gradients would be lost; read it through the field's RowSpace")


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
    return World(rank, size, local_rank, device, backend, timeout)
