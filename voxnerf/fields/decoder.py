"""Parts the grid fields share: the color decoder (a small MLP on features and SH of the view direction) and the
density activation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from voxnerf.fields.interpolate import take_rows
from voxnerf.fields.sh import MAX_DEGREE, sh_encode
from voxnerf.ranges import NON_NEGATIVE, OPEN_FRACTION, POSITIVE, Range

SIZES_PER_OCTAVE = 8  # row counts the MLP runs on in bf16 or fp16: at most 12.5% padding


def bucketed_rows(n: int) -> int:
    """`n` rounded up to one of SIZES_PER_OCTAVE sizes per power of two.

    oneDNN (bf16 matmuls on a CPU) builds and caches a primitive per matrix shape: rendering in chunks whose sample
    counts all differ left ~0.3 GB more resident per 500x500 view until the cache filled (1024 primitives), and a
    training step's varying batch did the same. A few shapes per octave bound that."""
    step = max(1, (1 << max(n.bit_length() - 1, 0)) // SIZES_PER_OCTAVE)
    return -(-n // step) * step


@dataclass
class GridFieldConfig:
    """Options every grid field has (subclasses add `kind` and their own). RANGES holds the Range of each numeric
    option (voxnerf.ranges; `load_config` checks them); a subclass adds its own options' ranges to it."""

    feature_dim: int = 12  # feature channels per vertex
    hidden: int = 64  # width of the color MLP's hidden layers
    layers: int = 2  # hidden layers of the color MLP
    sh_degree: int = 2  # spherical-harmonics band of the view-direction encoding (0-4)
    alpha_init: float = 1e-3  # opacity of one first-level cell at start (low initial density trains well, DVGO)
    density_scale: float = 128.0  # sigma per grid length for one unit of activated density (~1/voxel at 256^3)
    feature_std: float = 0.1  # std of the random initial features
    color_maps: bool = False  # a learned affine color map per training image (voxnerf.fields.color_maps.ColorMaps)

    RANGES: ClassVar[dict[str, Range]] = {
        "feature_dim": Range(3, 1024), "hidden": Range(1, 4096), "layers": Range(1, 64),
        "sh_degree": Range(0, MAX_DEGREE), "alpha_init": OPEN_FRACTION, "density_scale": POSITIVE,
        "feature_std": NON_NEGATIVE,
    }


class ReluMLP(nn.Sequential):
    """Linear layers with a ReLU between each two, run as one autograd Function (`_ReluLayers`) in a given dtype.

    Its parameters are those of the nn.Sequential it extends (Linear, ReLU, ..., Linear: the checkpoint's names).
    """

    def forward(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """x (N, D) -> (N, out) in `dtype` (default x's): inputs and weights cast to it, as autocast would."""
        params = [p for layer in self if isinstance(layer, nn.Linear) for p in (layer.weight, layer.bias)]
        return _ReluLayers.apply(x, dtype or x.dtype, *params)


class _ReluLayers(torch.autograd.Function):
    """y = L_k(relu(... relu(L_1(x)))) for Linear layers L_i = (weight, bias), in one dtype, with the backward
    written out: autograd through autocast's casts and each layer's transposes dispatches about twice the
    operations of the matrix products themselves. The products are autograd's own (the same bits)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, dtype, *params):
        weights = [p.to(dtype) for p in params]  # weight, bias of each layer
        inputs = [x.to(dtype)]  # each layer's input
        for i in range(0, len(weights), 2):
            y = torch.addmm(weights[i + 1], inputs[-1], weights[i].t())
            if i + 2 < len(weights):
                inputs.append(y.relu_())
        ctx.save_for_backward(*inputs, *weights[::2])
        ctx.input_dtype, ctx.param_dtypes = x.dtype, [p.dtype for p in params]
        return y

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        inputs, weights = saved[:len(saved) // 2], saved[len(saved) // 2:]
        g = grad.to(inputs[0].dtype)
        grads = []
        for layer in reversed(range(len(weights))):
            grads[:0] = [g.t().mm(inputs[layer]), g.sum(0)]
            if layer or ctx.needs_input_grad[0]:
                g = g.mm(weights[layer])
            if layer:
                g = torch.ops.aten.threshold_backward(g, inputs[layer], 0)
        grad_x = g.to(ctx.input_dtype) if ctx.needs_input_grad[0] else None
        return grad_x, None, *(d.to(dtype) for d, dtype in zip(grads, ctx.param_dtypes))


class ColorDecoder(nn.Module):
    """features + SH(view dir) -> RGB in [0, 1]; the first 3 feature channels are a diffuse base color logit."""

    def __init__(self, feature_dim: int, hidden: int, layers: int, sh_degree: int):
        super().__init__()
        self.sh_degree = sh_degree
        dims = [feature_dim + (sh_degree + 1) ** 2] + [hidden] * layers
        blocks = []
        for a, b in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.mlp = ReluMLP(*blocks, nn.Linear(dims[-1], 3))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    @classmethod
    def seeded(cls, cfg: GridFieldConfig, seed: int) -> "ColorDecoder":
        """A decoder whose initialization the seed decides, not the global random state."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(cfg.feature_dim, cfg.hidden, cfg.layers, cfg.sh_degree)

    def forward(self, features: torch.Tensor, dirs: torch.Tensor, amp_dtype: torch.dtype | None = None,
                rays: torch.Tensor | None = None) -> torch.Tensor:
        """features (N, C) and unit dirs (N, 3), or dirs (R, 3) of rays with `rays` (N,) naming each point's ray ->
        rgb (N, 3) float32.

        Only the MLP runs in `amp_dtype` (autocast's dtype): features are gathered in FP32 by the caller, so a
        feature table is never cast (a (V, C) copy per call) and features keep full precision; so is the view
        encoding.
        """
        view = sh_encode(dirs, self.sh_degree).to(features.dtype)
        if rays is not None:
            view = take_rows(view, rays)
        h = torch.cat([features, view], -1)
        n = len(h)
        if amp_dtype is not None:
            h = F.pad(h, (0, 0, 0, bucketed_rows(n) - n))
        return torch.sigmoid(torch.add(features[:, :3], self.mlp(h, amp_dtype)[:n]))  # in float32


class DensityActivation:
    """Raw density -> sigma = softplus(raw + shift) * density_scale (DVGO's post-activation).

    `shift` makes a zero raw density give `alpha_init` across one cell of a grid of `resolution` cells per axis.
    Raw density counts in units of `density_scale` (about one per fine voxel), so Adam's per-step moves of the
    order of the learning rate make a surface opaque in tens of steps, not thousands.
    """

    def __init__(self, alpha_init: float, density_scale: float, resolution: int):
        cell = 2.0 / resolution
        self.density_scale = density_scale
        self.shift = math.log(math.expm1(-math.log1p(-alpha_init) / (cell * density_scale)))

    def __call__(self, raw: torch.Tensor) -> torch.Tensor:
        return F.softplus(raw + self.shift) * self.density_scale

    def inverse(self, sigma: torch.Tensor) -> torch.Tensor:
        """The raw density giving sigma > 0."""
        return torch.log(torch.expm1(sigma / self.density_scale)) - self.shift
