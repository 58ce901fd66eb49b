"""Incremental reruns at scale: a whole rerun after +1% new files against the fresh run, and the rerun's plan.

    python bench/incremental.py [--run-files 200000] [--item-ms 1] [--files 1000000] [--new-percent 1]
                                [--skip-runs] [--skip-planning]

Runs: `parallel-steps run` over N empty files with random (uuid) names in one folder (mini-batches
of 10, 2 workers, defaults on: reuse, the report), then 1% new files are added all over the
listing and the same command runs again: it lists and stats every file, keeps the earlier plan's
mini-batches (their results are reused) and runs only the new files' mini-batches. Prints both
walls and the rerun's share of the fresh run (issue 26's goal: at most 5% at 200,000 files). The
entry script is bench/overhead.py's with about `--item-ms` of pure-Python work per file (what
scoring costs; with `--item-ms 0` the run does nothing and the rerun's fixed costs, start-up,
listing and one `stat()` per file, are most of both walls).

Planning: N files planned from scratch (every file stat'ed and fingerprinted, the plan written to a
ledger as a run writes it), then the rerun's plan against that earlier plan, in this process. Prints
both walls, their ratio, the peak RSS growth of each and the reuse counts. The sticky planner holds
one text per earlier mini-batch and one 8-byte hash per file (numpy), never a Python object per file.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import SCRIPT, calibrate_loops
from plan_scale import PeakRss

from parallel_steps import FileDataset
from parallel_steps.inputs.incremental import IncrementalPlanner
from parallel_steps.inputs.planner import Planner
from parallel_steps.store.ledger import Ledger


def make_files(folder: str, count: int, rng: random.Random) -> None:
    for _ in range(count):
        open(os.path.join(folder, f"{uuid.UUID(int=rng.getrandbits(128))}.bin"), "wb").close()


def run_step(folder: str, script: str, tmp: str, loops: int) -> float:
    """The wall of one `parallel-steps run` of the folder (bytecode caches on, as after `pip install`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["BENCH_LOOPS"] = str(loops)
    command = [sys.executable, "-m", "parallel_steps.cli", "run", "--entry-script", script, "--input", folder]
    command += ["--mini-batch-size", "10", "--process-count-per-node", "2", "--output", os.path.join(tmp, "out")]
    command += ["--set", f"run_root={os.path.join(tmp, 'runs')}"]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def compare_runs(files: int, new: int, item_ms: float) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder, script = os.path.join(tmp, "in"), os.path.join(tmp, "code", "bench_entry.py")
        os.makedirs(folder)
        os.makedirs(os.path.dirname(script))  # its own folder: the step's code key covers the script's folder
        make_files(folder, files, rng)
        Path(script).write_text(SCRIPT)
        loops = calibrate_loops(item_ms / 1000) if item_ms else 0
        run_step(folder, script, os.path.join(tmp, "warm"), loops)  # writes the bytecode caches, in another run root
        fresh = run_step(folder, script, tmp, loops)
        make_files(folder, new, rng)
        rerun = run_step(folder, script, tmp, loops)
    print(f"runs: {files} files, then {new} new ({item_ms:g} ms of work a file)")
    print(f"  fresh run {fresh:.2f} s, rerun {rerun:.2f} s: the rerun is {100 * rerun / fresh:.1f}% of the fresh run")


def compare_planning(files: int, new: int) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "in")
        os.makedirs(folder)
        make_files(folder, files, rng)
        datasets = [FileDataset(folder)]
        with PeakRss() as scratch_rss:
            start = time.perf_counter()
            ledger = Ledger(os.path.join(tmp, "earlier.sqlite"))
            rows = ((mb, None, None) for mb in Planner(datasets, 10).mini_batches())
            chunk = []
            for row in rows:
                chunk.append(row)
                if len(chunk) == 1000:
                    ledger.add(chunk, descriptors=False)
                    chunk = []
            ledger.add(chunk, descriptors=False)
            ledger.commit()
            scratch = time.perf_counter() - start
        make_files(folder, new, rng)
        with PeakRss() as rerun_rss:
            start = time.perf_counter()
            planner = IncrementalPlanner(datasets, 10, "stat", ledger.plan())
            planned = sum(1 for _ in planner.mini_batches())
            rerun = time.perf_counter() - start
        ledger.close()
    diff = planner.diff
    print(f"planning: {files} files + {new} new; mini-batches planned on the rerun: {planned}")
    print(
        f"  from scratch (plan written to a ledger): {scratch:.2f} s, "
        f"peak RSS growth {(scratch_rss.peak - scratch_rss.base) / 2**20:.0f} MB"
    )
    print(
        f"  the rerun against it:                    {rerun:.2f} s, "
        f"peak RSS growth {(rerun_rss.peak - rerun_rss.base) / 2**20:.0f} MB"
    )
    print(f"  ratio rerun / scratch: {rerun / scratch:.2f}")
    print(
        f"  kept {diff.mini_batches_kept}, new {diff.mini_batches_new}, dropped {diff.mini_batches_dropped}; "
        f"inputs new {diff.inputs_new}, changed {diff.inputs_changed}, deleted {diff.inputs_deleted}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-files", type=int, default=200_000, help="files of the whole runs")
    parser.add_argument("--item-ms", type=float, default=1.0, help="work per file in the runs' run()")
    parser.add_argument("--files", type=int, default=1_000_000, help="files of the planning comparison")
    parser.add_argument("--new-percent", type=float, default=1.0, help="files added before the rerun")
    parser.add_argument("--skip-runs", action="store_true")
    parser.add_argument("--skip-planning", action="store_true")
    args = parser.parse_args()
    if not args.skip_runs:
        compare_runs(args.run_files, round(args.run_files * args.new_percent / 100), args.item_ms)
    if not args.skip_planning:
        compare_planning(args.files, round(args.files * args.new_percent / 100))


if __name__ == "__main__":
    main()
