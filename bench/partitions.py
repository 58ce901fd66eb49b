"""A backfill as one step against the same backfill as one DAG run per partition, on a real Airflow scheduler.

    python bench/partitions.py [--days 30] [--files-per-day 20] [--mini-batch-size 5] [--workers 2]
                               [--model-load-s 1.0] [--item-ms 5] [--parallelism 2]

Needs the Airflow environment (.venvs/airflow). Starts the Airflow of the test suite (tests/airflow/deployment.py:
`airflow db migrate`, then the api-server, the scheduler with the LocalExecutor and the dag-processor, on SQLite,
in a temporary home; `--parallelism` tasks at once), with two DAGs over the same data, `--days` daily partitions
of `--files-per-day` files each:

- one task: `ParallelRunOperator(partitions={"start": ..., "end": ...})`, inputs `.../{partition}`: one step,
  one pool, one `init()` per worker, an asset event per day (`PartitionedAtRuntime`);
- per run (the baseline): the same operator with input and output templated by `{{ dag_run.partition_key }}`,
  one DAG run per day, triggered with its partition key through the REST API (what a backfill of a partitioned
  DAG makes: `airflow backfill create`), each run its own step, pool and `init()` per worker.

The entry script's `init()` is a model load: it sleeps `--model-load-s` (what loading weights costs) and leaves a
file, so the loads are counted; `run()` spends about `--item-ms` of pure-Python work per file. Reuse is off on
both sides. One warm-up run of the per-run DAG (a day outside the range) comes first: the first task of a
fresh Airflow pays for imports the others find cached. Prints, for each side, the wall from the trigger to the
last DAG run's end, the task instances and the model loads, then their ratios (baseline / one task).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "airflow"))

import deployment  # noqa: E402  (tests/airflow/deployment.py: the suite's running Airflow)
from deployment import Deployment, deployed, running_airflow, wait_for_dags  # noqa: E402

USER = "trigger"
ONE_TASK, PER_RUN = "bench_partitions_one_task", "bench_partitions_per_run"
WARM_UP_DAY = "2025-12-31"

SCRIPT = """
import argparse, os, time, uuid

def init():
    global ITEM_S
    parser = argparse.ArgumentParser()
    parser.add_argument("--loads")
    parser.add_argument("--load_s", type=float)
    parser.add_argument("--item_ms", type=float)
    args, _ = parser.parse_known_args()
    time.sleep(args.load_s)  # the model load
    ITEM_S = args.item_ms / 1000
    open(os.path.join(args.loads, f"{os.getpid()}-{uuid.uuid4().hex}"), "w").close()

def run(mini_batch):
    rows = []
    for path in mini_batch:
        end, total = time.perf_counter() + ITEM_S, 0
        while time.perf_counter() < end:
            total += 1
        rows.append(f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}: {total}")
    return rows
"""

DAGS = """
from airflow.sdk import DAG, PartitionedAtRuntime
from parallel_steps.airflow import ParallelRunOperator

STEP = dict(
    entry_script={script!r},
    arguments=["--loads", {loads!r}, "--load_s", "{load_s}", "--item_ms", "{item_ms}"],
    mini_batch_size={size},
    process_count_per_node={workers},
    allow_reuse=False,
)

with DAG(dag_id={one_task!r}, schedule=PartitionedAtRuntime(), catchup=False):
    ParallelRunOperator(
        task_id="score_days",
        inputs={data!r} + "/{{partition}}",
        partitions={{"start": {start!r}, "end": {end!r}}},
        output={out!r} + "/one-task",
        **STEP,
    )

with DAG(dag_id={per_run!r}, schedule=PartitionedAtRuntime(), catchup=False, max_active_runs={parallelism}):
    ParallelRunOperator(
        task_id="score_day",
        inputs={data!r} + "/{{{{ dag_run.partition_key }}}}",
        output={out!r} + "/per-run/{{{{ dag_run.partition_key }}}}",
        **STEP,
    )
