"""Row spaces: the tables of a field whose rows name the same things (a grid's vertices), and the rows one batch
reads them at, as a field declares them (`Field.row_spaces`).

A multi-process job exchanges the gradients of such tables row-sparse, only at the rows some rank read
(voxnerf.train.distributed), so the declaration must be complete. While a RowSpace is open, its field reads each
table through a leaf that shares the table's storage (`read`): the gradient of every declared read lands on the
leaf, and a read of the parameter itself (a loss that indexes the table directly) lands on the parameter, where a
hook notes it (`undeclared`). A read of a few rows (`gather`) keeps its gradient rows apart instead, to be added
at those rows only. `close` hands the leaves' gradients, then the gathers', to the parameters.
"""

from __future__ import annotations

import torch
from torch import nn


class RowSpace:
    """Tables sharing V rows, and the rows a batch read them at.

    Args:
        name: what the rows are, for messages (e.g. "grid vertices").
        tables: name -> parameter (V, ...), every one with the same V rows.
    Attributes:
        rows: flat int64 row indices (repeats allowed) of every declared read that built an autograd graph.
        undeclared: names of the tables that received a gradient outside the declared reads (filled by backward).
        agreed: (K,) int64 rows some rank of a multi-process job read (set by its gradient exchange), or None.
    """

    def __init__(self, name: str, tables: dict[str, nn.Parameter]):
        if len({len(p) for p in tables.values()}) != 1:
            raise ValueError(f"row space {name}: its tables must have the same number of rows")
        self.name, self.tables = name, dict(tables)
        self.rows: list[torch.Tensor] = []
        self.undeclared: list[str] = []
        self.agreed: torch.Tensor | None = None
        self._leaves = {k: p.detach().requires_grad_(p.requires_grad) for k, p in self.tables.items()}
        self._gathered: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (table, rows, their gradient)
        self._hooks = [p.register_hook(self._noting(k)) for k, p in self.tables.items() if p.requires_grad]

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.tables.values())))

    def read(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The tables to read at `rows` (any shape), by name: the leaves, with `rows` noted, when the read builds
        an autograd graph; else the parameters."""
        if not torch.is_grad_enabled():
            return self.tables
        self.rows.append(rows.reshape(-1))
        return self._leaves

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

    def rows_to_update(self) -> torch.Tensor:
        """(K,) int64 unique rows whose gradient may be nonzero after the step's exchange: those some rank read
        (`agreed`), or this process's reads."""
        if self.agreed is not None:
            return self.agreed
        return torch.nonzero(self.read_mask()).squeeze(-1)

    def close(self) -> None:
        """Add the declared reads' gradients to the tables' .grad (after backward) and stop watching them."""
        for hook in self._hooks:
            hook.remove()
        for name, p in self.tables.items():
            grad = self._leaves[name].grad
            if grad is None:
                continue
            if p.grad is None:
                p.grad = grad
            else:
                p.grad += grad
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


def take_rows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`table[rows]` for a table (V, ...) and int64 rows of any shape S: (*S, ...). `index_select` on the flat rows:
    on a CPU, 25x faster than an index with a 2-D `rows` of a (V, 16) table."""
    return table.index_select(0, rows.reshape(-1)).reshape(*rows.shape, *table.shape[1:])
