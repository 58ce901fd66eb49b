"""Executor overhead: the whole `parallel-steps run` command against multiprocessing.Pool, same run.

    python bench/overhead.py [--files 200000] [--cpu-files 20000] [--workers 2] [--repeat 5]

Workloads (mini-batches of 10 files):
  overhead  run() returns its input: measures bookkeeping (plan, ledger, logs, output, progress),
            with `report: false` (the executor alone), then with the run report (the default,
            about 0.3 s more here; bench/report.py measures it on its own).
  cpu       about 1 ms of pure-Python work per item: measures what users pay on real work.
The baseline is what one would write by hand: list and chunk the files, then
`multiprocessing.Pool(workers).imap_unordered(run, batches)` writing every row to one file.
Also prints the wall of a one-file run (start-up cost; `--allow-reuse false`, as every run here, so that
its worker starts), the median of `--repeat` runs. Each side runs `--repeat` times, the two
alternating; the ratio is the median of the pairs' ratios (the Pool's own wall varies by a
quarter between identical runs, so one pair says little), printed with their range. Beside each wall,
the CPU its processes used (median): where the cores are busy, more CPU is more wall.

Commands run with bytecode caches, as after `pip install`: PYTHONDONTWRITEBYTECODE is dropped
for them and an untimed one-file run writes the caches first (without caches every start
compiles the package and pydantic again, about 0.2 s).
"""

import argparse
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import os
    LOOPS = int(os.environ.get("BENCH_LOOPS", "0"))

    def work(item):
        total = 0
        for i in range(LOOPS):
            total += i * i
        return item

    def run(mini_batch):
        return [work(p) for p in mini_batch] if LOOPS else mini_batch
""")


def calibrate_loops(target_s: float = 0.001) -> int:
    loops = 10_000
    start = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i
    return max(1, int(loops * target_s / (time.perf_counter() - start)))


def _baseline_run(mini_batch):
    import bench_entry  # the same entry script, imported in the Pool's worker

    return bench_entry.run(mini_batch)


def baseline(folder: str, output: str, workers: int) -> float:
    start = time.perf_counter()
    names = sorted(os.listdir(folder))
    batches = [[os.path.join(folder, n) for n in names[i : i + 10]] for i in range(0, len(names), 10)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool, open(output, "w") as out:
        for rows in pool.imap_unordered(_baseline_run, batches):
            out.writelines(f"{row}\n" for row in rows)
    return time.perf_counter() - start


def ours(folder: str, script: str, output: str, workers: int, root: str, report: bool = False) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_steps.cli",
            "run",
            "--entry-script",
            script,
            "--input",
            folder,
            "--mini-batch-size",
            "10",
            "--process-count-per-node",
            str(workers),
            "--output",
            output,
            "--allow-reuse",
            "false",
            "--set",
            f"run_root={root}",
            "--report",
            str(report).lower(),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    return time.perf_counter() - start


def make_files(folder: str, count: int) -> None:
    os.makedirs(folder)
    for i in range(count):
        open(os.path.join(folder, f"{i:08d}.txt"), "w").close()


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended: the Pool's main process and workers, or a
    run's driver and (its children, reaped by it) workers. On a machine with as many cores as workers, the
    side that needs more CPU waits for it."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def compare(name: str, files: int, loops: int, workers: int, repeat: int, tmp: str, report: bool = False) -> None:
    os.environ["BENCH_LOOPS"] = str(loops)
    folder = os.path.join(tmp, f"in-{name}")
    if not os.path.exists(folder):
        make_files(folder, files)
    pairs, cpu = [], []
    for _ in range(repeat):
        start = cpu_seconds()
        base = baseline(folder, os.path.join(tmp, f"base-{name}.txt"), workers)
        middle = cpu_seconds()
        mine = ours(
            folder,
            os.path.join(tmp, "bench_entry.py"),
            os.path.join(tmp, f"out-{name}"),
            workers,
            os.path.join(tmp, "runs"),
            report,
        )
        pairs.append((base, mine))
        cpu.append((middle - start, cpu_seconds() - middle))
    base, mine = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    base_cpu, mine_cpu = statistics.median(c[0] for c in cpu), statistics.median(c[1] for c in cpu)
    ratios = sorted(m / b for b, m in pairs)
    label = f"{name}{' +report' if report else ''}"
    print(
        f"{label:16} {files:>7} files  Pool {base:6.2f} s (CPU {base_cpu:5.2f} s)   parallel-steps {mine:6.2f} s "
        f"(CPU {mine_cpu:5.2f} s)   ratio {statistics.median(ratios):.2f} "
        f"(median of {repeat} pairs, {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


def install_entry_script(tmp: str) -> None:
    """The bench's entry script in `tmp`, importable here and in workers, its CPU loops off."""
    with open(os.path.join(tmp, "bench_entry.py"), "w") as file:
        file.write(SCRIPT)
    sys.path.insert(0, tmp)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))
    os.environ["BENCH_LOOPS"] = "0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--cpu-files", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        install_entry_script(tmp)
        make_files(os.path.join(tmp, "one"), 1)

        def one_file() -> float:
            return ours(
                os.path.join(tmp, "one"),
                os.path.join(tmp, "bench_entry.py"),
                os.path.join(tmp, "out-one"),
                1,
                os.path.join(tmp, "runs"),
            )

        one_file()  # writes the bytecode caches
        compare("overhead", args.files, 0, args.workers, args.repeat, tmp)
        compare("overhead", args.files, 0, args.workers, args.repeat, tmp, report=True)
        compare("cpu", args.cpu_files, calibrate_loops(), args.workers, args.repeat, tmp)
        os.environ["BENCH_LOOPS"] = "0"
        walls = [one_file() for _ in range(args.repeat)]
        print(
            f"one file  start-up wall {statistics.median(walls):.2f} s (median of {args.repeat}, {min(walls):.2f}-{max(walls):.2f})"
        )


if __name__ == "__main__":
    main()
