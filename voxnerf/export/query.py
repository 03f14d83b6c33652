"""Model queries that exports need, in chunks: log density, density normals, surface colors.

All points are unit-box coordinates (the model's space maps them to the grid); results are float32 numpy arrays on
the CPU. The thread policy is rechecked before each chunk (`recheck_threads`): marching cubes, the automatic iso
value and the surface colors spend their time here.
"""

from __future__ import annotations

import numpy as np
import torch

from voxnerf.render.model import Model
from voxnerf.system.threads import recheck_threads

CHUNK = 1 << 16


def _device(model: Model) -> torch.device:
    return next(model.parameters()).device


LOG_EMPTY = -30.0  # log sigma given to points in unoccupied cells


def opacity_to_density(iso: float, delta: float) -> float:
    """The sigma at which one step of length `delta` has opacity `iso`: -log(1 - iso) / delta."""
    return -np.log1p(-iso) / delta


@torch.no_grad()
def log_density(model: Model, x: np.ndarray) -> np.ndarray:
    """log sigma (N,) at unit-box points x (N, 3); points in cells the estimator does not mark occupied (the
    renderer skips them) and points of zero density get LOG_EMPTY."""
    out = np.empty(len(x), np.float32)
    for i in range(0, len(x), CHUNK):
        recheck_threads()
        g = model.space.to_grid(torch.as_tensor(x[i:i + CHUNK], dtype=torch.float32, device=_device(model)))
        sigma = model.field.density_at(g) * model.estimator.is_occupied(g)
        out[i:i + CHUNK] = torch.log(sigma).clamp_min(LOG_EMPTY).cpu().numpy()
    return out


def densities_along(model: Model, origins: np.ndarray, dirs: np.ndarray, near: np.ndarray,
                    far: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Densities at mid-step samples of rays between near and far (as `log_density` sees them).

    Args:
        model: the field and its occupancy.
        origins, dirs: (R, 3) unit-box rays, dirs unit length.
        near, far: (R,) distances along each ray; samples at near + (k + 0.5) * step below far.
        step: sample spacing (unit-box length).
    Returns:
        t (R, N) sample distances and sigma (R, N) float64 densities, zero past each ray's far.
    """
    t = near[:, None] + (np.arange(max(int(np.ceil((far - near).max(initial=0) / step)), 1)) + 0.5) * step
    x = origins[:, None] + t[..., None] * dirs[:, None]
    sigma = np.exp(log_density(model, x.reshape(-1, 3)).astype(np.float64)).reshape(t.shape)
    return t, np.where(t < far[:, None], sigma, 0.0)


def density_normals(model: Model, x: np.ndarray) -> np.ndarray:
    """Outward unit normals (N, 3): the negated, normalized gradient of sigma at unit-box points x (N, 3).

    Where the gradient vanishes (flat density) the normal is zero.
    """
    out = np.empty((len(x), 3), np.float32)
    for i in range(0, len(x), CHUNK):
        recheck_threads()
        with torch.enable_grad():
            xc = torch.as_tensor(x[i:i + CHUNK], dtype=torch.float32, device=_device(model)).requires_grad_(True)
            (grad,) = torch.autograd.grad(model.field.density_at(model.space.to_grid(xc)).sum(), xc)
        out[i:i + CHUNK] = torch.nn.functional.normalize(-grad, dim=-1).cpu().numpy()
    return out


@torch.no_grad()
def head_on_colors(model: Model, x: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """Colors (N, 3) of surface points x (N, 3) seen head-on: view direction -normal (normals (N, 3), outward).

    Zero normals fall back to looking along -z.
    """
    dirs = -np.asarray(normals, np.float32)
    flat = np.linalg.norm(dirs, axis=-1) < 1e-6
    dirs[flat] = (0.0, 0.0, -1.0)
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    out = np.empty((len(x), 3), np.float32)
    for i in range(0, len(x), CHUNK):
        recheck_threads()
        g = model.space.to_grid(torch.as_tensor(x[i:i + CHUNK], dtype=torch.float32, device=_device(model)))
        dc = torch.as_tensor(dirs[i:i + CHUNK], device=g.device)
        out[i:i + CHUNK] = model.field.color_at(g, dc).float().cpu().numpy()
    return out
