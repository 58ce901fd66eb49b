"""Entry script of the parallel_run_mapped example DAG: one line per text file, with its word count."""

import os


def run(mini_batch):
    lines = []
    for path in mini_batch:
        with open(path, encoding="utf-8") as file:
            words = len(file.read().split())
        lines.append(f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}: {words}")
    return lines
