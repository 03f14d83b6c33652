"""Test-only hooks in the workers of a multi-process run, put in place by monkeypatching: run this file where a test
would run `python -m voxnerf` (as the command, or as torchrun's script), hook options first, then `--` and the
voxnerf arguments:

    python tests/rank_hooks.py --dump DIR --fault 1:20:exit -- train SCENE --nproc 2 ...

--dump DIR: every rank saves its final model to DIR/rankR.pt. --fault RANK:STEP:exit|hang: that rank exits (status
3) or hangs at its STEP-th gradient exchange. With --nproc the hooks travel to the spawned workers with the
function they run (`hooked`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

import torch


def dump_final_models(folder: Path) -> None:
    """Every rank saves its model to folder/rankR.pt when its training ends (not after an interruption)."""
    from voxnerf.train.trainer import Trainer

    train = Trainer.train

    def train_and_dump(self) -> dict:
        done = train(self)
        if not done["interrupted"]:
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(self.model.state(), folder / f"rank{self.world.rank}.pt")
        return done

    Trainer.train = train_and_dump


def fail_at(rank: int, step: int, kind: str) -> None:
    """Rank `rank` exits with status 3 ('exit') or sleeps forever ('hang') at its `step`-th gradient exchange."""
    from voxnerf.train.distributed import World

    exchange, steps = World.all_reduce_gradients, []

    def failing(self, *args, **kwargs):
        steps.append(1)
        if self.rank == rank and len(steps) == step:
            print(f"test fault: rank {rank} {kind}s at step {step}", file=sys.stderr, flush=True)
            if kind == "exit":
                os._exit(3)
            while True:
                time.sleep(60)
        return exchange(self, *args, **kwargs)

    World.all_reduce_gradients = failing


def install(dump: Path | None, fault: tuple[int, int, str] | None) -> None:
    if dump is not None:
        dump_final_models(dump)
    if fault is not None:
        fail_at(*fault)


def hooked(dump: Path | None, fault: tuple[int, int, str] | None, fn, *args) -> int:
    """A spawned worker's function: the hooks, then the worker function `fn(*args)` of `voxnerf train --nproc`."""
    install(dump, fault)
    return fn(*args)


def parse_fault(text: str) -> tuple[int, int, str]:
    rank, step, kind = text.split(":")
    assert kind in ("exit", "hang"), text
    return int(rank), int(step), kind


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--fault", type=parse_fault)
    parser.add_argument("voxnerf", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    install(args.dump, args.fault)  # this process: a torchrun worker, or one process
    from voxnerf.cli import train
    from voxnerf.cli.main import main as voxnerf

    launch = train.launch_local  # the workers --nproc spawns install them too
    train.launch_local = lambda nproc, fn, *rest: launch(nproc, functools.partial(hooked, args.dump, args.fault, fn),
                                                         *rest)
    sys.argv = ["voxnerf", *args.voxnerf[args.voxnerf[:1] == ["--"]:]]
    voxnerf()


if __name__ == "__main__":
    main()
