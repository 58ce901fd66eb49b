"""The host: the one platform check (parallel-steps runs on Linux only), and what this machine offers
workers (GPU ids, the default process count, each worker's share of the CPUs).

The local pool waits on workers through `os.pidfd_open`, run roots and side-input copies are
locked with `fcntl.flock`, and `parallel-steps node` ties `ray start` to its parent with
`prctl(PR_SET_PDEATHSIG)`. On another OS the entry points (the CLI, the Airflow operator,
the Prefect task, `run_step`) call `require_linux()` first, so the user reads one line
instead of a worker's traceback.
"""

from __future__ import annotations

import _io
import atexit
import contextlib
import gc
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


def end_process(code: int, close_files: bool = False) -> NoReturn:
    """End this process without the interpreter's teardown, which frees every module and object one by one for
    nothing anyone needs once the process has closed what it wrote: 40-80 ms after a CLI run (most of it
    pydantic's), over a second in a worker holding a torch model (sentence-transformers: 1.1 s here), which
    the run's end waits for. The output is flushed and the exit handlers run (logging's, Ray's, an entry
    script's), as in a normal exit; with `close_files` (a worker: user code ran here), so are the files left
    open, as their finalizers would in the teardown. With a thread still running that is not a daemon, the
    exit is the usual one, which waits for it."""
    main = threading.main_thread()
    if any(thread is not main and not thread.daemon for thread in threading.enumerate()):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream: nothing to flush
            stream.flush()
    atexit._run_exitfuncs()  # what the interpreter's own exit would run
    if close_files:
        _close_open_files()
    os._exit(code)


def _close_open_files() -> None:
    """Close every file object still open (an entry script may never close what it writes, and a normal exit's
    teardown would), the outer ones first: a text or gzip wrapper writes its last bytes
    into the file it wraps as it closes. One pass over the objects the collector tracks: 60 ms with a torch
    model loaded."""
    objects = gc.get_objects()
    # The C base of every file class, text, binary or raw: issubclass of io.IOBase, an ABC, is 50x slower
    kinds = {kind for kind in set(map(type, objects)) if issubclass(kind, _io._IOBase)}
    streams = {sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__}
    standard = {id(layer) for stream in streams for layer in (stream, *_layers(stream))}
    files = [obj for obj in objects if type(obj) in kinds and id(obj) not in standard]
    while files:
        inner = {id(getattr(obj, name, None)) for obj in files for name in ("buffer", "raw", "fileobj")}
        outer = [obj for obj in files if id(obj) not in inner] or files  # a cycle of wrappers: all at once
        for obj in outer:
            with contextlib.suppress(Exception):  # a file that cannot be written any more: as the teardown would
                obj.close()
        files = [obj for obj in files if id(obj) in inner] if len(outer) < len(files) else []


def _layers(stream: object) -> list[object]:
    """The buffer and raw file under a text stream (left open: the process writes to them until its end)."""
    buffer = getattr(stream, "buffer", None)
    return [buffer, getattr(buffer, "raw", None)]
