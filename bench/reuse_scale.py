"""Whole-step reuse at scale: a rerun with identical inputs and config restores the output without
starting a worker. Prints the wall of the first run and of the reused rerun, through the step API
and through the `parallel-steps run` command.

    python bench/reuse_scale.py [--files 10000]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from parallel_steps import ParallelRunConfig
from parallel_steps.run.step import run_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        os.makedirs("data")
        for i in range(args.files):
            with open(f"data/{i:07d}.txt", "w") as file:
                file.write(str(i))
        with open("score.py", "w") as file:
            file.write("def run(mini_batch):\n    return mini_batch\n")
        config = ParallelRunConfig(
            entry_script="score.py", inputs=["data"], output="out", run_root="runs", process_count_per_node=2
        )
        start = time.perf_counter()
        first = run_step(config)
        first_wall = time.perf_counter() - start
        start = time.perf_counter()
        again = run_step(config)
        reuse_wall = time.perf_counter() - start
        assert again["reused"]
        assert again["workers_started"] == 0
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "parallel_steps.cli",
                "run",
                "--entry-script",
                "score.py",
                "--input",
                "data",
                "--output",
                "out",
                "--set",
                "run_root=runs",
                "--process-count-per-node",
                "2",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        cli_wall = time.perf_counter() - start
    print(f"{args.files} files, {first['mini_batches_total']} mini-batches")
    print(f"first run:            {first_wall:6.2f} s")
    print(f"reused rerun (API):   {reuse_wall:6.2f} s   ({first_wall / reuse_wall:.0f}x faster)")
    print(f"reused rerun (CLI):   {cli_wall:6.2f} s   (includes interpreter start-up)")


if __name__ == "__main__":
    main()
