"""Object storage: parallel-steps reading from moto's S3 server and Azurite against a hand-written fetch.

    python bench/objstore.py [--small 5000] [--large 200] [--plan-objects 20000] [--repeat 3] [--ranges 1]

It starts both servers itself (tests/storage_servers.py: moto[server] from the test extra,
Azurite from .venvs/azurite) on loopback ports and stops them at the end.

  files     on each server, `--small` objects of 1 KB and `--large` objects of 4 MB, mini-batches of 50
            (small) or 5 (large), 2 workers; run() reads each local copy. The baseline is what one
            writes by hand: multiprocessing.Pool(2) over the same mini-batches, each fetching its
            objects in one batched `fs.get(list, list)` into a temporary folder, reading them, removing
            them. The sides alternate; the ratio is the median of `--repeat` pairs (goal <= 1.1x).
  planning  `--plan-objects` objects on moto: the Planner's mini-batches (a fresh run's streamed plan,
            a whole plan, an incremental rerun's) against the bare detailed listing `fs.find(detail=True)`
            (goal <= 1.3x), each the median of 3 rounds that take them in turn.
  ranges    a 50 MB Parquet file of 10 row groups read as 10 mini-batches through a counting proxy:
            bytes fetched (planning and workers) against the file's size (goal <= 1.2x).
  read-ahead  a Parquet table of `--read-ahead` row groups of 2 MB on moto behind a proxy that adds 30 ms to
            every request (a store farther than loopback), each mini-batch's run() 0.3 s of CPU work, 2
            workers: the default `read_ahead` against `read_ahead: 0`, alternating; walls and the share of
            the workers' time spent waiting for input (run.json's worker_time).
"""

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from parallel_steps import ParallelRunConfig  # noqa: E402
from parallel_steps.config.secrets import storage_settings  # noqa: E402
from parallel_steps.inputs.incremental import IncrementalPlanner  # noqa: E402
from parallel_steps.inputs.members import EarlierBatch, encode_members  # noqa: E402
from parallel_steps.inputs.planner import Planner  # noqa: E402
from parallel_steps.run.step import run_step  # noqa: E402
from parallel_steps.storage import options as storage_options  # noqa: E402
from storage_servers import FaultProxy, azure_store, s3_store, started_servers  # noqa: E402

SCRIPT = textwrap.dedent("""
    import os

    def run(mini_batch):
        return [f"{os.path.basename(path)} {len(open(path, 'rb').read())}" for path in mini_batch]
""")


# The baseline: a Pool whose workers batch-fetch each mini-batch -------------------------------------------


def _baseline_init(protocol, options):
    global _fs
    import fsspec

    _fs = fsspec.filesystem(protocol, **options)


def _baseline_run(batch):
    folder = tempfile.mkdtemp(prefix="bench-baseline-")
    try:
        local = [os.path.join(folder, str(i), url.rsplit("/", 1)[-1]) for i, url in enumerate(batch)]
        for path in local:
            os.makedirs(os.path.dirname(path))
        _fs.get([url.split("://", 1)[1] for url in batch], local)
        return [f"{os.path.basename(path)} {len(open(path, 'rb').read())}" for path in local]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def baseline(store, urls, batch_size, out):
    batches = [urls[i : i + batch_size] for i in range(0, len(urls), batch_size)]
    started = time.perf_counter()
    fs = store.filesystem()  # listing, as a hand-written job does too
    fs.invalidate_cache()
    fs.find(store.root.split("://", 1)[1] + "/" + urls[0].split("/")[-2], detail=True)
    context = multiprocessing.get_context("forkserver")
    with (
        context.Pool(2, _baseline_init, (store.scheme[:-3], store.resolved_options())) as pool,
        open(out, "w") as file,
    ):
        for rows in pool.imap(_baseline_run, batches):
            file.writelines(row + "\n" for row in rows)
    return time.perf_counter() - started


def ours(store, folder_url, batch_size, work):
    config = ParallelRunConfig(
        entry_script=str(work / "score.py"),
        inputs=[folder_url],
        mini_batch_size=batch_size,
        process_count_per_node=2,
        output=str(work / "out"),
        run_root=str(work / "runs"),
        allow_reuse=False,
        report=False,
        resource_monitor_interval=0,
        storage_options=store.storage_options(),
    )
    started = time.perf_counter()
    summary = run_step(config)
    elapsed = time.perf_counter() - started
    assert summary["status"] == "Succeeded", summary["status_reason"]
    shutil.rmtree(work / "runs", ignore_errors=True)
    return elapsed


