"""Per-image appearance: real photos differ in exposure and white balance, which no single radiance field explains.
Two ways to absorb it, each learned per training image: a short code appended to the color MLP's input (NeRF-W,
nerfacto), or an affine color map of the photo as a whole. Views that were not trained on (test views, renders)
use the mean code and the identity map.
"""

from __future__ import annotations

import torch
from torch import nn


class AppearanceCodes(nn.Module):
    """A (num_images, dim) table of codes, one per training image (index into the training split).

    Starts at zero, so an untrained table changes nothing.
    """

    def __init__(self, num_images: int, dim: int):
        super().__init__()
        self.codes = nn.Embedding(num_images, dim)
        nn.init.zeros_(self.codes.weight)

    def forward(self, images: torch.Tensor | None, n: int) -> torch.Tensor:
        """(n, dim) codes of training images `images` (n,) int64, or the fixed code n times when None."""
        if images is None:
            return self.codes.weight.mean(0).expand(n, -1)
        return self.codes(images)


class ColorMaps(nn.Module):
    """A learned affine color map per training image (exposure and white balance, the per-image exposure
    compensation of Urban Radiance Fields), applied to the radiance a ray gathers before its background:
    rgb' = (I + A_i) rgb + b_i * opacity. It acts on a photo as a whole, so unlike a code in the color MLP's input
    it cannot explain what one photo alone shows at one place.

    The maps are centered across images (A_i, b_i are a table's rows less the table's mean), so the images' mean
    map is the identity: views not trained on render with it, in the photos' mean color.
    """

    def __init__(self, num_images: int):
        super().__init__()
        self.maps = nn.Parameter(torch.zeros(num_images, 3, 4))

    def forward(self, rgb: torch.Tensor, opacity: torch.Tensor, images: torch.Tensor | None) -> torch.Tensor:
        """rgb (R, 3) gathered radiance, opacity (R,), training images (R,) int64 -> mapped rgb (R, 3) (unchanged
        when `images` is None)."""
        if images is None:
            return rgb
        maps = (self.maps - self.maps.mean(0))[images]
        return rgb + (maps[..., :3] @ rgb.unsqueeze(-1)).squeeze(-1) + maps[..., 3] * opacity.unsqueeze(-1)
