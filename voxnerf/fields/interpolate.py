"""Weighted gathers of table rows: trilinear interpolation once corner rows and weights are known."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _WeightedRowSum(torch.autograd.Function):
    """out[i] = sum_k weights[i, k] * table[rows[i, k]], with a scatter-add backward.

    The forward is `embedding_bag` (a fused kernel); its own backward sorts the indices and is ~20x slower on
    CPU than the `index_add_` used here. Gradients flow to the table only (corner weights are constants). Under CUDA
    autocast it runs in FP32 (custom_fwd casts its inputs), so feature tables are never gathered in half precision.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, table, rows, weights):
        ctx.save_for_backward(rows, weights)
        ctx.num_rows = table.shape[0]
        return F.embedding_bag(rows, table, per_sample_weights=weights, mode="sum")

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_out):
        rows, weights = ctx.saved_tensors
        contrib = (weights.unsqueeze(-1) * grad_out.unsqueeze(1)).reshape(-1, grad_out.shape[-1])
        grad = grad_out.new_zeros(ctx.num_rows, grad_out.shape[-1])
        grad.index_add_(0, rows.reshape(-1), contrib)
        return grad, None, None


def weighted_row_sum(table: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Sum of table rows weighted per sample.

    Args:
        table: (V, C) values, or (V,) for a scalar table.
        rows: (N, K) int64 (or int32) row indices into `table`.
        weights: (N, K) weights (same dtype as table); a zero weight makes its row irrelevant.
    Returns:
        (N, C), or (N,) for a scalar table.
    """
    if table.dim() == 1:
        return (table[rows] * weights).sum(-1)
    return _WeightedRowSum.apply(table, rows, weights)
