"""Per-image appearance codes (NeRF-W, nerfacto): real photos differ in exposure and white balance, which no
single radiance field explains; a short learned code per training image, appended to the color MLP's input,
absorbs it. Views that were not trained on (test views, renders) use one fixed code: the mean of the learned ones.
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
