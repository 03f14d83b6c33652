"""Marching and compositing: packed rendering against the slow dense reference, and what skipping may change."""

import math

import pytest
import torch
from test_grid import sphere_model, strategy

import voxnerf.scenes as vs
from voxnerf.data.space import ray_box
from voxnerf.render.renderer import RenderConfig, render_rays, sigma_fn
from voxnerf.render.volrend import (_Composite, composite, distortion, exclusive_segment_cumsum,
                                     segment_start_positions)

EXACT = RenderConfig(alpha_min=0.0, transmittance_min=0.0, color_weight_min=0.0)


def rays_at_origin(n: int, seed: int = 0, distance: float = 2.5) -> tuple[torch.Tensor, torch.Tensor]:
    """n rays from a sphere of radius `distance` aimed near the origin (unit-box coordinates)."""
    gen = torch.Generator().manual_seed(seed)
    origins = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1) * distance
    target = (torch.rand(n, 3, generator=gen) - 0.5) * 1.2
    return origins, torch.nn.functional.normalize(target - origins, dim=-1)


def test_exclusive_segment_cumsum_matches_a_loop():
    ray_idx = torch.tensor([0, 0, 0, 2, 2, 5, 5, 5, 5])  # rays 1, 3, 4 and 6 have no samples
    values = torch.arange(1.0, 10.0)
    expected = []
    for r in ray_idx.unique():
        seg = values[ray_idx == r]
        expected += [float(seg[:i].sum()) for i in range(len(seg))]
    starts = segment_start_positions(ray_idx, 7)
    assert starts.tolist() == [0, 0, 0, 3, 3, 5, 5, 5, 5]
    assert exclusive_segment_cumsum(values, starts).tolist() == expected


def test_weights_of_a_uniform_fog_follow_beer_lambert():
    sigma, delta, n = 0.7, 0.05, 40
    out = composite(torch.full((n,), sigma), torch.full((n,), delta), torch.zeros(n, dtype=torch.long),
                    torch.zeros(n, dtype=torch.long), torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), torch.zeros(n), 1)
    assert math.isclose(float(out.weights.sum()), 1 - math.exp(-sigma * delta * n), rel_tol=1e-6)
    assert math.isclose(float(out.opacity[0]), 1 - math.exp(-sigma * delta * n), rel_tol=1e-6)
    assert math.isclose(float(out.weights[-1]), math.exp(-sigma * delta * (n - 1)) * (1 - math.exp(-sigma * delta)),
                        rel_tol=1e-6)


def composited_by_autograd(sigmas, deltas, ray_idx, starts, rgb, colored, distance, n_rays, background=None):
    """`composite`'s sums written as plain tensor operations, differentiated by autograd: the reference."""
    tau = sigmas * deltas
    transmittance = torch.exp(-exclusive_segment_cumsum(tau, starts))
    alphas = 1 - torch.exp(-tau)
    weights = transmittance * alphas
    rays = torch.zeros(n_rays, dtype=sigmas.dtype)
    color = torch.zeros(n_rays, 3, dtype=sigmas.dtype).index_add(0, ray_idx[colored], weights[colored, None] * rgb)
    opacity = rays.index_add(0, ray_idx, weights)
    if background is not None:
        color = color + (1 - opacity).unsqueeze(-1) * background
    return opacity, color, rays.index_add(0, ray_idx, weights * distance), alphas.sum(), weights


@pytest.mark.parametrize("with_background", [False, True])
def test_the_written_out_compositing_gradient_is_autograd_s(with_background):
    gen = torch.Generator().manual_seed(0)
    m, n_rays = 80, 11
    ray_idx = torch.randint(0, n_rays, (m,), generator=gen).sort().values  # some rays get no sample
    sigmas = (torch.rand(m, generator=gen, dtype=torch.float64) * 4).requires_grad_()
    deltas, distance = torch.rand(m, generator=gen, dtype=torch.float64), torch.rand(m, generator=gen, dtype=torch.float64)
    colored = torch.nonzero(torch.rand(m, generator=gen) > 0.3).squeeze(-1)
    rgb = torch.rand(len(colored), 3, generator=gen, dtype=torch.float64, requires_grad=True)
    starts = segment_start_positions(ray_idx, n_rays)
    background = torch.rand(n_rays, 3, generator=gen, dtype=torch.float64) if with_background else None
    args = (deltas, ray_idx, starts, colored, distance, n_rays, background, ray_idx[colored])
    ours = _Composite.apply(sigmas, rgb, *args)
    theirs = composited_by_autograd(sigmas, deltas, ray_idx, starts, rgb, colored, distance, n_rays, background)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    for used in ([0, 1, 2, 3, 4], [1], [4, 0]):  # every output, and a few alone (their gradients come as None)
        def loss(out, used=used):
            return sum((out[i] * torch.linspace(-1, 2, out[i].numel(), dtype=torch.float64).view_as(out[i])).sum()
                       for i in used)

        ours = torch.autograd.grad(loss(_Composite.apply(sigmas, rgb, *args)), [sigmas, rgb], allow_unused=True)
        theirs = torch.autograd.grad(loss(composited_by_autograd(sigmas, deltas, ray_idx, starts, rgb, colored,
                                                                 distance, n_rays, background)), [sigmas, rgb],
                                     allow_unused=True)
        for a, b in zip(ours, theirs):
            assert (a is None) == (b is None or not b.any())
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
                assert a.abs().max() > 1e-3  # a gradient that is there, not zeros on both sides


