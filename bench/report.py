"""What the run report costs: the same `parallel-steps run` with `report: true` and `report: false`.

    python bench/report.py [--files 200000] [--mini-batch-size 10] [--workers 2] [--repeat 5]

The workload of bench/overhead.py: 20,000 mini-batches of 10 empty files whose run() returns its
input (bookkeeping only, so the report's share is as large as it gets; `--files 1000000` gives a
100,000-mini-batch run). The two settings alternate `--repeat` times; the
difference is the median of the pairs' differences (a pair's two runs differ by a few tenths of a
second from noise alone on a shared machine), the ratio the median of their ratios. Then the
report alone, written again for the last run in a fresh interpreter (its imports included), and the
page's size. Commands run with bytecode caches, as after `pip install` (see bench/overhead.py).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPT = "def run(mini_batch):\n    return mini_batch\n"
WRITE_AGAIN = """
import sys, time
start = time.perf_counter()
from parallel_steps.report import write_report
page = write_report(sys.argv[1])
print(time.perf_counter() - start, page.stat().st_size)
"""


def run(folder: str, root: str, args: argparse.Namespace, report: bool, env: dict) -> tuple[float, str]:
    """Wall seconds of one run, and its run directory."""
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_steps.cli",
            "run",
            "--entry-script",
            os.path.join(folder, "echo.py"),
            "--input",
            os.path.join(folder, "data"),
            "--mini-batch-size",
            str(args.mini_batch_size),
            "--process-count-per-node",
            str(args.workers),
            "--allow-reuse",
            "false",
            "--report",
            str(report).lower(),
            "--set",
            f"run_root={root}",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    summary = json.loads(result.stdout)
    assert (summary["report"] is not None) == report, summary.get("report")
    return wall, summary["run_dir"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--mini-batch-size", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each setting, alternating")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "echo.py"), "w") as file:
            file.write(SCRIPT)
        os.makedirs(os.path.join(folder, "data"))
        for i in range(args.files):
            open(os.path.join(folder, "data", f"{i:08d}.txt"), "w").close()
        root = os.path.join(folder, "runs")
        run(folder, root, args, True, env)  # writes the bytecode caches
        pairs = []
        for _ in range(args.repeat):
            without, _ = run(folder, root, args, False, env)
            with_report, run_dir = run(folder, root, args, True, env)
            pairs.append((without, with_report))
        written = subprocess.run(
            [sys.executable, "-c", WRITE_AGAIN, run_dir], check=True, capture_output=True, text=True, env=env
        ).stdout.split()
    differences = sorted(mine - base for base, mine in pairs)
    ratios = sorted(mine / base for base, mine in pairs)
    print(
        f"{args.files // args.mini_batch_size} mini-batches of {args.mini_batch_size} files, {args.workers} workers: "
        f"run without report {statistics.median(p[0] for p in pairs):.2f} s, "
        f"with report {statistics.median(p[1] for p in pairs):.2f} s; "
        f"difference {statistics.median(differences):+.2f} s ({differences[0]:+.2f} to {differences[-1]:+.2f}), "
        f"ratio {statistics.median(ratios):.2f} (median of {args.repeat} pairs)"
    )
    print(
        f"report alone, in a fresh interpreter with its imports: {float(written[0]):.2f} s, {int(written[1]) / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
