"""Where the field is still wrong: a running loss per tile of every training photo, to draw more rays there.

Instant-NGP keeps such a map of its training error and draws pixels in proportion to it; neuralsim's `ErrorMap` does
the same in PyTorch. A 300 s CPU run sees each full-size pixel of a real capture less than once, so rays spent on
flat, already-fitted tiles (sky, a plain wall, the background of a masked object) are rays not spent on the edges
and textures that still miss. A share of each batch is drawn by the map and the rest uniformly, so every tile keeps
being seen and its estimate stays fresh.
"""

from __future__ import annotations

import torch


class ErrorMap:
    """A running mean of the training loss on tiles x tiles tiles of each of K photos.

    A tile is a fraction of its photo's width and height, so one map serves every scale of the image pyramid.
    A tile not yet seen reads 1 (far above any photo's squared error), so the first draws explore; its first hit
    sets its estimate, later hits move it by `rate`.

    Args:
        n_images: K, the photos rays are drawn from.
        tiles: tiles per side of a photo.
        rate: how far a tile's estimate moves toward the mean loss of the rays that just hit it.
        device: where the map lives.
    """

    def __init__(self, n_images: int, tiles: int, rate: float, device: torch.device):
        self.tiles, self.rate = tiles, rate
        self.loss = torch.ones(n_images * tiles * tiles, device=device)
        self.seen = torch.zeros(n_images * tiles * tiles, dtype=torch.bool, device=device)

    def draw(self, n: int, size: tuple[int, int], generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """n pixels drawn with probability proportional to their tile's loss, uniform within the tile.

        Args:
            size: (h, w) of the photos at the scale drawn from.
        Returns:
            img, v, u, tile: (n,) int64 photo, row and column of each pixel and the tile it was drawn from (at a
            scale with fewer pixels than tiles, a pixel's nearest), on the generator's device.
        """
        h, w = size
        t, dev = self.tiles, generator.device
        tile = torch.multinomial(self.loss.to(dev), n, replacement=True, generator=generator)
        offset = torch.rand(2, n, generator=generator, device=dev)
        v = ((tile // t % t + offset[0]) * h / t).long().clamp_max(h - 1)
        u = ((tile % t + offset[1]) * w / t).long().clamp_max(w - 1)
        return tile // (t * t), v, u, tile

    def tile_of(self, img: torch.Tensor, v: torch.Tensor, u: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """(n,) int64 flat tile index of the centers of pixels (img, v, u), each (n,), of photos of `size` (h, w)."""
        h, w = size
        t = self.tiles
        row = torch.div((2 * v + 1) * t, 2 * h, rounding_mode="floor")
        return img * t * t + row * t + torch.div((2 * u + 1) * t, 2 * w, rounding_mode="floor")

    def record(self, tile: torch.Tensor, loss: torch.Tensor) -> None:
        """Move each hit tile's estimate toward the mean of `loss` (n,) over the rays `tile` (n,) it was hit by."""
        tile, loss = tile.to(self.loss.device), loss.detach().float().to(self.loss.device)
        total = torch.zeros_like(self.loss).index_add_(0, tile, loss)
        count = torch.bincount(tile, minlength=len(self.loss))
        hit = count.nonzero().squeeze(1)
        rate = torch.where(self.seen[hit], self.rate, 1.0)
        self.loss[hit] = torch.lerp(self.loss[hit], total[hit] / count[hit], rate)
        self.seen[hit] = True
