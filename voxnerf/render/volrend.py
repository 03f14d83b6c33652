"""Volume rendering over packed samples: pure functions, FP32 (FP64 for running sums), no hidden state.

Packed samples are flat tensors sorted by ray, then by distance along the ray; `ray_idx` (M,) names the ray of
each sample. This is the ragged (packed) format of nerfacc: no padding, no wasted work on empty space.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def segment_start_positions(ray_idx: torch.Tensor, n_rays: int) -> torch.Tensor:
    """(M,) int64: for each sample, the flat position of the first sample of its ray (`ray_idx` (M,) sorted, in
    [0, n_rays)): one binary search per ray over the samples, then a gather; no host sync."""
    first = torch.searchsorted(ray_idx, torch.arange(n_rays, device=ray_idx.device))
    return first[ray_idx]


def exclusive_segment_cumsum(values: torch.Tensor, starts: torch.Tensor, dtype: torch.dtype | None = None
                             ) -> torch.Tensor:
    """Sum of `values` over the earlier samples of the same ray, accumulated in FP64.

    Args:
        values: (M,) per-sample values.
        starts: (M,) the position of the first sample of each sample's ray (`segment_start_positions`).
        dtype: of the result; None: that of `values`.
    Returns:
        (M,).
    """
    exclusive = torch.cumsum(values, 0, dtype=torch.float64) - values
    return (exclusive - exclusive[starts]).to(dtype or values.dtype)


class Composited(NamedTuple):
    """Per-ray sums of packed samples (`composite`), and the samples' weights."""

    opacity: torch.Tensor  # (R,) sum of weights
    rgb: torch.Tensor  # (R, 3) sum of weight * color, plus (1 - opacity) * background where one was given
    depth: torch.Tensor | None  # (R,) sum of weight * distance (None without distances)
    alpha_sum: torch.Tensor  # () sum of the samples' opacities alpha_i
    weights: torch.Tensor  # (M,) w_i = T_i * alpha_i


def composite(sigmas: torch.Tensor, deltas: torch.Tensor, ray_idx: torch.Tensor, starts: torch.Tensor,
              rgb: torch.Tensor, colored: torch.Tensor, distance: torch.Tensor | None, n_rays: int,
              background: torch.Tensor | None = None, color_rays: torch.Tensor | None = None) -> Composited:
    """Volume rendering of packed samples in one pass whose backward is written out (`_Composite`): a dozen
    operations each way, where autograd through the weights and the three sums dispatches several dozen.

    Args:
        sigmas: (M,) density at each sample (differentiable).
        deltas: (M,) length of each sample's interval.
        ray_idx: (M,) sorted ray index of each sample.
        starts: (M,) the position of the first sample of each sample's ray (`segment_start_positions`).
        rgb: (K, 3) color of the samples at positions `colored` (differentiable); the others add no color.
        colored: (K,) int64 positions of the colored samples.
        distance: (M,) distance of each sample along its ray (no gradient), or None: no depth.
        n_rays: R.
        background: (R, 3) or (3,) color behind each ray, or None: the rays' color is then over black.
        color_rays: (K,) `ray_idx[colored]`, where the caller has it.
    Returns:
        Composited, FP32.
    """
    color_rays = ray_idx[colored] if color_rays is None else color_rays
    return Composited(*_Composite.apply(sigmas.float(), rgb.float(), deltas.float(), ray_idx, starts, colored,
                                       None if distance is None else distance.float(), n_rays, background,
                                       color_rays))