"""


def make_data(folder: Path, days: list[str], files: int) -> None:
    for day in days:
        (folder / day).mkdir(parents=True)
        for index in range(files):
            (folder / day / f"file-{index:03d}.txt").write_text(f"{day} {index}\n")


def trigger(airflow: Deployment, dag_id: str, partition_key: str | None = None) -> str:
    body: dict[str, Any] = {"logical_date": None, **({"partition_key": partition_key} if partition_key else {})}
    response = airflow.client(USER).post(f"/api/v2/dags/{dag_id}/dagRuns", json=body)
    assert response.status_code == 200, response.text
    return response.json()["dag_run_id"]


def ended(airflow: Deployment, dag_id: str, run_ids: list[str]) -> list[str]:
    """Wait until every run has ended (polling every 0.1 s); their states."""
    pending, states = set(run_ids), {}

    def probe() -> bool | None:
        for run_id in list(pending):
            state = airflow.client(USER).get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                states[run_id] = state
                pending.discard(run_id)
        return True if not pending else None

    while probe() is None:
        airflow.components.check()
        time.sleep(0.1)
    return [states[run_id] for run_id in run_ids]


def task_instances(airflow: Deployment, dag_id: str, run_ids: list[str]) -> int:
    path = "/api/v2/dags/{dag}/dagRuns/{run}/taskInstances"
    return sum(airflow.client(USER).get(path.format(dag=dag_id, run=run)).json()["total_entries"] for run in run_ids)


def measure(airflow: Deployment, dag_id: str, keys: list[str | None], loads: Path) -> dict[str, Any]:
    before = len(list(loads.iterdir()))
    start = time.perf_counter()
    run_ids = [trigger(airflow, dag_id, key) for key in keys]
    states = ended(airflow, dag_id, run_ids)
    wall = time.perf_counter() - start
    assert set(states) == {"success"}, f"{dag_id}: {states}\n{airflow.components.logs()}"
    return {
        "wall": wall,
        "runs": len(run_ids),
        "task_instances": task_instances(airflow, dag_id, run_ids),
        "loads": len(list(loads.iterdir())) - before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--files-per-day", type=int, default=20)
    parser.add_argument("--mini-batch-size", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="process_count_per_node, both sides")
    parser.add_argument("--model-load-s", type=float, default=1.0)
    parser.add_argument("--item-ms", type=float, default=5.0)
    parser.add_argument("--parallelism", type=int, default=2, help="tasks Airflow runs at once")
    args = parser.parse_args()

    first = date(2026, 1, 1)
    days = [(first + timedelta(days=n)).isoformat() for n in range(args.days)]
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        root = Path(tmp)
        data, loads, script = root / "data", root / "loads", root / "score.py"
        make_data(data, [*days, WARM_UP_DAY], args.files_per_day)
        loads.mkdir()
        script.write_text(SCRIPT)

        @deployed
        def _write_dags(home: Path) -> None:
            source = DAGS.format(
                script=str(script),
                loads=str(loads),
                load_s=args.model_load_s,
                item_ms=args.item_ms,
                size=args.mini_batch_size,
                workers=args.workers,
                one_task=ONE_TASK,
                per_run=PER_RUN,
                data=str(data),
                out=str(root / "out"),
                start=days[0],
                end=days[-1],
                parallelism=args.parallelism,
            )
            (home / "bundles" / "dags" / "bench_partitions.py").write_text(textwrap.dedent(source))

        environment = deployment._environment  # the suite's, with this bench's parallelism
        deployment._environment = lambda home, port: {
            **environment(home, port),
            "AIRFLOW__CORE__PARALLELISM": str(args.parallelism),
        }
        print(
            f"{args.days} daily partitions x {args.files_per_day} files, mini-batches of {args.mini_batch_size}, "
            f"{args.workers} workers per step, init() {args.model_load_s} s, run() {args.item_ms} ms per file, "
            f"Airflow parallelism {args.parallelism}",
            flush=True,
        )
        with running_airflow(root / "airflow") as airflow:
            wait_for_dags(airflow, USER, ONE_TASK, PER_RUN)
            ended(airflow, PER_RUN, [trigger(airflow, PER_RUN, WARM_UP_DAY)])
            baseline = measure(airflow, PER_RUN, list(days), loads)
            one_task = measure(airflow, ONE_TASK, [None], loads)
        for name, result in (("per run (baseline)", baseline), ("one task", one_task)):
            print(
                f"{name:>20}: {result['wall']:7.1f} s, {result['runs']:3d} DAG runs, "
                f"{result['task_instances']:3d} task instances, {result['loads']:3d} model loads"
            )
        print(
            f"{'ratio':>20}: {baseline['wall'] / one_task['wall']:7.1f}x wall, "
            f"{baseline['task_instances'] / one_task['task_instances']:.1f}x task instances, "
            f"{baseline['loads'] / max(one_task['loads'], 1):.1f}x model loads (baseline / one task)"
        )


if __name__ == "__main__":
    main()
