"""What a training session produced (`TrainOutcome`), and the test scores of a finished run written beside it."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from voxnerf.errors import VoxnerfError
from voxnerf.run.checkpoint import CHECKPOINT
from voxnerf.run.scores import scores_path, write_scores
from voxnerf.train.trainer import Trainer


@dataclass
class TrainOutcome:
    """What `train_run` produced: the run folder, its files, and the test scores (None when interrupted)."""

    out: Path
    steps: int
    seconds: float
    interrupted: bool
    snapshots: list[dict]
    scores: dict | None = None
    scores_file: Path | None = None
    main: bool = True  # rank 0 (or a single process): the rank that wrote the files and scored the run
    stopped_by: int = signal.SIGINT  # the signal that interrupted the run (when `interrupted`)
    unscored: bool = False  # trained to the end, but the final scoring was interrupted (Ctrl-C)

    @property
    def checkpoint(self) -> Path:
        return self.out / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.out / "metrics.csv"


def score(trainer: Trainer, outcome: TrainOutcome) -> None:
    """The test scores of a finished run into `outcome` and OUT/eval.json; Ctrl-C leaves it `unscored`."""
    try:
        outcome.scores = trainer.evaluate(every=trainer.cfg.eval_every_view, write=False, progress=not trainer.quiet)
    except KeyboardInterrupt:
        outcome.interrupted = outcome.unscored = True
        return
    outcome.scores_file = save_scores(outcome.scores, outcome.out)


def save_scores(result: dict, folder: Path) -> Path:
    """`write_scores`, with an unwritable file reported as a VoxnerfError naming it."""
    try:
        return write_scores(result, folder)
    except OSError as e:
        raise VoxnerfError(f"{scores_path(folder, result['split'])}: cannot write the scores ({e.strerror})") \
            from None
