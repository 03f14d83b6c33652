"""Adam whose per-row tables are updated at the rows a step read only, with dense Adam's result (issue 39 item 1).

A grid's tables have millions of rows and a step's samples read a fraction of them, but dense Adam reads and writes
every row of the parameter and both moments each step: the step's cost follows the table, not the samples. A row
without gradient still moves under dense Adam, by its decaying momentum: for k steps without gradient since step s,
  m_{s+j} = b1^j m_s,  v_{s+j} = b2^j v_s,  x -= a_{s+j} (b1 / sqrt(b2))^j m_s / sqrt(v_s),
  a_u = lr_u sqrt(1 - b2^u) / (1 - b1^u)
(eps, 1e-15 in training, left out of the skipped steps). The sum over j is the same for every row last updated at
step s, so one float64 number per step s (`_Lag.sums`, updated over the last WINDOW steps: b1 / sqrt(b2) ~ 0.90, and
0.90^WINDOW is far below float precision) catches every such row up exactly when it is next read, or at
`catch_up()` (before a checkpoint, a topology change, an occupancy update or an evaluation reads every row).
"""

from __future__ import annotations

import math

import torch

ROW_SPARSE = "row_sparse"  # a param group key: True when the group's parameters are per-row tables (rows first)
WINDOW = 512  # steps a row's catch-up sum keeps growing (b1 / sqrt(b2) = 0.905 for (0.9, 0.99): 0.905^512 ~ 1e-22)


class _Lag:
    """What one row-sparse parameter's rows owe dense Adam since the last catch-up at step `base`.

    Attributes:
        last: (V,) int64, the step up to which each row is current.
        sums: (steps since base + 1,) float64, sums[s - base] = sum over u in (s, now] of a_u r^(u - s).
    """

    def __init__(self, rows: int, base: int, device: torch.device):
        self.base = base
        self.last = torch.full((rows,), base, dtype=torch.int64, device=device)
        self.sums = torch.zeros(1, dtype=torch.float64, device=device)

    def advance(self, a: float, ratio: float) -> None:
        """Step base + len(sums) was taken with coefficient `a`: every s in the window owes a r^(now - s) more."""
        n = min(len(self.sums), WINDOW)
        powers = ratio ** torch.arange(n, 0, -1, dtype=torch.float64, device=self.sums.device)
        self.sums[-n:] += a * powers
        self.sums = torch.cat([self.sums, self.sums.new_zeros(1)])

    @property
    def now(self) -> int:
        return self.base + len(self.sums) - 1


class RowSparseAdam(torch.optim.Adam):
    """torch.optim.Adam (its options and state dict) whose groups marked `row_sparse` update only the rows given
    to `set_rows` before each step; the other groups step as torch's Adam does (fused where asked).

    A row-sparse parameter whose rows were not given steps densely (all rows), after catching up.
    """

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        # a GradScaler unscales the gradients before `step` (fused Adam would take the scale into its kernel, which
        # the row-sparse step does not)
        self._step_supports_amp_scaling = False
        for group in self.param_groups:
            if group.get(ROW_SPARSE) and (group["weight_decay"] or group["amsgrad"] or group["maximize"]):
                raise ValueError("row_sparse groups take plain Adam (no weight_decay, amsgrad or maximize)")
        self._rows: dict[torch.Tensor, torch.Tensor] = {}
        self._lags: dict[torch.Tensor, _Lag] = {}

    def set_rows(self, rows: dict[torch.Tensor, torch.Tensor]) -> None:
        """The rows (K,) int64, unique, of each row-sparse parameter whose gradient may be nonzero this step."""
        self._rows = dict(rows)

    @torch.no_grad()
    def step(self, closure=None):
        sparse = [(group, p) for group in self.param_groups if group.get(ROW_SPARSE) for p in group["params"]
                  if p.grad is not None and p in self._rows]
        for group in self.param_groups:  # row-sparse tables stepping densely owe their rows first
            if group.get(ROW_SPARSE):
                for p in group["params"]:
                    if p.grad is not None and p not in self._rows:
                        self._catch_up(p, group)
        grads = [p.grad for _, p in sparse]
        for _, p in sparse:
            p.grad = None
        try:
            loss = super().step(closure)
        finally:
            for (_, p), grad in zip(sparse, grads):
                p.grad = grad
        for group, p in sparse:
            self._sparse_step(p, group, self._rows[p])
        self._rows = {}
        return loss

    def _sparse_step(self, p: torch.Tensor, group: dict, rows: torch.Tensor) -> None:
        """Dense Adam's step of `p` at `rows`, their skipped steps caught up first; then the step is recorded."""
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if group["fused"] else "cpu")
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        lag = self._lags.get(p)
        if lag is None:
            lag = self._lags[p] = _Lag(len(p), int(state["step"]), p.device)
        t = lag.now + 1
        self._settle(p, group, lag, rows)
        m, v = state["exp_avg"][rows], state["exp_avg_sq"][rows]
        g = p.grad[rows]
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bc1, bc2 = 1 - beta1**t, 1 - beta2**t
        x = p[rows].addcdiv_(m, v.sqrt().div_(math.sqrt(bc2)).add_(group["eps"]), value=-group["lr"] / bc1)
        p.index_copy_(0, rows, x)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        lag.last[rows] = t
        state["step"] += 1
        lag.advance(group["lr"] * math.sqrt(bc2) / bc1, beta1 / math.sqrt(beta2))

    def _settle(self, p: torch.Tensor, group: dict, lag: _Lag, rows: torch.Tensor | None) -> None:
        """Apply to `rows` (None: all) the steps they skipped since they were last current: the parameter's drift by
        its momentum, and the moments' decay."""
        beta1, beta2 = group["betas"]
        state = self.state[p]
        rows = slice(None) if rows is None else rows  # all rows: views, no gather of the whole table
        last = lag.last[rows]
        skipped = (lag.now - last).to(p.dtype)
        shape = (-1,) + (1,) * (p.dim() - 1)
        coef = lag.sums[last - lag.base].to(p.dtype).view(shape)
        m, v = state["exp_avg"][rows], state["exp_avg_sq"][rows]
        drift = coef * m / (v.sqrt() + group["eps"])
        p[rows] -= drift
        state["exp_avg"][rows] = m * torch.pow(beta1, skipped).view(shape)
        state["exp_avg_sq"][rows] = v * torch.pow(beta2, skipped).view(shape)

    def _catch_up(self, p: torch.Tensor, group: dict) -> None:
        lag = self._lags.pop(p, None)
        if lag is not None and lag.now > lag.base:
            self._settle(p, group, lag, None)

    @torch.no_grad()
    def catch_up(self) -> None:
        """Bring every row of every row-sparse parameter to dense Adam's state (O(rows): before reading them all)."""
        for group in self.param_groups:
            if group.get(ROW_SPARSE):
                for p in group["params"]:
                    self._catch_up(p, group)

    def state_dict(self):
        """torch's Adam state dict, every row caught up first (so dense Adam can load it, and the reverse)."""
        self.catch_up()
        return super().state_dict()

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._lags = {}
