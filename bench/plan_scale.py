"""Planning at scale: N empty files planned with mini_batch_size=10; prints files/s and peak RSS growth.

    python bench/plan_scale.py [--files 200000]

The planner streams: it holds one folder's sorted names while listing, never a
Python object per file for the whole run, so the RSS growth stays small.
"""

import argparse
import os
import tempfile
import threading
import time

import psutil

from parallel_steps import FileDataset
from parallel_steps.inputs.planner import Planner


class PeakRss:
    """Samples this process's RSS every few milliseconds in a thread."""

    def __init__(self):
        self.process = psutil.Process()
        self.base = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.files):
            open(os.path.join(folder, f"{i:08d}.bin"), "wb").close()
        with PeakRss() as rss:
            start = time.perf_counter()
            batches = sum(1 for _ in Planner([FileDataset(folder)], 10).mini_batches())
            wall = time.perf_counter() - start
    print(f"files: {args.files}, mini-batches: {batches}")
    print(f"planning: {wall:.2f} s, {args.files / wall:,.0f} files/s")
    print(f"peak RSS growth: {(rss.peak - rss.base) / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
