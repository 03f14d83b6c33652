"""Volume rendering over packed samples: pure functions, FP32 (FP64 for running sums), no hidden state.

Packed samples are flat tensors sorted by ray, then by distance along the ray; `ray_idx` (M,) names the ray of
each sample. This is the ragged (packed) format of nerfacc: no padding, no wasted work on empty space.
"""

from __future__ import annotations

import torch


def segment_start_positions(ray_idx: torch.Tensor) -> torch.Tensor:
    """(M,) int64: for each sample, the flat position of the first sample of its ray (`ray_idx` sorted)."""
    m = len(ray_idx)
    if m == 0:
        return ray_idx.new_zeros(0)
    is_start = torch.ones(m, dtype=torch.bool, device=ray_idx.device)
    is_start[1:] = ray_idx[1:] != ray_idx[:-1]
    pos = torch.arange(m, device=ray_idx.device) * is_start
    return torch.cummax(pos, 0).values


def exclusive_segment_cumsum(values: torch.Tensor, ray_idx: torch.Tensor) -> torch.Tensor:
    """Sum of `values` over the earlier samples of the same ray, accumulated in FP64.

    Args:
        values: (M,) per-sample values.
        ray_idx: (M,) sorted ray index of each sample.
    Returns:
        (M,) in the dtype of `values`.
    """
    v = values.double()
    inclusive = torch.cumsum(v, 0)
    exclusive = inclusive - v
    return (exclusive - exclusive[segment_start_positions(ray_idx)]).to(values.dtype)


def render_weights(sigmas: torch.Tensor, deltas: torch.Tensor, ray_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Compositing weights of packed samples: w_i = T_i * alpha_i.

    Args:
        sigmas: (M,) density at each sample.
        deltas: (M,) length of each sample's interval.
        ray_idx: (M,) sorted ray index of each sample.
    Returns:
        weights (M,) and transmittance T_i = exp(-sum_{j<i} sigma_j delta_j) (M,), both float32.
    """
    tau = sigmas.float() * deltas.float()
    transmittance = torch.exp(-exclusive_segment_cumsum(tau, ray_idx))
    alphas = -torch.expm1(-tau)
    return transmittance * alphas, transmittance


def distortion(weights: torch.Tensor, s: torch.Tensor, step: float, ray_idx: torch.Tensor) -> torch.Tensor:
    """Mip-NeRF 360's distortion loss of packed samples, summed over rays: small when each ray's weight
    gathers in one short stretch (no floaters, no haze spread along the ray).

        sum_ij w_i w_j |s_i - s_j| + 1/3 sum_i w_i^2 step

    with the pairwise term in O(M) for sorted samples: 2 sum_i w_i (s_i W_i - S_i), where W_i and S_i sum w and
    w * s over the ray's earlier samples.

    Args:
        weights: (M,) compositing weights.
        s: (M,) sample positions along their rays, increasing within a ray, evenly `step` apart.
        step: the interval length in units of s.
        ray_idx: (M,) sorted ray index of each sample.
    Returns:
        () the loss summed over rays.
    """
    before_w = exclusive_segment_cumsum(weights, ray_idx)
    before_ws = exclusive_segment_cumsum(weights * s, ray_idx)
    return 2 * (weights * (s * before_w - before_ws)).sum() + weights.square().sum() * step / 3


def accumulate(weights: torch.Tensor, ray_idx: torch.Tensor, n_rays: int, values: torch.Tensor | None = None) -> torch.Tensor:
    """Per-ray sum of weights (opacity) or of weighted values.

    Args:
        weights: (M,) sample weights.
        ray_idx: (M,) ray of each sample.
        n_rays: number of rays R.
        values: (M, C) per-sample values, or None to sum the weights themselves.
    Returns:
        (R,) when `values` is None, else (R, C).
    """
    if values is None:
        return torch.zeros(n_rays, dtype=weights.dtype, device=weights.device).index_add(0, ray_idx, weights)
    out = torch.zeros(n_rays, values.shape[-1], dtype=torch.float32, device=weights.device)
    return out.index_add(0, ray_idx, weights.unsqueeze(-1) * values.float())
