"""How deep each ray's radiance comes from (`weight_spread`): the thickness of a rendered surface, which
benchmarks/mesh_quality.py reports beside its meshes. Checked by benchmarks/test_weight_spread.py
(`python -m pytest benchmarks/test_weight_spread.py`)."""

from __future__ import annotations

import torch

from voxnerf.render.model import Model
from voxnerf.render.renderer import RenderConfig, march_samples
from voxnerf.render.volrend import compositing_weights, segment_start_positions


@torch.no_grad()
def weight_spread(model: Model, origins: torch.Tensor, dirs: torch.Tensor, cfg: RenderConfig) -> torch.Tensor:
    """How deep each ray's radiance comes from: the standard deviation of the march parameter (the distance
    along the ray inside the unit box) under the ray's compositing weights, in cells of the model's grid (about 0
    for an opaque surface, several cells for a haze).

    Args:
        origins, dirs: (R, 3) rays in unit-box coordinates, dirs unit length.
        cfg: the sampling and skipping thresholds rays are marched with (mid-step samples, as in renders).
    Returns:
        (R,) float32; 0 for rays that gather no weight.
    """
    estimator = model.estimator
    _, samples, _ = march_samples(model, origins, dirs, cfg, None)
    starts = segment_start_positions(samples.ray_idx, len(origins))
    weights = compositing_weights(model.field.density(samples.lookup) * samples.delta, starts)
    u = samples.u
    sums = weights.new_zeros(len(origins), 3).index_add_(0, samples.ray_idx, torch.stack([weights, weights * u,
                                                                                         weights * u.square()], -1))
    total = sums[:, 0].clamp_min(1e-9)
    mean = sums[:, 1] / total
    variance = (sums[:, 2] / total - mean.square()).clamp_min(0)
    return variance.sqrt() * estimator.space.inner_scale / estimator.cell_size
