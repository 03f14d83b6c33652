"""The row-sparse Adam (voxnerf.train.sparse_adam): updating only the rows a step read gives dense Adam's result."""

import torch

from voxnerf.train.sparse_adam import RowSparseAdam

BETAS, EPS = (0.9, 0.99), 1e-15


def tables(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(300, generator=gen)), torch.nn.Parameter(torch.randn(300, 4, generator=gen))]


def test_row_sparse_steps_match_dense_adam_through_skipped_steps_and_catch_ups():
    """Rows read in some steps and not in others (up to a few hundred steps apart), a decaying learning rate, a
    dense decoder-like parameter beside: after every catch-up the tables and moments are dense Adam's."""
    dense_tables, sparse_tables = tables(0), tables(0)
    dense_mlp = torch.nn.Parameter(torch.ones(5))
    sparse_mlp = torch.nn.Parameter(torch.ones(5))
    dense = torch.optim.Adam([{"params": dense_tables, "lr": 0.1}, {"params": [dense_mlp], "lr": 0.01}],
                             betas=BETAS, eps=EPS, fused=True)
    sparse = RowSparseAdam([{"params": sparse_tables, "lr": 0.1, "row_sparse": True},
                            {"params": [sparse_mlp], "lr": 0.01}], betas=BETAS, eps=EPS, fused=True)
    gen = torch.Generator().manual_seed(1)
    often = torch.arange(0, 40)  # rows read nearly every step; the others now and then (rows 250+: once, early)
    for step in range(400):
        rows = torch.cat([often[torch.rand(40, generator=gen) < 0.8],
                          torch.randperm(210, generator=gen)[:10] + 40,
                          torch.arange(250, 300) if step == 3 else torch.arange(0)]).unique()
        grads = [torch.zeros(300), torch.zeros(300, 4)]
        grads[0][rows] = torch.randn(len(rows), generator=gen)
        grads[1][rows] = torch.randn(len(rows), 4, generator=gen)
        mlp_grad = torch.randn(5, generator=gen)
        for optimizer, params, mlp in ((dense, dense_tables, dense_mlp), (sparse, sparse_tables, sparse_mlp)):
            for group in optimizer.param_groups:
                group["lr"] = (0.1 if len(group["params"]) == 2 else 0.01) * 0.1 ** (step / 400)
            for p, g in zip(params, grads):
                p.grad = g.clone()
            mlp.grad = mlp_grad.clone()
        sparse.set_rows({p: rows for p in sparse_tables})
        dense.step()
        sparse.step()
        if step in (99, 399):  # what a checkpoint or an occupancy update sees
            sparse.catch_up()
            for d, s in zip(dense_tables, sparse_tables):
                assert torch.allclose(d, s, rtol=1e-5, atol=1e-5), (step, (d - s).abs().max())
                for key in ("exp_avg", "exp_avg_sq"):
                    assert torch.allclose(dense.state[d][key], sparse.state[s][key], rtol=1e-3, atol=1e-8)
            assert torch.allclose(dense_mlp, sparse_mlp)
    assert not torch.allclose(sparse_tables[0][250:], tables(0)[0][250:])  # read once, yet they kept moving


def test_rows_not_read_are_not_touched_until_a_catch_up_and_the_state_dict_is_dense_adams():
    params = tables(2)
    sparse = RowSparseAdam([{"params": params, "lr": 0.1, "row_sparse": True}], betas=BETAS, eps=EPS, fused=True)
    for p in params:
        p.grad = torch.ones_like(p)
    sparse.set_rows({p: torch.arange(300) for p in params})
    sparse.step()  # every row has momentum now
    before = params[0].detach().clone()
    for p in params:
        p.grad = torch.zeros_like(p)
        p.grad[:10] = 1.0
    sparse.set_rows({p: torch.arange(10) for p in params})
    sparse.step()
    assert torch.equal(params[0][10:], before[10:]) and not torch.equal(params[0][:10], before[:10])
    state = sparse.state_dict()  # catches every row up first
    assert not torch.equal(params[0][10:], before[10:])
    dense = torch.optim.Adam([{"params": tables(2), "lr": 0.1}], betas=BETAS, eps=EPS, fused=True)
    dense.load_state_dict(state)
    assert float(dense.state[dense.param_groups[0]["params"][0]]["step"]) == 2
