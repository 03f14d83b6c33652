"""The opacity losses' Function against autograd through the formulas it replaces."""

import pytest
import torch

from voxnerf.train.losses import OPACITY_EPS, opacity_loss


def _reference(opacity, alpha, entropy_weight, alpha_weight):
    a = opacity.clamp(OPACITY_EPS, 1 - OPACITY_EPS)
    entropy = (torch.special.entr(a) + torch.special.entr(1 - a)).mean()
    return entropy_weight * entropy + alpha_weight * torch.nn.functional.binary_cross_entropy(a, alpha)


@pytest.mark.parametrize("weights", [(1e-3, 0.01), (0.5, 0.0), (0.0, 2.0)])
def test_opacity_loss_matches_entropy_and_cross_entropy_with_their_gradients(weights):
    g = torch.Generator().manual_seed(0)
    opacity = torch.rand(500, generator=g, dtype=torch.float64)
    opacity[:20] = 0.0  # clamped: no gradient there
    opacity[20:40] = 1.0
    alpha = (torch.rand(500, generator=g, dtype=torch.float64) > 0.5).double()
    ours = opacity.clone().requires_grad_()
    theirs = opacity.clone().requires_grad_()
    loss = opacity_loss(ours, alpha, *weights)
    expected = _reference(theirs, alpha, *weights)
    (loss * 3).backward()
    (expected * 3).backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-9, atol=1e-15)
    assert ours.grad[:40].abs().max() == 0
