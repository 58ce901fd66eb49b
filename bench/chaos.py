"""Soak test: `parallel-steps run` under random faults for a given time, then check every row and every process.

    python bench/chaos.py [--backend local|ray] [--minutes 10] [--seed 1] [--files N] [--hangs 5] [--workers N]
                          [--work-ms 10] [--nodes 3]

Runs a step of `--files` one-file mini-batches (small files in a temp folder; the entry script
returns one row per input, so the output can be checked), `--hangs` of them hanging: a marker
file names the input, run() consumes it and sleeps past run_invocation_timeout (so only that
attempt hangs). While it runs, it injects at random:

  worker SIGKILL   (local) a random worker process of the driver (one that finished init())
  actor SIGKILL    (ray) a random Ray worker process running our actor's run()
  raylet SIGKILL   (ray) the raylet of a random worker node (its workers go with it); a new
                   node joins 5 s later, and the node index's slots start there
  driver SIGKILL   the `parallel-steps run` process; it starts again in the same run directory
  driver SIGTERM   a graceful cancel (half of them followed by a second SIGTERM: stop at once);
                   it starts again in the same run directory

With `--backend ray` the bench first starts a local Ray cluster of `--nodes` nodes (a head and
worker nodes, all on this machine; chaos_backends.py) and points the step at it (`ray_address`,
`node_count`); it shuts the cluster down at the end, before the last check.

When a run succeeds its output is checked (every row exactly once) and a new run starts over
fresh inputs, until the time is up; then faults stop and the last run finishes. Every driver
that ended (killed or not) must have no worker left 5 s later, and at the end no process of
the soak may be alive anywhere on the machine (psutil: a cmdline naming the soak's folder, or
the soak's tag in the environment: Ray's raylets and workers too), and no file may be left in the
soak's TMPDIR. Prints what it did as a table; exits 1 if anything was lost, duplicated, left
behind, or a run ended otherwise than expected. The choices are seeded (`--seed`); their timing
follows the machine, so two runs with one seed differ.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
from chaos_backends import DRIVER_FAULTS, LocalBackend, RayBackend, backend, cmdline_has

ENTRY_SCRIPT = textwrap.dedent("""
    import os
    import sys
    import time

    HANG_DIR, WORK_S = sys.argv[1], float(sys.argv[2])

    def run(mini_batch):
        rows = []
        for path in mini_batch:
            name = os.path.basename(path)
            try:
                os.unlink(os.path.join(HANG_DIR, name))  # consumed: only this attempt hangs
            except FileNotFoundError:
                pass
            else:
                time.sleep(3600)
            time.sleep(WORK_S)
            with open(path) as file:
                rows.append(f"{name} {file.read().strip()}")
        return rows
""")

TAG = "PARALLEL_STEPS_CHAOS"  # in every driver's, worker's and Ray process's environment
RUN_INVOCATION_TIMEOUT_S = 3
RUN_MAX_TRY = 10  # a mini-batch may be hit by several faults; it must not run out of attempts
ORPHAN_GRACE_S = 5.0  # how long a worker may outlive its driver
LAST_RUN_LIMIT_S = 300.0  # the run in progress when the time is up must end within this
TICK_S = 0.1


@dataclasses.dataclass
class Run:
    """One step run over its own inputs, driven (and restarted) until it succeeds."""

    number: int
    folder: Path
    expected: set[str]
    driver: subprocess.Popen | None = None
    starts: int = 0
    killed: bool = False  # the current driver was SIGKILLed
    cancels_sent: int = 0  # SIGTERMs sent to the current driver
    workers: dict[int, psutil.Process] = dataclasses.field(default_factory=dict)  # seen of the current driver
    unexpected_exits: list[str] = dataclasses.field(default_factory=list)
    summary: dict | None = None

    @property
    def inputs(self) -> Path:
        return self.folder / "inputs"

    @property
    def run_dir(self) -> Path:
        return self.folder / "run"

    @property
    def output(self) -> Path:
        return self.folder / "output"


@dataclasses.dataclass
class Check:
    """What one run's output held."""

    rows: int
    lost: int
    duplicated: int
    unexpected: int


