"""Row spaces: the tables of a field whose rows name the same things (a grid's vertices), and the rows one batch
reads them at, as a field declares them (`Field.row_spaces`).

A multi-process job exchanges the gradients of such tables row-sparse, only at the rows some rank read
(voxnerf.train.distributed), so the declaration must be complete. While a RowSpace is open, its field reads each
table through it: an interpolation (`interpolate`) adds its gradient into the table's kept gradient table
(`GradientTables`), and a read of a few rows (`gather`) keeps its gradient rows apart, to be added at those rows
only. A read of the parameter itself (a loss that indexes the table directly) lands on the parameter, where a hook
notes it (`undeclared`). `close` hands the gradient tables, then the gathers' gradients, to the parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from voxnerf.fields.interpolate import take_rows, weighted_row_sum


class GradientTables:
    """A zeroed gradient table per table name, kept from one step to the next.

    A grid's gradient table is as large as the grid (a million rows of 12 features: 48 MB). Allocated afresh every
    step, a block that size comes from `mmap` (glibc serves at most 32 MB from its heap: voxnerf.system.allocator)
    and its pages fault in again at every step: on an AMD EPYC with 2 threads, 24 ms to zero 1.8 M x 12 floats
    that way against 6 ms for a kept table
    (benchmarks/log/2026-11-29-sizes-rates-subnormals.md). A kept table is only set to zero.
    """

    def __init__(self):
        self._kept: dict[str, torch.Tensor] = {}

    def zeroed(self, tables: dict[str, nn.Parameter]) -> dict[str, torch.Tensor]:
        """A zero tensor shaped like each table for its gradient, by name: the kept one (the kept ones zeroed in one
        operation), unless its shape, dtype or device no longer fit (a topology change) or it still is the table's
        .grad (gradients accumulated over several backward passes), in which case a new one is kept."""
        out, stale = {}, []
        for name, table in tables.items():
            kept = self._kept.get(name)
            fits = kept is not None and kept.shape == table.shape and kept.dtype == table.dtype \
                and kept.device == table.device
            if not fits or table.grad is kept:
                self._kept[name] = kept = torch.zeros_like(table, memory_format=torch.contiguous_format)
            else:
                stale.append(kept)
            out[name] = kept
        if stale:
            torch._foreach_zero_(stale)
        return out


class RowSpace:
    """Tables sharing V rows, and the rows a batch read them at.

    Args:
        name: what the rows are, for messages (e.g. "grid vertices").
        tables: name -> parameter (V, ...), every one with the same V rows.
        gradients: the kept gradient tables of `tables` (their owner keeps them from step to step); None: new ones.
    Attributes:
        rows: flat int64 row indices (repeats allowed) of every declared read that built an autograd graph.
        undeclared: names of the tables that received a gradient outside the declared reads (filled by backward).
    """

    def __init__(self, name: str, tables: dict[str, nn.Parameter], gradients: GradientTables | None = None):
        if len({len(p) for p in tables.values()}) != 1:
            raise ValueError(f"row space {name}: its tables must have the same number of rows")
        self.name, self.tables = name, dict(tables)
        self._gradients = GradientTables() if gradients is None else gradients
        self._zeroed: dict[str, torch.Tensor] = {}  # this step's gradient tables, all zeroed at the first read
        self._sinks: dict[str, torch.Tensor] = {}  # those of the tables read
        self.rows: list[torch.Tensor] = []
        self.undeclared: list[str] = []
        self._leaves = {k: p.detach().requires_grad_(p.requires_grad) for k, p in self.tables.items()}
        self._gathered: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (table, rows, their gradient)
        self._hooks = [p.register_hook(self._noting(k)) for k, p in self.tables.items() if p.requires_grad]

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.tables.values())))

    def interpolate(self, name: str, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Table `name` summed at rows (N, K) with weights (N, K) (`weighted_row_sum`): (N, ...). With an autograd
        graph, `rows` are noted and the backward adds the table's gradient into its gradient table for `close`."""
        table = self.tables[name]
        if not (torch.is_grad_enabled() and table.requires_grad):
            return weighted_row_sum(table, rows, weights)
        self.rows.append(rows.reshape(-1))
        if not self._zeroed:
            self._zeroed = self._gradients.zeroed({k: p for k, p in self.tables.items() if p.requires_grad})
        self._sinks[name] = self._zeroed[name]
        return weighted_row_sum(self._leaves[name], rows, weights, self._sinks[name])

    def gather(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every table at `rows` (any shape S), by name: (*S, ...). For a few rows of a large table: the backward
        keeps the rows' gradient for `close` to add at those rows, where an index of a leaf would zero and add a
        whole (V, C) gradient table."""
        if not torch.is_grad_enabled():
            return {k: take_rows(p, rows) for k, p in self.tables.items()}
        self.rows.append(rows.reshape(-1))
        return {k: _KeptGradientGather.apply(p, rows, self._gathered, k) if p.requires_grad else take_rows(p, rows)
                for k, p in self._leaves.items()}

    def read_mask(self) -> torch.Tensor:
        """(V,) uint8: 1 at the rows this step's declared reads noted (a scatter of a few hundred thousand indices),
        the only rows whose gradient a declared read can make nonzero."""
        table = next(iter(self.tables.values()))
        mask = torch.zeros(self.num_rows, dtype=torch.uint8, device=table.device)
        return mask.index_fill_(0, torch.cat(self.rows).long(), 1) if self.rows else mask

    def close(self) -> None:
        """Add the declared reads' gradients to the tables' .grad (after backward) and stop watching them."""
        for hook in self._hooks:
            hook.remove()
        for name, grad in self._sinks.items():
            p = self.tables[name]
            if p.grad is None:
                p.grad = grad
            else:
                p.grad += grad
        self._sinks.clear()
        self._zeroed = {}
        for name, rows, grad in self._gathered:
            p = self.tables[name]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.index_add_(0, rows.reshape(-1), grad.reshape(-1, *p.shape[1:]))
        self._gathered.clear()

    def _noting(self, name: str):
        def note(grad: torch.Tensor) -> None:
            if name not in self.undeclared:
                self.undeclared.append(name)
        return note


class _KeptGradientGather(torch.autograd.Function):
    """table[rows] whose backward appends (name, rows, gradient) to `kept` instead of returning a table gradient.
    A gather: under CUDA autocast it keeps the table's dtype."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, table, rows, kept, name):
        ctx.save_for_backward(rows)
        ctx.kept, ctx.name = kept, name
        return take_rows(table, rows)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_out):
        (rows,) = ctx.saved_tensors
        ctx.kept.append((ctx.name, rows, grad_out))
        return None, None, None, None
