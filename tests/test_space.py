"""Spaces (box, contracted, NDC): the maps are inverse pairs, NDC rays follow the points they pass, and marching
through a contracted grid integrates the same field as a dense march in the world."""

import numpy as np
import pytest
import torch

from voxnerf.data.cameras import Cameras
from voxnerf.data.normalize import contract_space, ndc_space
from voxnerf.data.space import Box, Contract, Space, contract, space_from_dict, uncontract
from voxnerf.errors import VoxnerfError
from voxnerf.fields.voxels import SparseVoxelConfig, SparseVoxelField
from voxnerf.render.model import Model
from voxnerf.render.occupancy import OccupancyGrid
from voxnerf.render.renderer import RenderConfig, render_rays

SHELL = (3.0, float("inf"))  # unit-box radii of the test fields' background (a sharp outer edge would need
SHELL_SIGMA = 0.01  # a fine grid out there); its density: a ray through it to distance 100 keeps ~38% of its light


def forward_cameras(n: int = 6) -> Cameras:
    """n cameras on a small sideways grid, all looking along +z (a forward-facing capture), 40 x 30 pixels."""
    c2w = np.tile(np.eye(4)[:3], (n, 1, 1))
    c2w[:, 0, 3] = np.linspace(-0.3, 0.3, n)
    c2w[:, 1, 3] = np.tile([-0.1, 0.1], n // 2)
    return Cameras(c2w, np.tile([50.0, 50.0, 20.0, 15.0], (n, 1)), np.tile([40, 30], (n, 1)), np.zeros((n, 4)))


@pytest.mark.parametrize("inner", [0.5, 0.75])
def test_contraction_scales_the_unit_box_and_inverts_outside(inner):
    x = torch.randn(1000, 3, dtype=torch.float64) * 5
    g = contract(x, inner)
    assert g.abs().amax() < 1
    inside = x.abs().amax(-1) <= 1
    torch.testing.assert_close(g[inside], inner * x[inside])
    assert torch.all(g[~inside].abs().amax(-1) > inner)
    torch.testing.assert_close(uncontract(g, inner), x, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("inner", [0.5, 0.75])
def test_contracted_step_scale_is_the_radial_derivative_of_the_contraction(inner):
    space = Contract(inner=inner)
    d = torch.nn.functional.normalize(torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)), dim=-1)
    for r in (0.5, 1.5, 4.0, 30.0):
        p = d * r / d.abs().amax(-1, keepdim=True)  # L-infinity radius r
        h = 1e-7 * r
        grid_length = (space.to_grid(p * (1 + h / r)) - space.to_grid(p)).abs().amax(-1)
        torch.testing.assert_close(space.world_step_scale(space.to_grid(p)), h / grid_length, rtol=1e-4, atol=0)


@pytest.mark.parametrize("inner", [0.5, 0.75])
def test_contracted_march_parameter_inverts_and_steps_evenly_through_the_grid(inner):
    space = Contract(inner=inner)
    a = torch.tensor([1.0, 1.7], dtype=torch.float64)
    t = torch.tensor([[0.4, 3.0, 50.0], [1.2, 8.0, 900.0]], dtype=torch.float64)
    u = space._march_parameter(t, a[:, None])
    torch.testing.assert_close(space.march_distance(u, a[:, None, None]), t)
    # a step in u moves a radial ray (from the origin, a = 1) by inner * step through the grid, inside and out
    origin, up = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    for u0 in (0.3, 1.0 + 0.3 * (1 - inner) / inner, 1.0 + 0.9 * (1 - inner) / inner):  # the shell: a < u < a (1 + k)
        uu = torch.tensor([u0, u0 + 1e-6], dtype=torch.float64)
        g = space.march_points(origin, up, space.march_distance(uu, torch.ones(2, 1, dtype=torch.float64)))
        assert float(g[1, 2] - g[0, 2]) == pytest.approx(inner * 1e-6, rel=1e-3)