def compare_files(name, store, folder, count, batch_size, repeat, work):
    urls = sorted(store.listing(store.url(folder)))
    assert len(urls) == count, (len(urls), count)
    pairs = []
    for _ in range(repeat):
        theirs = baseline(store, urls, batch_size, work / "baseline.txt")
        mine = ours(store, store.url(folder), batch_size, work)
        pairs.append((mine, theirs))
    ratios = [mine / theirs for mine, theirs in pairs]
    mine, theirs = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(
        f"{name:<28} parallel-steps {mine:6.2f} s ({count / mine:6.0f} obj/s)   Pool+fs.get {theirs:6.2f} s "
        f"({count / theirs:6.0f} obj/s)   ratio {statistics.median(ratios):.2f}x "
        f"(range {min(ratios):.2f}-{max(ratios):.2f})",
        flush=True,
    )


# Planning ---------------------------------------------------------------------------------------------


def compare_planning(store, folder, count):
    url = store.url(folder)
    config = ParallelRunConfig(inputs=[url], mini_batch_size=50, storage_options=store.storage_options())
    fs = store.filesystem()
    inner = url.split("://", 1)[1]

    def listing():
        fs.invalidate_cache()
        return len(fs.find(inner, detail=True))

    def plan(defer):
        fs.invalidate_cache()
        return sum(mb.items for mb in Planner(config.inputs, 50, defer_files=defer).mini_batches())

    def incremental():
        fs.invalidate_cache()
        return sum(
            len(p.mini_batch.paths) for p in IncrementalPlanner(config.inputs, 50, "stat", earlier).mini_batches()
        )

    with storage_options.using(storage_settings(config)):
        earlier = [
            EarlierBatch(mb.index, encode_members(mb.paths), None, mb.fingerprint)
            for mb in Planner(config.inputs, 50).mini_batches()
        ]
        steps = {"listing": listing, "fresh": lambda: plan(True), "whole": lambda: plan(False)}
        steps["incremental"] = incremental
        runs: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(3):  # the listing and each plan in turn, three rounds
            for name, step in steps.items():
                started = time.perf_counter()
                assert step() == count
                runs[name].append(time.perf_counter() - started)
        times = {name: statistics.median(seconds) for name, seconds in runs.items()}
    base = times.pop("listing")
    print(f"planning {count} objects (s3): bare detailed listing {base:.2f} s", flush=True)
    for name, seconds in times.items():
        print(f"    {name:<12} plan {seconds:.2f} s   ratio {seconds / base:.2f}x", flush=True)


# Range requests ---------------------------------------------------------------------------------------


