"""A listing's local files statted a run ahead, in a helper process: a rerun's plan stats every file it lists.

One `os.stat` is a system call of a few microseconds (5 µs on a small VM), so 200,000 files cost the
driver a second, on the critical path of a rerun whose workers wait for the few new mini-batches
the plan has not cut yet. Threads do not help (each call gives the GIL up and takes it back); a
second process does. `stats_ahead` gives each run of a listing with its stats, having sent the next
run to a helper process first: the helper stats it while the planner works on this one.

The helper is `python -I -S -c` of a few lines (isolated: no folder of the user's on its path), none
of this package: it reads NUL-joined paths and answers their sizes and modification times as int64
pairs (a size of -1: it could not stat the file; the driver stats it again itself, so that the error
names it). It exits when its input closes, so it ends with the driver however the driver ends; a run
that stops before its plan is complete closes the plan (`RunPlan.close`), which ends it at once. With
one CPU, or a listing of one run, the driver stats its files itself; if the helper fails, it goes on
without it.
"""

from __future__ import annotations

import array
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, cast

from ..resources import cpu_count
from . import storage
from .storage import LocalStat, RemoteStat, Stat

_HELPER = """
import array, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle; the helper ends with its input
read, write = sys.stdin.buffer.read, sys.stdout.buffer
while len(header := read(8)) == 8:
    answer = array.array("q")
    for path in read(int.from_bytes(header, "little")).split(b"\\0"):
        try:
            status = os.stat(path)
            answer += array.array("q", (status.st_size, status.st_mtime_ns))
        except OSError:
            answer += array.array("q", (-1, 0))
    write.write(answer.tobytes())
    write.flush()
"""


def stats_ahead(
    runs: Iterable[tuple[list[str], list[RemoteStat] | None]],
) -> Iterator[tuple[list[str], Sequence[Stat]]]:
    """Each run of `runs` (`planner.iter_listed_runs`) with its files' stats: the listing's for a URL's,
    `os.stat`'s for local files (from the helper for every local run after the first)."""
    helper: _Helper | None = None
    listing = iter(runs)
    current = next(listing, None)
    try:
        while current is not None:
            ahead = next(listing, None)
            run, listed = current
            stats: Sequence[Stat]
            if listed is not None:
                stats = listed
            elif helper is not None and helper.sent:
                stats = helper.receive(run)
            else:
                stats = storage.local_stats(run)
            if ahead is not None and ahead[1] is None and ahead[0]:  # local: the helper stats it meanwhile
                if helper is None and cpu_count() > 1:
                    helper = _Helper.start()
                if helper is not None:
                    helper.send(ahead[0])
            yield run, stats
            current = ahead
    finally:
        if helper is not None:
            helper.close()


class _Helper:
    """The helper process, one request at a time: `send` a run, `receive` its stats before the next."""

    def __init__(self, process: subprocess.Popen[bytes]):
        self._process = process
        self._input, self._output = cast(IO[bytes], process.stdin), cast(IO[bytes], process.stdout)  # both piped
        self.sent = False

    @classmethod
    def start(cls) -> _Helper | None:
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HELPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return None
        return cls(process)

    def send(self, paths: list[str]) -> None:
        data = "\0".join(paths).encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
        try:
            self._input.write(len(data).to_bytes(8, "little") + data)
            self._input.flush()
            self.sent = True
        except OSError:  # the helper is gone: the driver stats the run itself
            self.sent = False

    def receive(self, paths: list[str]) -> list[Stat]:
        """The stats of the run sent last (`paths`); where the helper failed, or could not stat a file,
        the driver stats it itself (and raises the error naming the file)."""
        self.sent = False
        answer = array.array("q")
        size = 16 * len(paths)
        try:
            answer.frombytes(self._output.read(size))
        except (OSError, ValueError):
            pass
        if len(answer) * 8 != size:
            return storage.local_stats(paths)
        sizes, times = answer[0::2], answer[1::2]
        if min(sizes, default=0) < 0:
            return [LocalStat(s, t) if s >= 0 else storage.stat(p) for p, s, t in zip(paths, sizes, times)]
        return list(map(LocalStat, sizes, times))

    def close(self) -> None:
        """Close its input (it exits) and reap it; a helper that does not exit at once is killed."""
        for stream in (self._input, self._output):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self._process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