def test_ndc_maps_invert_and_rays_pass_through_the_points_they_should():
    space = ndc_space(forward_cameras(), near=2.0)
    p = torch.tensor([[0.3, -0.2, 1.5], [-1.0, 0.5, 4.0], [0.0, 0.0, 40.0]], dtype=torch.float64)
    g = space.to_grid(p)
    torch.testing.assert_close(space.from_grid(g), p, rtol=1e-9, atol=1e-9)
    origins = torch.tensor([[0.1, 0.05, 0.0], [-0.1, 0.0, -0.2], [0.0, 0.0, 0.0]], dtype=torch.float64)
    dirs = torch.nn.functional.normalize(p - origins, dim=-1)
    space.far = 1e6
    rays = space.march_rays(origins, dirs)
    along = ((g - rays.origins) * rays.dirs).sum(-1)
    torch.testing.assert_close(rays.origins + along[:, None] * rays.dirs, g, rtol=1e-9, atol=1e-9)  # on the NDC ray
    distance = space.ray_distance(along, rays, torch.arange(3))
    torch.testing.assert_close(distance, (p - origins).norm(dim=-1), rtol=1e-7, atol=1e-7)


def test_ndc_window_holds_every_training_pixel_ray():
    cams = forward_cameras()
    space = ndc_space(cams, near=2.0)
    fx, fy, cx, cy = cams.intrinsics.T
    for i in range(len(cams)):
        corners = np.array([[-cx[i] / fx[i], -cy[i] / fy[i], 1], [(40 - cx[i]) / fx[i], (30 - cy[i]) / fy[i], 1]])
        dirs = torch.nn.functional.normalize(torch.as_tensor(corners @ cams.c2w[i, :, :3].T), dim=-1)
        origins = torch.as_tensor(space.world_to_unit(cams.centers[i]))[None].expand(2, 3)
        rays = space.march_rays(origins, dirs)
        start, d = rays.origins, rays.dirs
        end = start + d * (2 / d[:, 2:3])
        assert torch.cat([start, end])[:, :2].abs().max() <= 1 + 1e-9


def ring_cameras(target: np.ndarray, radius: float = 3.0) -> Cameras:
    """12 cameras on a ring of `radius` around `target`, a little above it, all looking at it (40 x 30 pixels)."""
    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    target = np.array([1.0, 2.0, 0.5])
    positions = target + radius * np.stack([np.cos(angles), np.sin(angles), 0.3 * np.ones_like(angles)], -1)
    c2w = []
    for pos in positions:
        fwd = (target - pos) / np.linalg.norm(target - pos)
        right = np.cross(fwd, [0, 0, 1.0])
        right /= np.linalg.norm(right)
        c2w.append(np.stack([right, np.cross(fwd, right), fwd, pos], 1))
    return Cameras(np.array(c2w), np.tile([50.0, 50, 20, 15], (12, 1)), np.tile([40, 30], (12, 1)), np.zeros((12, 4)))


def test_contract_space_holds_every_camera_and_centers_on_their_focus():
    target = np.array([1.0, 2.0, 0.5])
    cams = ring_cameras(target)
    space = contract_space(cams)
    np.testing.assert_allclose(space.center, target, atol=1e-6)
    unit = space.world_to_unit(cams.centers)
    assert np.abs(unit).max() <= 1.0 and np.abs(unit).max() > 0.9
    assert space.near == 0


