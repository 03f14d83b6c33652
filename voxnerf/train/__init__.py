"""Training: the session (configuration, run folder, train, score), the loop, its topology strategy, the ray
sampler and image pyramid, data parallelism and its local launcher, interruption and the progress bar.

May import: every stage below it (`voxnerf.errors`, `system`, `data`, `fields`, `render`, `run`); never `export`
or `view`.
"""

from voxnerf.train.session import TrainOutcome, train_run

__all__ = ["TrainOutcome", "train_run"]
