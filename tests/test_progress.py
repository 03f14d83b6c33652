"""What long commands tell the user: plain progress lines off a terminal, and a missing LPIPS said once."""

from __future__ import annotations

import io
import sys

import numpy as np

from voxnerf.run import metrics
from voxnerf.run.scores import score_views
from voxnerf.system.progress import PlainProgress, progress_bar, track


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_progress_is_a_plain_line_every_30_seconds_and_at_the_end():
    log, clock = io.StringIO(), Clock()
    bar = PlainProgress(log, every=30.0, clock=clock)
    for step in range(1, 1001):  # 1000 updates over 100 s
        clock.now = step * 0.1
        bar.n = step / 10
        bar.set_postfix_str(f"step {step}")
        bar.refresh()
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert len(lines) == 4  # at 30, 60, 90 s and the end
    assert lines[0].startswith("voxnerf:  30%") and lines[-1] == "voxnerf: 100%   100.0 s  step 1000"


def test_the_training_bar_is_plain_when_stderr_is_not_a_terminal():
    assert isinstance(progress_bar(disable=False, file=io.StringIO()), PlainProgress)
    assert not isinstance(progress_bar(disable=True, file=io.StringIO()), PlainProgress)


def test_a_missing_lpips_package_is_said_once(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lpips", None)  # import lpips raises ImportError
    metrics.lpips_installed.cache_clear()
    image = np.zeros((16, 16, 3), np.float32)
    rows = score_views([image, image], [image, image]) + score_views([image], [image])
    metrics.lpips_installed.cache_clear()
    assert all("lpips" not in row for row in rows)
    assert capsys.readouterr().err.count("LPIPS is left out") == 1
