"""Linear scale: the whole `parallel-steps run` against multiprocessing.Pool at 10k, 100k and 1M files.

    python bench/scale.py [--sizes 10000,100000,1000000] [--workers 2] [--repeat 3]

Each size is one folder of empty files, mini-batches of 10, `run()` returning its input, with the
default settings (report on, incremental members written). Per size it prints the ratio to the
hand-written Pool of bench/overhead.py (median of `--repeat` alternating pairs, with their range),
the overhead per mini-batch in µs ((parallel-steps - Pool) / mini-batches, medians), the driver's
peak RSS (its VmHWM, read from /proc while it runs: the workers are not counted) and the size of
the run folder (ledger, logs, spools, report). The goals are relative: the ratio at the largest
size close to the one at the middle size, and the driver's memory and run folder bounded.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from overhead import baseline, install_entry_script, make_files  # the same baseline and files as overhead.py


class DriverPeak:
    """The driver's VmHWM (peak resident set), read every few milliseconds until it exits."""

    def __init__(self, pid: int):
        self.path, self.peak_kb = f"/proc/{pid}/status", 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            try:
                with open(self.path) as file:
                    for line in file:
                        if line.startswith("VmHWM:"):
                            self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            except (OSError, ValueError):
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def folder_mb(path: str) -> float:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total / 1e6


def ours(folder: str, script: str, output: str, workers: int, root: str) -> tuple[float, float, float]:
    """Wall, driver peak RSS (MB) and run folder size (MB) of one `parallel-steps run`, defaults on."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = set(os.listdir(root)) if os.path.isdir(root) else set()
    args = ["--entry-script", script, "--input", folder, "--mini-batch-size", "10"]
    args += ["--process-count-per-node", str(workers), "--output", output, "--allow-reuse", "false"]
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "parallel_steps.cli", "run", *args, "--set", f"run_root={root}"],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    peak = DriverPeak(process.pid)
    if process.wait() != 0:
        raise SystemExit(f"parallel-steps run exited with {process.returncode}")
    wall = time.perf_counter() - start
    new = [name for name in os.listdir(root) if name not in before and name.startswith("parallel-run-")]
    return wall, peak.stop(), folder_mb(os.path.join(root, new[0])) if new else 0.0


def measure(size: int, workers: int, repeat: int, tmp: str) -> None:
    folder = os.path.join(tmp, f"in-{size}")
    make_files(folder, size)
    pairs, peaks, sizes = [], [], []
    for _ in range(repeat):
        base = baseline(folder, os.path.join(tmp, "base.txt"), workers)
        wall, peak, run_mb = ours(
            folder,
            os.path.join(tmp, "bench_entry.py"),
            os.path.join(tmp, f"out-{size}"),
            workers,
            os.path.join(tmp, "runs"),
        )
        pairs.append((base, wall))
        peaks.append(peak)
        sizes.append(run_mb)
    ratios = sorted(m / b for b, m in pairs)
    base, mine = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    per_batch_us = (mine - base) / (size / 10) * 1e6
    print(
        f"{size:>9} files  Pool {base:6.2f} s  parallel-steps {mine:6.2f} s  "
        f"ratio {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}, {repeat} pairs)  "
        f"overhead {per_batch_us:5.1f} µs/mini-batch  driver peak RSS {max(peaks):5.0f} MB  "
        f"run folder {max(sizes):5.1f} MB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        install_entry_script(tmp)
        make_files(os.path.join(tmp, "one"), 1)
        ours(
            os.path.join(tmp, "one"),
            os.path.join(tmp, "bench_entry.py"),
            os.path.join(tmp, "out-one"),
            1,
            os.path.join(tmp, "runs"),
        )  # writes the bytecode caches
        for size in (int(s) for s in args.sizes.split(",")):
            measure(size, args.workers, args.repeat, tmp)


if __name__ == "__main__":
    main()
