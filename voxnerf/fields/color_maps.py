"""Per-photo color maps: real photos differ in exposure and white balance, which no single radiance field explains.
Each training image learns an affine map of the radiance its rays gather. Views that were not trained on (test
views, renders) take the blend of the maps of the photos taken near them where those predict one another's (a
camera's exposure that follows where it stands and looks), or else the identity map (`ColorMaps.novel_view`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

NEIGHBOURS = 3  # training cameras whose maps a view not trained on blends (inverse-distance weights)
_CUBE = torch.cartesian_prod(*[torch.tensor([0.0, 0.5, 1.0])] * 3)  # (27, 3) colors maps are compared on


class ColorMaps(nn.Module):
    """A learned affine color map per training image (exposure and white balance, the per-image exposure
    compensation of Urban Radiance Fields), applied to the radiance a ray gathers before its background:
    rgb' = (I + A_i) rgb + b_i * opacity. It acts on a photo as a whole, so it cannot explain what one photo alone
    shows at one place.

    The maps are centered across images (A_i, b_i are a table's rows less the table's mean), so the images' mean
    map is the identity. A view not trained on takes the blend of its nearest training cameras' maps when the
    maps follow where the cameras stand (a phone's exposure set by what is in front of it), the identity when they
    do not (internet photos of other days): `novel_view`.
    """

    def __init__(self, num_images: int, centers: torch.Tensor | None = None):
        """centers: (num_images, 3) world positions of the training cameras, or None (an old checkpoint's maps:
        views not trained on then take the identity)."""
        super().__init__()
        self.maps = nn.Parameter(torch.zeros(num_images, 3, 4))
        self.register_buffer("centers", None if centers is None else torch.as_tensor(centers, dtype=torch.float32))

    def centered(self) -> torch.Tensor:
        """(K, 3, 4) each image's map less the images' mean."""
        return self.maps - self.maps.mean(0)

    def forward(self, rgb: torch.Tensor, opacity: torch.Tensor, images: torch.Tensor | None,
                view_map: torch.Tensor | None = None) -> torch.Tensor:
        """rgb (R, 3) gathered radiance, opacity (R,) -> mapped rgb (R, 3): by training images `images` (R,) int64,
        else by one view's (3, 4) `view_map` (`novel_view`), else unchanged."""
        if images is not None:
            maps = self.centered()[images]
        elif view_map is not None:
            maps = view_map.to(rgb.device).expand(len(rgb), 3, 4)
        else:
            return rgb
        return rgb + (maps[..., :3] @ rgb.unsqueeze(-1)).squeeze(-1) + maps[..., 3] * opacity.unsqueeze(-1)

    @torch.no_grad()
    def novel_view(self, center: np.ndarray) -> torch.Tensor | None:
        """The (3, 4) map of a view not trained on whose camera stands at world `center` (3,): the inverse-distance
        blend of its NEIGHBOURS nearest training cameras' maps where `neighbours_predict`, else None (identity)."""
        if self.centers is None or len(self.maps) <= NEIGHBOURS or not self.neighbours_predict():
            return None
        distance = torch.linalg.norm(self.centers.cpu() - torch.as_tensor(center, dtype=torch.float32), dim=-1)
        idx, weights = _nearest(distance[None])
        return (weights[0, :, None, None] * self.centered().detach().cpu()[idx[0]]).sum(0)

    @torch.no_grad()
    def neighbours_predict(self) -> bool:
        """Whether the maps follow the cameras: each training image's map predicted from its NEIGHBOURS nearest other
        cameras' (left out itself) against the images' mean map, as the squared change of the colors of the
        {0, 1/2, 1}^3 cube they make; True when the neighbours err less than the mean. No constant to choose: the
        capture's own maps decide."""
        offsets = _color_offsets(self.centered().detach().cpu())  # (K, 27, 3): what each map does to the cube
        centers = self.centers.cpu()
        distance = torch.cdist(centers, centers).fill_diagonal_(float("inf"))
        idx, weights = _nearest(distance)
        predicted = (weights[..., None, None] * offsets[idx]).sum(1)
        return bool(((predicted - offsets) ** 2).sum() < (offsets ** 2).sum())


def _nearest(distance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, K) distances to the training cameras -> the NEIGHBOURS nearest (n, k) int64 and their inverse-distance
    weights (n, k), summing to one (a camera at distance 0 takes all of it)."""
    near, idx = distance.topk(NEIGHBOURS, dim=-1, largest=False)
    inverse = 1.0 / near.clamp_min(1e-9)
    return idx, inverse / inverse.sum(-1, keepdim=True)


def _color_offsets(maps: torch.Tensor) -> torch.Tensor:
    """(K, 3, 4) centered maps -> (K, 27, 3) how each moves the colors of the {0, 1/2, 1}^3 cube (opacity one)."""
    return torch.einsum("kij,nj->kni", maps[..., :3], _CUBE) + maps[:, None, :, 3]
