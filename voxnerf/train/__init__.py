"""Training: the session (`voxnerf train` as a library) and what it brings together (the preset and configuration,
the image size, the run folder's checks, the outcome and its scores), the loop, its topology strategy, the ray
sampler and image pyramid, data parallelism and its local launcher, and interruption.

May import: every stage below it (`voxnerf.errors`, `system`, `ranges`, `data`, `fields`, `render`, `run`) and the
presets (`voxnerf.configs`); never `export` or `view`.
"""

from voxnerf.train.outcome import TrainOutcome
from voxnerf.train.session import train_run

__all__ = ["TrainOutcome", "train_run"]
