"""The host: the one platform check (parallel-steps runs on Linux only), and what this machine offers
workers (GPU ids, the default process count, each worker's share of the CPUs).

The local pool waits on workers through `os.pidfd_open`, run roots and side-input copies are
locked with `fcntl.flock`, and `parallel-steps node` ties `ray start` to its parent with
`prctl(PR_SET_PDEATHSIG)`. On another OS the entry points (the CLI, the Airflow operator,
the Prefect task, `run_step`) call `require_linux()` first, so the user reads one line
instead of a worker's traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import threading
from typing import NoReturn

from .errors import UnsupportedPlatform


def require_linux() -> None:
    """Raise `UnsupportedPlatform` (a `ConfigError`) unless this is Linux."""
    if not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(
            "platform",
            f"{sys.platform!r} is not supported",
            "parallel-steps runs on Linux only; use a Linux machine, container or VM",
        )


def gpu_ids() -> list[str]:
    """GPU ids workers may be pinned to.

    `PARALLEL_STEPS_GPU_COUNT` (for tests and machines without nvidia-smi) wins, then the
    parent's `CUDA_VISIBLE_DEVICES` (its ids, in order; empty means none), then `nvidia-smi -L`.
    """
    count = os.environ.get("PARALLEL_STEPS_GPU_COUNT")
    if count is not None and count.strip():
        return [str(i) for i in range(int(count))]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip() and gpu.strip() != "-1"]
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(i) for i in range(sum(line.startswith("GPU ") for line in listing.splitlines()))]
    return []


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


#: The variables the math libraries read their thread counts from (OpenMP, hence torch; MKL, OpenBLAS,
#: Apple's Accelerate, numexpr, BLIS).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "BLIS_NUM_THREADS",
)


def thread_budget(workers_per_node: int) -> int:
    """A worker's share of this machine's CPUs: without one, every worker's libraries start a thread per
    CPU, and N workers oversubscribe the machine N times (torch in two workers on two cores: 1.35x the
    wall of a hand-written Pool that sets one thread each)."""
    return max(1, cpu_count() // max(1, workers_per_node))


def default_process_count() -> int:
    """ParallelRunStep's default: one worker per GPU on a GPU machine, else one per CPU."""
    return len(gpu_ids()) or cpu_count()


def end_process(code: int) -> NoReturn:
    """End this process without the interpreter's teardown, which frees every module and object one by one for
    nothing anyone needs once the process has closed what it wrote: 40-80 ms after a CLI run (most of it
    pydantic's), over a second in a worker holding a torch model (sentence-transformers: 1.1 s here), which
    the run's end waits for. The output is flushed and the exit handlers run (logging's, Ray's, an entry
    script's), as in a normal exit; with a thread still running that is not a daemon, the exit is the usual
    one, which waits for it."""
    main = threading.main_thread()
    if any(thread is not main and not thread.daemon for thread in threading.enumerate()):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream: nothing to flush
            stream.flush()
    atexit._run_exitfuncs()  # what the interpreter's own exit would run
    os._exit(code)
