"""Image quality: PSNR, SSIM (scikit-image), LPIPS when its package is installed."""

from __future__ import annotations

import functools
import sys

import numpy as np
import torch


def psnr(pred: torch.Tensor | np.ndarray, target: torch.Tensor | np.ndarray) -> float:
    """PSNR in dB of images in [0, 1], any matching shapes."""
    mse = float(((torch.as_tensor(pred).double() - torch.as_tensor(target).double()) ** 2).mean())
    return float("inf") if mse == 0 else -10.0 * np.log10(mse)


def mse_to_psnr(mse: float) -> float:
    return -10.0 * np.log10(max(mse, 1e-12))


def ssim(pred: np.ndarray, target: np.ndarray) -> float:
    """SSIM of (H, W, 3) images in [0, 1] (scikit-image, Gaussian window as in the NeRF papers)."""
    from skimage.metrics import structural_similarity

    return float(structural_similarity(pred, target, channel_axis=-1, data_range=1.0, gaussian_weights=True,
                                       sigma=1.5, use_sample_covariance=False))


@functools.cache
def lpips_installed() -> bool:
    """Whether the lpips package imports; when it does not, says so on stderr (once per process)."""
    try:
        import lpips  # noqa: F401
    except ImportError:
        print("voxnerf: note: LPIPS is left out of the scores (the lpips package is not installed: pip install "
              "lpips)", file=sys.stderr)
        return False
    return True


def lpips_model():
    """An LPIPS (VGG) scorer `(pred, target) -> float` for (H, W, 3) arrays, or None when lpips is not installed."""
    if not lpips_installed():
        return None
    import lpips

    net = lpips.LPIPS(net="vgg", verbose=False).eval()

    def score(pred: np.ndarray, target: np.ndarray) -> float:
        to_t = lambda a: torch.from_numpy(a).permute(2, 0, 1)[None].float() * 2 - 1  # noqa: E731
        with torch.no_grad():
            return float(net(to_t(pred), to_t(target)))

    return score