class Soak:
    """The fault loop, the runs it drove and what it found."""

    def __init__(self, args: argparse.Namespace, backend: LocalBackend | RayBackend):
        self.args = args
        self.backend = backend
        self.rng = random.Random(args.seed)
        self.root = Path(tempfile.mkdtemp(prefix="parallel-steps-chaos-"))
        self.hang_dir = self.root / "hang"
        self.hang_dir.mkdir()
        (self.root / "tmp").mkdir()
        self.env = {TAG: str(self.root), "TMPDIR": str(self.root / "tmp")}
        os.environ.update(self.env)  # so that what the backend starts here (a Ray cluster) carries them
        self.step_file: Path | None = None
        self.faults: collections.Counter[str] = collections.Counter()
        self.runs: list[tuple[Run, Check]] = []
        self.orphans: list[str] = []
        self.hangs_happened = 0
        self._watch: list[tuple[float, list[psutil.Process]]] = []  # (when, workers of an ended driver)

    def _write_step(self) -> Path:
        script = self.root / "chaos_entry.py"
        script.write_text(ENTRY_SCRIPT)
        step = dict(
            name="chaos-soak",
            entry_script=str(script),
            mini_batch_size=1,
            process_count_per_node=self.args.workers,
            run_invocation_timeout=RUN_INVOCATION_TIMEOUT_S,
            run_max_try=RUN_MAX_TRY,
            resource_monitor_interval=0,
            run_root=str(self.root / "runs"),
            arguments=[str(self.hang_dir), str(self.args.work_ms / 1000)],
            **self.backend.step_fields(),
        )
        path = self.root / "step.yaml"
        path.write_text(json.dumps(step))  # JSON is YAML
        return path

    # Runs -----------------------------------------------------------------------------------

    def new_run(self) -> Run:
        number = len(self.runs) + 1
        run = Run(number, self.root / f"r{number:03d}", set())
        run.inputs.mkdir(parents=True)
        for i in range(self.args.files):
            name, content = f"r{number:03d}-f{i:05d}.txt", f"{number}:{i}:{self.rng.getrandbits(32):08x}"
            (run.inputs / name).write_text(content + "\n")
            run.expected.add(f"{name} {content}")
        for i in self.rng.sample(range(self.args.files), self.args.hangs):
            (self.hang_dir / f"r{number:03d}-f{i:05d}.txt").touch()
            self.faults["hang"] += 1
        self.start_driver(run)
        return run

    def start_driver(self, run: Run) -> None:
        run.starts += 1
        run.killed, run.cancels_sent = False, 0
        run.workers = {}
        command = [sys.executable, "-m", "parallel_steps.cli", "run", str(self.step_file), "--json"]
        command += ["--input", str(run.inputs), "--output", str(run.output), "--run-dir", str(run.run_dir)]
        env = {**os.environ, **self.env}
        with open(run.folder / f"driver-{run.starts}.out", "wb") as out, open(run.folder / "driver.err", "ab") as err:
            run.driver = subprocess.Popen(command, stdout=out, stderr=err, cwd=self.root, env=env)

    def driver_ended(self, run: Run) -> bool:
        """Handle a driver that exited; True when the run is over (succeeded, or given up)."""
        code = run.driver.returncode
        self._watch.append((time.monotonic() + ORPHAN_GRACE_S, list(run.workers.values())))
        if code == 0:
            lines = (run.folder / f"driver-{run.starts}.out").read_text().splitlines()
            run.summary = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
            return True
        if not (run.killed or (run.cancels_sent and code in (1, -signal.SIGTERM))):
            run.unexpected_exits.append(f"start {run.starts} exited with {code}")
            if len(run.unexpected_exits) >= 3:
                return True
        self.start_driver(run)  # resumes in the same run directory
        return False

    def check(self, run: Run) -> Check:
        output = run.output / "parallel_run_step.txt"
        rows = output.read_text().splitlines() if output.exists() else []
        seen = collections.Counter(rows)
        check = Check(
            rows=len(rows),
            lost=len(run.expected - seen.keys()),
            duplicated=sum(count - 1 for row, count in seen.items() if row in run.expected),
            unexpected=sum(count for row, count in seen.items() if row not in run.expected),
        )
        leftover_hangs = [p for p in self.hang_dir.iterdir() if p.name.startswith(f"r{run.number:03d}-")]
        self.hangs_happened += self.args.hangs - len(leftover_hangs)
        for path in leftover_hangs:
            path.unlink()
        return check

    # Faults ---------------------------------------------------------------------------------------

    def inject(self, kind: str, run: Run) -> None:
        if kind == self.backend.worker_fault:
            workers = [w for w in self.backend.workers(run.driver.pid) if self.backend.killable(w)]
            if workers:
                self.rng.choice(workers).send_signal(signal.SIGKILL)
                self.faults[kind] += 1
        elif kind not in DRIVER_FAULTS:
            self.faults[kind] += self.backend.inject(kind, self.rng)
        elif kind == "driver SIGKILL":
            self.note_workers(run)
            run.driver.kill()
            run.killed = True
            self.faults[kind] += 1
        elif kind == "driver SIGTERM":
            run.driver.send_signal(signal.SIGTERM)
            run.cancels_sent += 1
            self.faults[kind] += 1
            if self.rng.random() < 0.5:
                time.sleep(self.rng.uniform(0, 1))
                run.driver.send_signal(signal.SIGTERM)
                run.cancels_sent += 1
                self.faults["second SIGTERM"] += 1

    # Orphans ----------------------------------------------------------------------------------------

    def note_workers(self, run: Run) -> None:
        """Remember the driver's workers: once it ends, each must be gone within ORPHAN_GRACE_S."""
        for worker in self.backend.workers(run.driver.pid):
            run.workers.setdefault(worker.pid, worker)

    def check_watched(self, force: bool = False) -> None:
        due = [w for w in self._watch if force or w[0] <= time.monotonic()]
        self._watch = [w for w in self._watch if w not in due]
        for _, workers in due:
            self.orphans += [describe(w) for w in workers if alive(w)]

    def machine_wide_leftovers(self) -> list[str]:
        """Every process on the machine that belongs to the soak (after a grace for the last ones to go)."""
        deadline = time.monotonic() + 2 * ORPHAN_GRACE_S
        while (left := soak_processes(str(self.root))) and time.monotonic() < deadline:
            time.sleep(TICK_S)
        return [describe(p) for p in left]

    # The loop ---------------------------------------------------------------------------------------

    def soak(self) -> float:
        self.backend.start(self.root)
        self.step_file = self._write_step()
        started = time.monotonic()
        end = started + 60 * self.args.minutes
        intervals = self.backend.intervals
        due = {kind: started + self.rng.expovariate(1 / mean) for kind, mean in intervals.items()}
        run = self.new_run()
        last_run_limit = None
        while True:
            now = time.monotonic()
            if run.driver.poll() is not None and self.driver_ended(run):
                self.finish(run)
                if now >= end:
                    break
                run = self.new_run()
            if now < end:
                for kind in [k for k, t in due.items() if t <= now]:
                    due[kind] = now + self.rng.expovariate(1 / intervals[kind])
                    if run.driver.poll() is None:
                        self.inject(kind, run)
            elif last_run_limit is None:
                last_run_limit = now + LAST_RUN_LIMIT_S
            elif now > last_run_limit:
                run.driver.kill()
                run.unexpected_exits.append(f"did not end within {LAST_RUN_LIMIT_S:g} s after the time was up")
                run.driver.wait()
                self.finish(run)
                break
            self.backend.tick()
            self.note_workers(run)
            self.check_watched()
            time.sleep(TICK_S)
        self.check_watched(force=True)
        return time.monotonic() - started

    def finish(self, run: Run) -> None:
        check = self.check(run)
        self.runs.append((run, check))
        status = run.summary["status"] if run.summary else "no summary"
        print(
            f"run {run.number}: {status}, {run.starts} driver starts, {check.rows} rows, {check.lost} lost, "
            f"{check.duplicated} duplicated, {check.unexpected} unexpected"
            + (f"; {'; '.join(run.unexpected_exits)}" if run.unexpected_exits else ""),
            flush=True,
        )
        if not (check.lost or check.duplicated or check.unexpected or run.unexpected_exits):
            shutil.rmtree(run.folder)  # keep only what failed, for a look


