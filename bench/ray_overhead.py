"""Ray backend overhead: `run_step(backend="ray")` against plain Ray actors doing the same calls, same run.

    python bench/ray_overhead.py [--files 20000] [--cpu-files 20000] [--mini-batch-size 10] [--workers 2]
                                 [--repeat 1]

The two workloads of bench/overhead.py: the overhead one, many tiny mini-batches whose run()
returns its input, so the wall is all bookkeeping; the CPU-bound one, about 1 ms of pure-Python
work per item, what users pay on real work (`--cpu-files 0` skips it). Both sides use one local
Ray started here and include starting their actors. The baseline is what one would write by
hand: list and chunk the files, one actor per worker importing the entry script, `ray.wait` over
two calls in flight per actor, every returned row written to one file in mini-batch order.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from overhead import calibrate_loops  # bench/ is the script's folder, first on sys.path

import ray

SCRIPT = textwrap.dedent("""
    LOOPS = {loops}

    def work(item):
        total = 0
        for i in range(LOOPS):
            total += i * i
        return item

    def run(mini_batch):
        return [work(p) for p in mini_batch] if LOOPS else mini_batch
""")


class _PlainWorker:
    """A hand-written Ray worker: import the entry script once, call its run() per mini-batch."""

    def __init__(self, script: str):
        import importlib.util

        spec = importlib.util.spec_from_file_location("bench_entry", script)
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)

    def run(self, mini_batch: list[str]) -> list[str]:
        return self.module.run(mini_batch)


def plain_actors(folder: Path, script: Path, output: Path, workers: int, size: int) -> float:
    start = time.perf_counter()
    names = sorted(os.listdir(folder))
    batches = [[str(folder / n) for n in names[i : i + size]] for i in range(0, len(names), size)]
    actor_class = ray.remote(_PlainWorker).options(num_cpus=0)
    actors = [actor_class.remote(str(script)) for _ in range(workers)]
    results: dict[int, list[str]] = {}
    in_flight: dict = {}
    todo = iter(enumerate(batches))
    for actor in actors * 2:  # two calls in flight per actor, like the driver's queue
        _submit(actor, todo, in_flight)
    while in_flight:
        [ref], _ = ray.wait(list(in_flight), num_returns=1)
        index, actor = in_flight.pop(ref)
        results[index] = ray.get(ref)
        _submit(actor, todo, in_flight)
    with open(output, "w") as out:
        for index in range(len(batches)):
            out.writelines(f"{row}\n" for row in results[index])
    for actor in actors:
        ray.kill(actor)
    return time.perf_counter() - start


def _submit(actor, todo, in_flight: dict) -> None:
    work = next(todo, None)
    if work is not None:
        index, batch = work
        in_flight[actor.run.remote(batch)] = (index, actor)


def parallel_steps(folder: Path, script: Path, output: Path, workers: int, size: int, root: Path) -> float:
    from parallel_steps import ParallelRunConfig
    from parallel_steps.run.step import run_step

    config = ParallelRunConfig(
        entry_script=str(script),
        inputs=[str(folder)],
        output=str(output),
        mini_batch_size=size,
        process_count_per_node=workers,
        backend="ray",
        allow_reuse=False,
        run_root=str(root),
    )
    start = time.perf_counter()
    run_step(config)
    return time.perf_counter() - start


def compare(name: str, root: Path, files: int, loops: int, args: argparse.Namespace) -> None:
    """`--repeat` rounds of both sides on `files` empty files, each item costing `loops` iterations."""
    folder = root / "in"
    folder.mkdir(parents=True)
    for i in range(files):
        (folder / f"{i:08d}.txt").touch()
    script = root / "bench_entry.py"
    script.write_text(SCRIPT.format(loops=loops))
    batches = -(-files // args.mini_batch_size)
    print(f"{name}: {files} files, {batches} mini-batches of {args.mini_batch_size}, {args.workers} workers")
    for round_ in range(args.repeat):
        plain = plain_actors(folder, script, root / f"plain-{round_}.txt", args.workers, args.mini_batch_size)
        ours = parallel_steps(folder, script, root / f"out-{round_}", args.workers, args.mini_batch_size, root / "runs")
        same = (root / f"plain-{round_}.txt").read_bytes() == (
            root / f"out-{round_}" / "parallel_run_step.txt"
        ).read_bytes()
        print(
            f"  plain Ray actors {plain:7.2f} s   parallel-steps (ray) {ours:7.2f} s   ratio "
            f"{ours / plain:.2f}   ({ours / batches * 1000:.2f} vs {plain / batches * 1000:.2f} ms per "
            f"mini-batch; same output: {same})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="input files (default 20000)")
    parser.add_argument("--cpu-files", type=int, default=20_000, help="files of the CPU-bound workload")
    parser.add_argument("--mini-batch-size", type=int, default=10, help="files per mini-batch (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="actors on each side (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of both (default 1)")
    args = parser.parse_args()
    ray.init(address="local", include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            compare("overhead", Path(tmp) / "overhead", args.files, 0, args)
            if args.cpu_files:
                compare("cpu", Path(tmp) / "cpu", args.cpu_files, calibrate_loops(), args)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