def test_with_a_near_bound_the_contract_box_holds_where_rays_start_and_rays_start_there():
    target = np.array([1.0, 2.0, 0.5])
    cams = ring_cameras(target)
    space = contract_space(cams, near=2.0)  # the ring's radius is 3.16: rays start 1.8 in front of the cameras
    starts = space.world_to_unit(cams.centers + 1.8 * cams.forward)
    assert np.abs(starts).max() <= 1.0 and np.abs(starts).max() > 0.9  # a box 2.4x smaller than the cameras' box
    assert space.near == pytest.approx(1.8 * space.scale)
    model = ball_model(space, resolution=32)
    origins = torch.as_tensor(space.world_to_unit(cams.centers), dtype=torch.float32)
    dirs = torch.as_tensor(cams.forward, dtype=torch.float32)
    cfg = RenderConfig(alpha_min=0.0, transmittance_min=1e-6, color_weight_min=0.0)
    rays = space.march_rays(origins, dirs)
    samples = model.estimator.march(rays, lambda g, cells: (torch.zeros(len(g)), (g,)), 0.02, torch.full((12,), 0.5),
                                    0.0, 1e-6, 16)
    distance = space.ray_distance(samples.t, rays, samples.ray_idx)
    assert distance.min() >= space.near and distance.min() < space.near + 0.05
    result = render_rays(model, origins, dirs, torch.zeros(3), cfg)
    assert result.opacity.min() > 0.99  # every camera still sees the ball (unit-box radius 0.5) in front of it


def test_each_view_starts_its_rays_at_its_own_near_bound_inside_the_box_of_the_nearest():
    """One camera's close content (near 1.0) sets the box for all, but the other cameras' rays start at their own
    bound (2.5), and still reach the ball."""
    target = np.array([1.0, 2.0, 0.5])
    cams = ring_cameras(target)
    cams.near = np.full(len(cams), 2.5)
    cams.near[0] = 1.0
    space = contract_space(cams, near=1.0)
    same = contract_space(Cameras(cams.c2w, cams.intrinsics, cams.sizes, cams.distortion), near=1.0)
    assert space.scale == same.scale and space.near == pytest.approx(0.9 * 1.0 * space.scale)
    model = ball_model(space, resolution=32)
    origins = torch.as_tensor(space.world_to_unit(cams.centers), dtype=torch.float32)
    dirs = torch.as_tensor(cams.forward, dtype=torch.float32)
    near = torch.as_tensor(cams.near * space.scale, dtype=torch.float32)
    rays = space.march_rays(origins, dirs, near)
    samples = model.estimator.march(rays, lambda g, cells: (torch.zeros(len(g)), (g,)), 0.02, torch.full((12,), 0.5),
                                    0.0, 1e-6, 16)
    distance = space.ray_distance(samples.t, rays, samples.ray_idx)
    first = torch.full((12,), np.inf).scatter_reduce(0, samples.ray_idx, distance, "amin")
    torch.testing.assert_close(first, 0.9 * near, atol=0.05, rtol=0)
    assert first[1:].min() > 2 * first[0]  # not where the nearest view's rays start
    cfg = RenderConfig(alpha_min=0.0, transmittance_min=1e-6, color_weight_min=0.0)
    result = render_rays(model, origins, dirs, torch.zeros(3), cfg, near=near)
    assert result.opacity.min() > 0.99


def ball_model(space: Space, resolution: int = 64) -> Model:
    """A model whose density is 20 per unit-box length inside the ball of radius 0.5, SHELL_SIGMA between the
    unit-box radii SHELL (a far shell), zero elsewhere, set at the vertices of a dense grid in `space`."""
    field = SparseVoxelField(SparseVoxelConfig(feature_dim=4), resolution, space)
    grid = field.grid
    g = grid.bricks.slot_vertices().double() * grid.cell_size - 1
    r = space.from_grid(g).norm(dim=-1)
    sigma = torch.where(r < 0.5, 20.0, torch.where((r > SHELL[0]) & (r < SHELL[1]), SHELL_SIGMA, 1e-6)).float()
    with torch.no_grad():
        grid.density.copy_(field.activate.inverse(sigma))
    return Model(field, OccupancyGrid(resolution, space))


