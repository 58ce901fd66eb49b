"""What this machine offers workers: GPU ids and the default process count."""

from __future__ import annotations

import os
import shutil
import subprocess


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


def default_process_count() -> int:
    """ParallelRunStep's default: one worker per GPU on a GPU machine, else one per CPU."""
    return len(gpu_ids()) or cpu_count()