def soak_processes(root: str) -> list[psutil.Process]:
    """Processes anywhere on the machine that name the soak's folder or carry its tag."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if cmdline_has(process, root) or process.environ().get(TAG) == root:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return [p for p in found if alive(p)]


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:120]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def report(soak: Soak, wall_s: float, leftovers: list[str]) -> bool:
    """Print the table; True when nothing was lost, duplicated, left behind or unexpected."""
    checks = [check for _, check in soak.runs]
    summaries = [run.summary for run, _ in soak.runs if run.summary]
    files_left = [path for path in (soak.root / "tmp").rglob("*") if path.is_file()]
    rows = [
        ("backend", soak.backend.name),
        *(("faults: " + kind, soak.faults[kind]) for kind in ["hang", *soak.backend.intervals, "second SIGTERM"]),
        ("hangs that happened (marker consumed)", soak.hangs_happened),
        ("runs checked", len(soak.runs)),
        ("runs that succeeded", sum(s["status"] == "Succeeded" for s in summaries)),
        ("driver starts", sum(run.starts for run, _ in soak.runs)),
        ("unexpected driver exits", sum(len(run.unexpected_exits) for run, _ in soak.runs)),
        ("mini-batches (of the runs checked)", sum(s["mini_batches_total"] for s in summaries)),
        ("attempts retried", sum(s["attempts_retried"] for s in summaries)),
        ("workers started", sum(s["workers_started"] for s in summaries)),
        ("rows expected", sum(len(run.expected) for run, _ in soak.runs)),
        ("rows in the outputs", sum(c.rows for c in checks)),
        ("duplicated", sum(c.duplicated for c in checks)),
        ("lost", sum(c.lost for c in checks)),
        ("unexpected rows", sum(c.unexpected for c in checks)),
        ("orphans (workers alive 5 s after their driver)", len(soak.orphans)),
        ("orphans (machine-wide at the end)", len(leftovers)),
        ("files left in TMPDIR", len(files_left)),
        ("wall time", f"{wall_s:.0f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n{'what':<{width}}  value\n{'-' * width}  -----")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for line in soak.orphans + leftovers:
        print(f"left behind: {line}")
    for path in files_left:
        when = time.strftime("%H:%M:%S", time.gmtime(path.stat().st_mtime))
        print(f"left behind: {path} ({path.stat().st_size} bytes, written {when} UTC)")
    bad = ("unexpected driver exits", "duplicated", "lost", "unexpected rows", "files left in TMPDIR")
    return not any(value for name, value in rows if name in bad or name.startswith("orphans"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["local", "ray"], default="local", help="the step's backend")
    parser.add_argument("--minutes", type=float, default=10, help="how long to inject faults (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault choices (default 1)")
    parser.add_argument("--files", type=int, help="inputs (one-file mini-batches) per run (3000; ray: 1500)")
    parser.add_argument("--hangs", type=int, default=5, help="mini-batches per run whose first run() hangs")
    parser.add_argument("--workers", type=int, help="process_count_per_node (default 4; ray: 2)")
    parser.add_argument("--nodes", type=int, default=3, help="ray: nodes of the cluster, and node_count (3)")
    parser.add_argument("--work-ms", type=float, default=10, help="run() time per input (default 10 ms)")
    parser.add_argument("--keep", action="store_true", help="keep the soak's folder even when all passed")
    args = parser.parse_args()
    chosen = backend(args.backend, args.nodes)
    for name, value in chosen.defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    soak = Soak(args, chosen)
    print(f"soak folder: {soak.root}", flush=True)
    try:
        wall_s = soak.soak()
    finally:
        chosen.close()
    passed = report(soak, wall_s, soak.machine_wide_leftovers())
    if passed and not args.keep:
        shutil.rmtree(soak.root, ignore_errors=True)
    else:
        print(f"kept: {soak.root}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