def test_ray_box_hits_and_misses():
    origins = torch.tensor([[-3.0, 0.0, 0.0], [-3.0, 5.0, 0.0], [0.0, 0.0, 0.0]])
    dirs = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    near, far = ray_box(origins, dirs, torch.tensor([[-1.0] * 3, [1.0] * 3]))
    assert near.tolist()[0] == pytest.approx(2.0) and far.tolist()[0] == pytest.approx(4.0)
    assert far[1] <= near[1]
    assert near[2] == 0 and far[2] == pytest.approx(1.0)


def test_packed_renderer_matches_dense_reference():
    model = sphere_model(32)
    field = model.field
    origins, dirs = rays_at_origin(300)
    step = EXACT.step_ratio * model.estimator.cell_size
    background = torch.tensor([0.2, 0.5, 0.9])
    ours = render_rays(model, origins, dirs, background, EXACT)
    # The reference samples interval midpoints from the same start, so both evaluate the same points.
    near, far = ray_box(origins, dirs, model.estimator.bbox)
    n = int(((far - near) / step).ceil().max())
    with torch.no_grad():
        ref = vs.render_rays(lambda x, d: (field.density_at(x), field.color_at(x, d)), origins, dirs, near,
                             near + n * step, n_samples=n, background=background)
    inside = (near + (torch.arange(n) + 0.5)[:, None] * step < far).T  # samples past the box exit
    assert not bool((ref.weights * ~inside).gt(1e-7).any()), "reference samples outside the box carry weight"
    assert torch.allclose(ours.rgb, ref.rgb, atol=1e-5)
    assert torch.allclose(ours.opacity, ref.opacity, atol=1e-5)
    assert float(ours.opacity.detach().max()) > 0.99, "some rays should hit the sphere"


def test_early_termination_and_skipping_change_no_pixel_by_more_than_1e3():
    model = sphere_model(32)
    strategy().update_occupancy(model)
    origins, dirs = rays_at_origin(500, seed=1)
    background = torch.ones(3)
    exact = render_rays(model, origins, dirs, background, EXACT)
    fast = render_rays(model, origins, dirs, background, RenderConfig(color_weight_min=0.0))
    assert (fast.rgb - exact.rgb).abs().max() <= 1e-3
    assert fast.num_samples < 0.5 * exact.num_samples, "occupancy and early termination should skip most samples"


def test_march_never_samples_an_empty_cell():
    model = sphere_model(32)
    strategy().update_occupancy(model)
    occupancy = model.estimator
    origins, dirs = rays_at_origin(200, seed=2)
    offsets = torch.full((200,), 0.5)
    rays = occupancy.space.march_rays(origins, dirs)
    samples = occupancy.march(rays, sigma_fn(model.field), 0.5 * occupancy.cell_size, offsets, 1e-4, 1e-4, 16)
    x = origins[samples.ray_idx] + samples.t[:, None] * dirs[samples.ray_idx]
    assert bool(occupancy.is_occupied(x).all())
    assert bool((samples.ray_idx[1:] >= samples.ray_idx[:-1]).all()), "samples must be sorted by ray"


def test_the_march_keeps_the_same_samples_in_one_round_or_many():
    model = sphere_model(32)
    strategy().update_occupancy(model)
    occupancy = model.estimator
    origins, dirs = rays_at_origin(300, seed=4)
    offsets = torch.rand(300, generator=torch.Generator().manual_seed(5))
    rays = occupancy.space.march_rays(origins, dirs)
    marched = [occupancy.march(rays, sigma_fn(model.field), 0.5 * occupancy.cell_size, offsets, 1e-4, 1e-2, chunk,
                               color_weight_min=1e-3) for chunk in (1, 3, 128)]
    assert len(marched[-1].ray_idx) > 1000 and 0 < len(marched[-1].colored) < len(marched[-1].ray_idx)
    for samples in marched[:-1]:
        for name in ("ray_idx", "t", "u", "delta", "colored"):
            assert torch.equal(getattr(samples, name), getattr(marched[-1], name)), name
        assert all(torch.equal(a, b) for a, b in zip(samples.lookup, marched[-1].lookup))


def test_distortion_loss_matches_the_pairwise_sum_and_prefers_one_stretch():
    gen = torch.Generator().manual_seed(3)
    counts = [5, 1, 9]
    ray_idx = torch.repeat_interleave(torch.arange(3), torch.tensor(counts))
    s = torch.cat([torch.arange(n, dtype=torch.float64) * 0.1 + torch.rand(1, generator=gen).item() for n in counts])
    w = torch.rand(len(s), generator=gen, dtype=torch.float64) * 0.3
    brute = sum(
        (w[ray_idx == r][:, None] * w[ray_idx == r][None] * (s[ray_idx == r][:, None] - s[ray_idx == r][None]).abs()).sum()
        for r in range(3)) + (w * w).sum() * 0.1 / 3
    torch.testing.assert_close(distortion(w, s, 0.1, segment_start_positions(ray_idx, 3)), brute)
    one_ray = torch.zeros(10, dtype=torch.long)  # the starts of one ray's ten samples
    steps = torch.arange(10, dtype=torch.float64) * 0.1
    gathered = torch.zeros(10, dtype=torch.float64).index_fill(0, torch.tensor([4, 5]), 0.45)
    spread = torch.full((10,), 0.09, dtype=torch.float64)  # the same opacity, smeared along the ray
    assert distortion(gathered, steps, 0.1, one_ray) < 0.3 * distortion(spread, steps, 0.1, one_ray)
