"""Subnormal floats are flushed to zero on the CPU (voxnerf.system.denormals): Adam's moments of a row no batch
reads decay to zero instead of into subnormal values, which x86 CPUs compute with in a slow path."""

import platform
import subprocess
import sys

import pytest

X86_ONLY = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="FTZ/DAZ are x86 flags")

UNREAD_ROW = """
import sys, torch
from voxnerf.system.denormals import flush_denormals

if sys.argv[1] == "flush":
    assert flush_denormals()
table = torch.nn.Parameter(torch.ones(2, 4))
adam = torch.optim.Adam([table], betas=(0.9, 0.99), eps=1e-15, fused=True)
for step in range(1000):
    table.grad = torch.zeros(2, 4)
    if step == 0:
        table.grad[1] = 1e-3  # row 1 is read once, then never again: its first moment decays by 0.9 a step
    adam.step()
m = adam.state[table]["exp_avg"][1]
print(int(((m != 0) & (m.abs() < torch.finfo(torch.float32).tiny)).sum()), int((m == 0).sum()))
"""


def unread_row_moments(mode: str) -> tuple[int, int]:
    """(subnormal, zero) entries of the unread row's first moment after 1000 Adam steps."""
    out = subprocess.run([sys.executable, "-c", UNREAD_ROW, mode], capture_output=True, text=True, check=True)
    subnormal, zero = out.stdout.split()
    return int(subnormal), int(zero)


@X86_ONLY
def test_a_rows_decayed_moments_are_zero_not_subnormal():
    # without the flags the moment stops at the smallest subnormal float: 0.9 times it rounds back to it
    assert unread_row_moments("keep") == (4, 0)
    assert unread_row_moments("flush") == (0, 4)


@X86_ONLY
def test_the_trainer_flushes_subnormals(general_scene, tmp_path):
    """A library user's training (a Trainer made in their own process) gets the flags too, not only the CLI's."""
    import torch

    from voxnerf.run.config import load_config
    from voxnerf.train.trainer import Trainer

    tiny = torch.tensor([torch.finfo(torch.float32).tiny])
    torch.set_flush_denormal(False)
    assert (tiny * 0.5).item() > 0
    Trainer(general_scene, load_config(None, [{"threads": 1}]), tmp_path / "run", torch.device("cpu"), quiet=True)
    assert (tiny * 0.5).item() == 0
