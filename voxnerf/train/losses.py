"""Losses on a batch's ray opacities, as one autograd Function: they act on (R,) tensors, so their cost is the
operations they dispatch, not arithmetic."""

from __future__ import annotations

import torch
import torch.nn.functional as F

OPACITY_EPS = 1e-5  # opacities are clamped to [eps, 1 - eps] before their logarithms


def opacity_loss(opacity: torch.Tensor, alpha: torch.Tensor, entropy_weight: float, alpha_weight: float) -> torch.Tensor:
    """entropy_weight * mean binary entropy of the opacities (rays either hit something or see the background)
    + alpha_weight * mean binary cross-entropy of the opacities against the pixels' alpha.

    Args:
        opacity: (R,) float32 ray opacities, differentiable.
        alpha: (R,) the pixels' alpha in [0, 1].
    Returns:
        () the weighted sum; its gradient is zero where an opacity lies outside [eps, 1 - eps] (clamped).
    """
    return _OpacityLoss.apply(opacity, alpha, float(entropy_weight), float(alpha_weight))


class _OpacityLoss(torch.autograd.Function):
    """With a the clamped opacity and z = logit(a), per ray, since H(a) = BCE(a, a):

        we * H(a) + wa * BCE(a, alpha) = (we + wa) * BCE(a, t), t = (we a + wa alpha) / (we + wa)

    (one cross-entropy gives the value), and its derivative in a is wa (a - alpha) / (a (1 - a)) - we z (t moves
    with a). The gradient is formed in the forward (a few
    operations on (R,) tensors) and scaled in the backward: autograd through the entropies, the cross-entropy,
    the clamp and the weighted sum dispatched about 25 operations backward."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, opacity, alpha, entropy_weight, alpha_weight):
        a = opacity.clamp(OPACITY_EPS, 1 - OPACITY_EPS)
        z = torch.logit(a)
        n = len(a)
        total = entropy_weight + alpha_weight
        target = torch.add(alpha * (alpha_weight / total), a, alpha=entropy_weight / total) if total else a
        loss = F.binary_cross_entropy(a, target) * total
        slope = torch.add((a - alpha) / (a * (1 - a)) * (alpha_weight / n), z, alpha=-entropy_weight / n)
        ctx.save_for_backward(slope * (a == opacity))  # no gradient where the clamp acts
        return loss

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return slope * grad, None, None, None
