"""`voxnerf train --nproc N`: N local workers started by torch's elastic launcher, as `torchrun --standalone` starts
them (a c10d rendezvous on a free local port, the RANK / WORLD_SIZE / MASTER_* environment in every worker), with
voxnerf's exit statuses and one line when a worker fails."""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid
from typing import Callable

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from voxnerf.errors import VoxnerfError

REPORTED = (2, 130, 143)  # worker statuses whose worker said why itself: an error line, or stopped by SIGINT / SIGTERM
LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.multiprocessing")  # their failure reports are tracebacks


def launch_local(nproc: int, fn: Callable[..., int], *args) -> int:
    """Run `fn(*args)` in `nproc` spawned processes as ranks 0..nproc-1 of one job on this machine.

    `fn` must be importable (it is pickled by name) and returns the worker's exit status. When one worker fails,
    torch's launcher stops the others (SIGTERM: they save and exit). SIGINT and SIGTERM to this process are passed
    on to the workers, and this waits for them.

    Returns:
        0 when every worker succeeded; else the failed worker's exit status (1 for one killed by a signal), or
        128 + the signal's number when this process was stopped by SIGINT or SIGTERM. A worker that failed without
        saying why (killed, or an exit status other than REPORTED) is reported in one line on stderr.
    """
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    with quiet_loggers(LAUNCHER_LOGGERS):
        try:
            elastic_launch(config, run_worker)(fn, args)
        except ChildFailedError as e:
            return failed_status(*e.get_first_failure(), nproc)
        except SignalException as e:
            return 128 + e.sigval
    return 0


def run_worker(fn: Callable[..., int], args: tuple) -> int:
    """One rank: `fn(*args)`, its VoxnerfError printed as one line (status 2) and Ctrl-C before training started as
    status 130 (training itself stops and saves). A nonzero status ends the process with it."""
    try:
        code = fn(*args)
    except VoxnerfError as e:
        print(f"voxnerf: error: {e}", file=sys.stderr, flush=True)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    if code:
        sys.exit(code)
    return 0


def failed_status(rank: int, failure: ProcessFailure, nproc: int) -> int:
    """The job's exit status for the first worker that failed; one line on stderr unless it said why itself, and
    the traceback of a worker that raised an unexpected exception (a bug, not a user's mistake)."""
    raised = failure.message.get("extraInfo", {}).get("py_callstack") if isinstance(failure.message, dict) else None
    if raised:
        print(f"voxnerf: error: worker {rank} of {nproc} failed:\n{raised}", file=sys.stderr, flush=True)
        return 1
    killed = failure.exitcode < 0
    if killed or failure.exitcode not in REPORTED:
        how = f"was killed by {failure.signal_name()}" if killed else f"exited with status {failure.exitcode}"
        print(f"voxnerf: error: worker {rank} of {nproc} {how}; the other workers were stopped", file=sys.stderr,
              flush=True)
    return 1 if killed else failure.exitcode


@contextlib.contextmanager
def quiet_loggers(names: tuple[str, ...]):
    """While entered, the loggers `names` (and those below them) print nothing: the launcher's own reports of a
    failed worker are multi-line tracebacks, where voxnerf says one line."""
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger.propagate, logger.handlers[:]) for logger in loggers]
    for logger in loggers:
        logger.propagate, logger.handlers = False, [logging.NullHandler()]
    try:
        yield
    finally:
        for logger, (propagate, handlers) in zip(loggers, saved):
            logger.propagate, logger.handlers = propagate, handlers