@pytest.mark.parametrize("inner", [0.5, 0.75])
def test_contracted_march_integrates_the_background_like_a_dense_world_march(inner):
    space = Contract(far=100.0, inner=inner)
    model = ball_model(space)
    origins = torch.zeros(64, 3) + torch.tensor([0.0, 0.0, 0.9])
    dirs = torch.nn.functional.normalize(torch.randn(64, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    cfg = RenderConfig(alpha_min=0.0, transmittance_min=1e-6, color_weight_min=0.0)
    result = render_rays(model, origins, dirs, torch.zeros(3), cfg)
    # the opacity of each ray through the (analytic) ball and shell, densely in the world
    t = torch.linspace(0, 100, 200001, dtype=torch.float64)[:-1] + 0.00025
    x = origins[:, None].double() + t[None, :, None] * dirs[:, None].double()
    r = x.norm(dim=-1)
    sigma = torch.where(r < 0.5, 20.0, torch.where((r > SHELL[0]) & (r < SHELL[1]), SHELL_SIGMA, 0.0))
    tau = (sigma * 0.0005).sum(-1)
    expected = 1 - torch.exp(-tau)
    assert expected.min() < 0.7 and expected.max() > 0.99  # some rays see only the shell, some the ball
    assert (result.opacity.detach().double() - expected).abs().max() < 0.005


def test_march_in_a_box_space_samples_evenly_through_the_box():
    occupancy = OccupancyGrid(32, Box())
    origins = torch.tensor([[0.0, 0.0, -3.0]]).expand(5, 3)
    targets = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, -0.1, 0.0], [0.1, 0.1, 0.0], [-0.05, 0.1, 0.0]])
    dirs = torch.nn.functional.normalize(targets - origins, dim=-1)
    thin_fog = lambda g, cells: (torch.full((len(g),), 1e-3), (g,))  # noqa: E731
    s = occupancy.march(occupancy.space.march_rays(origins, dirs), thin_fog, 0.03, torch.full((5,), 0.5), 0, 1e-4, 16)
    assert torch.all(s.delta == 0.03)
    length = 2 / dirs[:, 2]  # through the box from z = -1 to z = 1
    counts = torch.bincount(s.ray_idx, minlength=5)
    assert torch.all((counts - length / 0.03).abs() <= 1)


@pytest.mark.parametrize("kind", ["contract", "ndc"])
def test_field_density_takes_unit_box_points_in_every_space(kind):
    space = Contract() if kind == "contract" else ndc_space(forward_cameras(), near=2.0)
    model = ball_model(space, resolution=32)
    density = lambda x: float(model.field.density_at(space.to_grid(torch.tensor([x]))))  # noqa: E731
    assert density([0.0, 0.0, 6.0]) == pytest.approx(SHELL_SIGMA, rel=0.05)
    assert density([0.0, 0.0, 2.5]) < 0.01
    if kind == "contract":
        assert density([0.0, 0.0, 0.1]) > 10  # in the ball (before NDC's near plane)


def test_a_fresh_contracted_field_starts_equally_transparent_per_step_everywhere():
    space = Contract()
    field = SparseVoxelField(SparseVoxelConfig(feature_dim=4), 32, space)
    occupancy = OccupancyGrid(32, space)
    grid = field.grid
    stretch = space.world_step_scale(grid.bricks.cell_centers())
    alpha = -torch.expm1(-occupancy.cell_density(field.density_at) * grid.cell_size * stretch)
    real = grid.bricks.real_cells() & (stretch < 500)  # the outermost cells keep a learnable density
    assert alpha[real].max() < 2 * alpha[real].min()
    assert alpha[real].max() < 0.01  # below the presets' occupancy threshold: untouched space gets pruned


def test_a_contracted_space_keeps_its_inner_share_through_a_checkpoint():
    space = Contract(center=(1.0, 2.0, 3.0), scale=0.5, far=50.0, near=0.1, inner=0.25)
    loaded = space_from_dict(space.to_dict())
    assert loaded.inner_scale == 0.25
    x = torch.randn(100, 3, dtype=torch.float64) * 3
    torch.testing.assert_close(loaded.to_grid(x), space.to_grid(x))
    older = {k: v for k, v in space.to_dict().items() if k != "inner"}  # checkpoints from before the option
    assert space_from_dict(older).inner_scale == 0.5
    with pytest.raises(VoxnerfError, match="inner share"):
        Contract(inner=1.0)
