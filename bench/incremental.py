"""Incremental reruns at scale: planning a rerun against an earlier plan, against planning from scratch.

    python bench/incremental.py [--files 1000000] [--new 10000]

N empty files are planned from scratch (mini_batch_size 10, files stat'ed and fingerprinted, as a
rerun must), then an earlier plan of them is written as a run would leave it, `--new` files are
added at random places of the listing, and the rerun is planned against the earlier plan.
Prints both walls, their ratio, the peak RSS growth of each, and the reuse counts. The sticky
planner holds one text per earlier mini-batch and one 8-byte hash per file (numpy), never a
Python object per file.
"""

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_scale import PeakRss

from parallel_steps import FileDataset
from parallel_steps.inputs.incremental import IncrementalPlanner
from parallel_steps.inputs.planner import Planner
from parallel_steps.store.ledger import Ledger


def make_files(folder: str, count: int, rng: random.Random) -> None:
    for _ in range(count):
        open(os.path.join(folder, f"{uuid.UUID(int=rng.getrandbits(128))}.bin"), "wb").close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "in")
        os.makedirs(folder)
        make_files(folder, args.files, rng)
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
        make_files(folder, args.new, rng)
        with PeakRss() as rerun_rss:
            start = time.perf_counter()
            planner = IncrementalPlanner(datasets, 10, "stat", ledger.plan())
            planned = sum(1 for _ in planner.mini_batches())
            rerun = time.perf_counter() - start
        ledger.close()
    diff = planner.diff
    print(f"files: {args.files} + {args.new} new; mini-batches planned on the rerun: {planned}")
    print(
        f"planning from scratch (plan written to a ledger): {scratch:.2f} s, "
        f"peak RSS growth {(scratch_rss.peak - scratch_rss.base) / 2**20:.0f} MB"
    )
    print(
        f"planning the rerun against it:                    {rerun:.2f} s, "
        f"peak RSS growth {(rerun_rss.peak - rerun_rss.base) / 2**20:.0f} MB"
    )
    print(f"ratio rerun / scratch: {rerun / scratch:.2f}")
    print(
        f"kept {diff.mini_batches_kept}, new {diff.mini_batches_new}, dropped {diff.mini_batches_dropped}; "
        f"inputs new {diff.inputs_new}, changed {diff.inputs_changed}, deleted {diff.inputs_deleted}"
    )


if __name__ == "__main__":
    main()