def put_table(store, path, rows, row_groups):
    """A Parquet table of `rows` rows in `row_groups` uncompressed row groups, written at `path` and put under
    `t/` on the store; the path and the size of one row group (a mini-batch each)."""
    table = pa.table({"id": np.arange(rows), "x": np.random.default_rng(0).random(rows)})
    pq.write_table(table, path, row_group_size=rows // row_groups, compression="none")
    store.put(path, "t", path.name)
    return path, pq.ParquetFile(path).metadata.row_group(0).total_byte_size


def table_step(store, script, mini_batch_size):
    """The fields of a 2-worker step over the store's `t/` table, with neither report nor monitor."""
    return dict(
        entry_script=str(script),
        inputs=[{"type": "tabular", "path": store.url("t")}],
        mini_batch_size=mini_batch_size,
        process_count_per_node=2,
        run_root=str(script.parent / "runs"),
        report=False,
        resource_monitor_interval=0,
        storage_options=store.storage_options(),
    )


def compare_ranges(moto, work):
    proxy = FaultProxy(moto.port)
    try:
        store = s3_store(proxy.endpoint, "ranges")
        path, row_group = put_table(store, work / "big.parquet", 3_200_000, 10)
        size = path.stat().st_size
        (work / "ids.py").write_text("def run(frame):\n    return frame[['id']]\n")
        config = ParallelRunConfig(
            **table_step(store, work / "ids.py", row_group),
            output=str(work / "ranges-out"),
            append_row_file_name="ids.parquet",
        )
        proxy.reset_counts()
        summary = run_step(config)
        assert summary["status"] == "Succeeded", summary["status_reason"]
        print(
            f"ranges: {size / 2**20:.0f} MB Parquet, {summary['mini_batches_total']} mini-batches: "
            f"{proxy.bytes_fetched / 2**20:.1f} MB fetched in {len(proxy.requests)} requests, "
            f"ratio {proxy.bytes_fetched / size:.2f}x the file",
            flush=True,
        )
    finally:
        proxy.down()


READ_AHEAD_SCRIPT = """
import time

def run(frame):
    end = time.process_time() + 0.3  # a model's CPU work
    while time.process_time() < end:
        pass
    return frame[["id"]]
"""


def compare_read_ahead(moto, work, row_groups, repeat):
    proxy = FaultProxy(moto.port)
    proxy.latency_s = 0.03
    try:
        store = s3_store(proxy.endpoint, "read-ahead")
        _, row_group = put_table(store, work / "ahead.parquet", 250_000 * row_groups, row_groups)
        (work / "busy.py").write_text(READ_AHEAD_SCRIPT)
        fields = dict(**table_step(store, work / "busy.py", row_group), allow_reuse=False)
        walls, waits = {"on": [], "off": []}, {"on": [], "off": []}
        for _ in range(repeat):
            for side, size in (("on", "256MB"), ("off", 0)):
                start = time.perf_counter()
                summary = run_step(ParallelRunConfig(**fields, read_ahead=size, output=str(work / f"ahead-{side}")))
                walls[side].append(time.perf_counter() - start)
                waits[side].append(summary["worker_time"]["input_share"])
        on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
        print(
            f"read-ahead: {row_groups} mini-batches of 2 MB, 30 ms a request, 0.3 s of work each: "
            f"read_ahead on {on:.2f} s (waiting for input {statistics.median(waits['on']):.1%}), "
            f"off {off:.2f} s (waiting {statistics.median(waits['off']):.1%}); on/off {on / off:.2f}x",
            flush=True,
        )
    finally:
        proxy.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=5000)
    parser.add_argument("--large", type=int, default=200)
    parser.add_argument("--plan-objects", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ranges", type=int, default=1, help="0 leaves the Parquet range reads out")
    parser.add_argument("--read-ahead", type=int, default=20, help="row groups of the read-ahead table; 0: none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, started_servers(Path(tmp)) as (moto, azurite):
        work = Path(tmp)
        (work / "score.py").write_text(SCRIPT)
        for variable in [*moto.env, *azurite.env]:
            os.environ.pop(variable, None)  # the stores are reached through storage_options only
        stores = {
            "s3 (moto)": s3_store(moto.endpoint, "bench"),
            "abfs (Azurite)": azure_store(azurite.endpoint, "bench"),
        }
        for store in stores.values():
            os.environ.update(store.env)
            fs = store.filesystem()
            small = {store.url("small", f"f{i:05d}.txt").split("://")[1]: os.urandom(1024) for i in range(args.small)}
            fs.pipe(small)
            large = os.urandom(4 << 20)
            fs.pipe({store.url("large", f"g{i:04d}.bin").split("://")[1]: large for i in range(args.large)})
        print(f"{os.cpu_count()} CPUs; objects on loopback servers; median of {args.repeat} pairs", flush=True)
        for name, store in stores.items():  # a count of 0 leaves a workload out
            if args.small:
                compare_files(f"{name} {args.small} x 1 KB", store, "small", args.small, 50, args.repeat, work)
            if args.large:
                compare_files(f"{name} {args.large} x 4 MB", store, "large", args.large, 5, args.repeat, work)
        if args.plan_objects:
            s3 = stores["s3 (moto)"]
            s3.filesystem().pipe({s3.url("plan", f"p{i:05d}").split("://")[1]: b"x" for i in range(args.plan_objects)})
            compare_planning(s3, "plan", args.plan_objects)
        if args.ranges:
            compare_ranges(moto, work)
        if args.read_ahead:
            compare_read_ahead(moto, work, args.read_ahead, args.repeat)


if __name__ == "__main__":
    main()
