"""Entry script of the partition example DAGs (dags/parallel_run_partitions.py): one line per readings file,
`<partition>/<file>: <score>`, the score being the readings' sum weighted by a "model" that init() loads.

A line `fail` in a readings file makes run() raise for its mini-batch (how the example shows a partition
that fails). With `--model_loads DIR`, every init() leaves one file in DIR, so a run's model loads can be
counted: one per worker, however many partitions the step runs over.
"""

import argparse
import os
import uuid

WEIGHT = None


def init():
    global WEIGHT
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_loads", default=None)
    args, _ = parser.parse_known_args()
    WEIGHT = 2  # a real script loads its model here, once per worker
    if args.model_loads:
        os.makedirs(args.model_loads, exist_ok=True)
        with open(os.path.join(args.model_loads, f"{os.getpid()}-{uuid.uuid4().hex}.load"), "w") as file:
            file.write(f"{os.getpid()}\n")


def run(mini_batch):
    rows = []
    for path in mini_batch:
        with open(path, encoding="utf-8") as file:
            lines = file.read().split()
        if "fail" in lines:
            raise ValueError(f"{path}: a reading is not a number")
        partition = os.path.basename(os.path.dirname(path))
        rows.append(f"{partition}/{os.path.basename(path)}: {WEIGHT * sum(int(n) for n in lines)}")
    return rows
