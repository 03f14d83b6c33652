"""A run as it is kept on disk and read back: its configuration, its folder (lock, leftovers, metric rows),
atomic checkpoints, loading a trained run (`load_run`), and scoring rendered views.

Training writes what this package reads, so it sits below `voxnerf.train`: eval, render, export and view load a
run without importing the trainer.
May import: `voxnerf.errors`, `voxnerf.system`, `voxnerf.ranges`, `voxnerf.data`, `voxnerf.fields`, `voxnerf.render`.
"""

from voxnerf.run.load import Run, SceneRecord, load_run
from voxnerf.run.scores import score_split, write_scores

__all__ = ["Run", "SceneRecord", "load_run", "score_split", "write_scores"]
