"""The resource monitor: ParallelRunStep's `logs/perf/<node_id>/` files, sampled with psutil (the
process table in `os/` read from /proc itself).

A sample at start, one every `resource_monitor_interval` seconds, and one at the
end; each node folder gets the machine's usage and its own workers' processes.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

import psutil

from ..config.secrets import MASK
from ..store.logs import RunLogs
from ..store.space import where_it_fits

#: `time` is for people (to the second); `time_unix` is the same instant in Unix seconds (the report's charts).
NODE_COLUMNS = ["time", "cpu_percent", "memory_total_mb", "memory_used_mb", "memory_percent", "load_1m", "time_unix"]
PROCESS_COLUMNS = ["time", "process_name", "pid", "cpu_percent", "rss_mb", "vms_mb", "threads", "children", "time_unix"]
DISK_COLUMNS = ["time", "path", "total_mb", "used_mb", "free_mb", "percent"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_MIN_SECRET = 4  # shorter values ("1", "yes") are not worth masking and would garble the table
#: A command line's NULs (between arguments) become spaces and other control bytes "?", as `ps` shows
#: them: a `python -c` script's newline would otherwise split one process over lines of the table.
_PRINTABLE = bytes.maketrans(bytes(range(32)) + b"\x7f", b" " + b"?" * 32)
#: node id -> [(process name, pid)] of the workers alive now
WorkerProcesses = Callable[[], dict[str, list[tuple[str, int]]]]


class ResourceMonitor:
    """Samples the machine and the workers into the perf files of every node."""

    def __init__(
        self,
        logs: RunLogs,
        node_ids: list[str],
        workers: WorkerProcesses,
        interval: float,
        disk_path: Path,
        secrets: Collection[str] = (),
    ):
        self.logs, self.node_ids, self.workers = logs, node_ids, workers
        self.interval, self.disk_path = interval, disk_path
        # Values masked in the process table (command lines may carry them, e.g. `--set environment_variables=`).
        self.secrets = sorted((v for v in secrets if len(v) >= _MIN_SECRET), key=len, reverse=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="resource-monitor", daemon=True)
        # One psutil.Process per worker for the run: its cpu_percent counts from the previous sample.
        self._processes: dict[int, psutil.Process] = {}

    def __enter__(self) -> ResourceMonitor:
        psutil.cpu_percent()  # the first call only sets the baseline
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        self.sample()
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        memory = psutil.virtual_memory()
        node_row = [
            stamp,
            psutil.cpu_percent(),
            memory.total >> 20,
            memory.used >> 20,
            memory.percent,
            os.getloadavg()[0],
            f"{now:.3f}",
        ]
        disk = psutil.disk_usage(str(self.disk_path))
        disk_row = [stamp, str(self.disk_path), disk.total >> 20, disk.used >> 20, disk.free >> 20, disk.percent]
        snapshot, children = _process_table()
        for secret in self.secrets:
            snapshot = snapshot.replace(secret, MASK)
        workers = self.workers()
        for node_id in self.node_ids:
            folder = self.logs.perf_dir(node_id)
            with where_it_fits():  # samples are for people: a full disk is the run's to report, not the monitor's
                _append(folder / "node_resource_usage.csv", NODE_COLUMNS, [node_row])
                _append(folder / "node_disk_usage.csv", DISK_COLUMNS, [disk_row])
                _append(
                    folder / "processes_resource_usage.csv",
                    PROCESS_COLUMNS,
                    [
                        [*self._process_row(stamp, name, pid, children), f"{now:.3f}"]
                        for name, pid in workers.get(node_id, [])
                    ],
                )
                snapshot_file = (
                    folder
                    / "os"
                    / time.strftime("%Y%m%d%H", time.localtime(now))
                    / time.strftime("processes_%M", time.localtime(now))
                )
                snapshot_file.parent.mkdir(parents=True, exist_ok=True)
                snapshot_file.write_text(snapshot)

    def _process_row(self, stamp: str, name: str, pid: int, children: dict[int, list[int]]) -> list[object]:
        """A worker's row; its children counted from the table's (psutil would read every process again).
        Its CPU share since the previous sample (0.0 at its first)."""
        try:
            if pid not in self._processes:
                self._processes[pid] = psutil.Process(pid)
            process = self._processes[pid]
            with process.oneshot():
                memory = process.memory_info()
                return [
                    stamp,
                    name,
                    pid,
                    process.cpu_percent(),
                    memory.rss >> 20,
                    memory.vms >> 20,
                    process.num_threads(),
                    _descendants(pid, children),
                ]
        except psutil.Error:
            return [stamp, name, pid, "", "", "", "", ""]


def _process_table() -> tuple[str, dict[int, list[int]]]:
    """What `ps` would show: every process with its memory and command line, and each one's children. Read
    from /proc directly, two small files a process: psutil's iteration takes five to ten times as long
    (40 ms at a hundred processes here), taken from the driver's own time at the start and end of every run."""
    lines = [f"{'PID':>7} {'PPID':>7} {'RSS_MB':>8} {'CPU_S':>8}  COMMAND"]
    children: dict[int, list[int]] = {}
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit()):
        if found := _process_line(pid):
            parent, line = found
            children.setdefault(parent, []).append(pid)
            lines.append(line)
    return "\n".join(lines) + "\n", children


def _descendants(pid: int, children: dict[int, list[int]]) -> int:
    """How many processes `pid` started, or they started, and so on."""
    count, todo = 0, list(children.get(pid, []))
    while todo:
        count += 1
        todo += children.get(todo.pop(), [])
    return count


def _process_line(pid: int) -> tuple[int, str] | None:
    """One process's parent and line of the table (None when it is gone): /proc/PID/stat and cmdline, as `ps`
    reads them."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            command = file.read()
    except OSError:
        return None
    name_end = stat.rfind(b")")  # the name, in parentheses, may hold spaces and parentheses itself
    fields = stat[name_end + 2 :].split()  # from field 3 (state) on: see proc(5)
    ppid, cpu = int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    rss = int(fields[21]) * _PAGE_SIZE >> 20
    name = stat[stat.find(b"(") + 1 : name_end]  # a kernel thread has no command line
    text = (command.translate(_PRINTABLE).strip() or name.translate(_PRINTABLE)).decode(errors="replace")
    return ppid, f"{pid:>7} {ppid:>7} {rss:>8} {cpu:>8.1f}  {text[:300]}"


def _append(path: Path, columns: list[str], rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        if new:
            writer.writerow(columns)
        writer.writerows(rows)
