"""A listing's local files statted a run ahead, in a helper process: a rerun's plan needs every file's token.

One `os.stat` is a system call of a few microseconds (5 µs on a small VM), so 200,000 files cost the
driver a second, on the critical path of a rerun whose workers wait for the few new mini-batches
the plan has not cut yet. Threads do not help (each call gives the GIL up and takes it back); a
second process does. `tokens_ahead` gives each run of a listing with its files' sizes and tokens
(`fingerprints.file_token`), having sent the next run to a helper process first: the helper stats
it, and writes its tokens, while the planner works on this one. The driver only splits a text: a
Python object made per file and a token formatted per file cost it as much as the stats did.

The helper is `python -I -S -c` of a few lines (isolated: no folder of the user's on its path), none
of this package: it reads NUL-joined paths and answers their sizes as int64 (-1: it could not stat
the file; the driver stats it again itself, so that the error names it), then their tokens as one
text. It exits when its input closes, so it ends with the driver however the driver ends; a run
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

from ..host import cpu_count
from ..storage import objects as storage
from ..storage.objects import RemoteStat, Stat
from .fingerprints import file_token, file_tokens

# The token is `fingerprints.file_token`'s, written out: the helper imports nothing of this package
# (tests/unit/test_stat_ahead.py holds the two to the same text).
_HELPER = """
import array, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle; the helper ends with its input
read, write = sys.stdin.buffer.read, sys.stdout.buffer
while len(header := read(8)) == 8:
    sizes, tokens = array.array("q"), []
    for path in read(int.from_bytes(header, "little")).split(b"\\0"):
        try:
            status = os.stat(path)
            sizes.append(status.st_size)
            tokens.append(f"{status.st_size}\\0{status.st_mtime_ns}")
        except OSError:
            sizes.append(-1)
            tokens.append("")
    text = "\\n".join(tokens).encode()
    write.write(sizes.tobytes() + len(text).to_bytes(8, "little") + text)
    write.flush()
"""

#: A run of a listing: its files, their sizes and their tokens, in listing order.
Tokened = tuple[list[str], Sequence[int], list[str]]


def tokens_ahead(runs: Iterable[tuple[list[str], list[RemoteStat] | None]], mode: str) -> Iterator[Tokened]:
    """Each run of `runs` (`planner.iter_listed_runs`) with its files' sizes and tokens in `mode`: from
    the listing's stats for a URL's, from `os.stat` for local files (the helper's for every local run
    after the first). In mode `content` every file's bytes are hashed here, as a worker would."""
    helper: _Helper | None = None
    listing = iter(runs)
    current = next(listing, None)
    try:
        while current is not None:
            ahead = next(listing, None)
            run, listed = current
            sizes: Sequence[int]
            if listed is not None:
                sizes, tokens = [s.st_size for s in listed], list(map(file_token, listed))
            elif helper is not None and helper.sent:
                sizes, tokens = helper.receive(run)
            else:
                sizes, tokens = _stat_here(run)
            if ahead is not None and ahead[1] is None and ahead[0]:  # local: the helper stats it meanwhile
                if helper is None and cpu_count() > 1:
                    helper = _Helper.start()
                if helper is not None:
                    helper.send(ahead[0])
            yield run, sizes, tokens if mode == "stat" else file_tokens(run, [None] * len(run), mode)
            current = ahead
    finally:
        if helper is not None:
            helper.close()


def _stat_here(paths: list[str]) -> tuple[list[int], list[str]]:
    """Sizes and tokens of local files statted by the driver (errors name the file)."""
    stats: list[Stat] = storage.local_stats(paths)
    return [s.st_size for s in stats], list(map(file_token, stats))


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

    def receive(self, paths: list[str]) -> tuple[Sequence[int], list[str]]:
        """The sizes and tokens of the run sent last (`paths`); where the helper failed, or could not stat a
        file, the driver stats it itself (and raises the error naming the file)."""
        self.sent = False
        sizes = array.array("q")
        try:
            sizes.frombytes(self._output.read(8 * len(paths)))
            text = self._output.read(int.from_bytes(self._output.read(8), "little")).decode()
        except (OSError, ValueError):
            return _stat_here(paths)
        tokens = text.split("\n")
        if len(sizes) != len(paths) or len(tokens) != len(paths):
            return _stat_here(paths)
        if min(sizes, default=0) < 0:
            for i in (i for i, size in enumerate(sizes) if size < 0):
                status = storage.stat(paths[i])  # raises naming the file, or it is there now
                sizes[i], tokens[i] = status.st_size, file_token(status)
        return sizes, tokens

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