class _Composite(torch.autograd.Function):
    """`composite`'s sums and their gradients in closed form.

    With tau_i = sigma_i delta_i, T_i = exp(-sum_{j<i} tau_j) and w_i = T_i (1 - exp(-tau_i)): dw_i/dtau_i =
    T_i exp(-tau_i), dw_k/dtau_i = -w_k for a later sample k of the ray, and d alpha_i/dtau_i = exp(-tau_i). So with
    g_k the loss's gradient at w_k (through opacity, depth, color and the weights themselves),
    dL/dtau_i = T_i exp(-tau_i) g_i - sum_{k>i} w_k g_k + exp(-tau_i) dL/d(alpha sum); the sums over later samples
    run in FP64, as the forward's over earlier ones. Under CUDA autocast it runs in FP32 (compositing always does).
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, sigmas, rgb, deltas, ray_idx, starts, colored, distance, n_rays, background, color_rays):
        neg_tau = torch.mul(sigmas, deltas).neg_()
        transmittance = torch.exp(exclusive_segment_cumsum(neg_tau, starts))
        survival = torch.exp(neg_tau)  # 1 - alpha
        alpha = torch.expm1(neg_tau).neg_()
        weights = transmittance * alpha
        opacity = weights.new_zeros(n_rays).index_add_(0, ray_idx, weights)
        depth = None if distance is None else weights.new_zeros(n_rays).index_add_(0, ray_idx, weights * distance)
        color_weights = weights[colored]
        color = rgb.new_zeros(n_rays, 3).index_add_(0, color_rays, color_weights.unsqueeze(-1) * rgb)
        if background is not None:
            color = torch.addcmul(color, (1 - opacity).unsqueeze(-1), background)
        ctx.save_for_backward(rgb, deltas, ray_idx, colored, distance, transmittance, survival, weights,
                              color_rays, color_weights, background)
        ctx.set_materialize_grads(False)
        ctx.n_rays = n_rays
        return opacity, color, depth, alpha.sum(), weights

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g_opacity, g_color, g_depth, g_alpha_sum, g_weights):
        (rgb, deltas, ray_idx, colored, distance, transmittance, survival, weights, color_rays,
         color_weights, background) = ctx.saved_tensors
        if g_color is not None and background is not None:  # the background shows through 1 - opacity
            through = (g_color * background).sum(-1)
            g_opacity = -through if g_opacity is None else g_opacity - through
        terms = [t for t in (g_weights, None if g_opacity is None else g_opacity[ray_idx],
                             None if g_depth is None else g_depth[ray_idx] * distance) if t is not None]
        g = sum(terms[1:], terms[0]) if terms else torch.zeros_like(weights)
        g_rgb = None
        if g_color is not None:
            g_per_sample = g_color[color_rays]  # (K, 3)
            g = g.index_add(0, colored, (g_per_sample * rgb).sum(-1))
            g_rgb = color_weights.unsqueeze(-1) * g_per_sample
        g_tau = transmittance * survival * g - _later_sum(weights * g, ray_idx, ctx.n_rays)
        if g_alpha_sum is not None:
            g_tau = g_tau + survival * g_alpha_sum
        return g_tau * deltas, g_rgb, None, None, None, None, None, None, None, None


def _later_sum(values: torch.Tensor, ray_idx: torch.Tensor, n_rays: int) -> torch.Tensor:
    """(M,) sum of `values` over the later samples of the same ray, in FP64: the running sum over all samples up
    to each ray's last one (the running sum of the rays' totals, the samples being sorted by ray) less the running
    sum up to this sample."""
    v = values.double()
    totals = torch.zeros(n_rays, dtype=v.dtype, device=v.device).index_add_(0, ray_idx, v)
    return (torch.cumsum(totals, 0)[ray_idx] - torch.cumsum(v, 0)).to(values.dtype)


def compositing_weights(tau: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """(M,) weights w_i = T_i * alpha_i of packed samples from their optical depths tau_i = sigma_i * delta_i (M,)
    and their rays' first positions (M,) (`segment_start_positions`), the weights `composite` gives (a sample of
    tau 0 changes no other sample's weight)."""
    return torch.exp(-exclusive_segment_cumsum(tau, starts)) * -torch.expm1(-tau)


def distortion(weights: torch.Tensor, s: torch.Tensor, step: float, starts: torch.Tensor) -> torch.Tensor:
    """Mip-NeRF 360's distortion loss of packed samples, summed over rays: small when each ray's weight
    gathers in one short stretch (no floaters, no haze spread along the ray).

        sum_ij w_i w_j |s_i - s_j| + 1/3 sum_i w_i^2 step

    with the pairwise term in O(M) for sorted samples: 2 sum_i w_i (s_i W_i - S_i), where W_i and S_i sum w and
    w * s over the ray's earlier samples.

    Args:
        weights: (M,) compositing weights.
        s: (M,) sample positions along their rays, increasing within a ray, evenly `step` apart.
        step: the interval length in units of s.
        starts: (M,) the position of the first sample of each sample's ray (`segment_start_positions`).
    Returns:
        () the loss summed over rays.
    """
    before_w = exclusive_segment_cumsum(weights, starts)
    before_ws = exclusive_segment_cumsum(weights * s, starts)
    return 2 * (weights * (s * before_w - before_ws)).sum() + weights.square().sum() * step / 3
