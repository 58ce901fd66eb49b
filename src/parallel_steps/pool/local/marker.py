"""The marker of a local worker: which mini-batch it runs now and since when, in a little shared memory.

The worker writes it as it starts and ends each mini-batch; the pool reads it to count
a deadline from the real start and to blame a crash on the right mini-batch. A worker with
several mini-batches in flight (`async def run`) keeps their run() timeouts itself: it writes
the earliest of their deadlines, and the index of the one it runs only while it runs one. One writer,
one reader; a generation number, odd while the worker writes, lets the reader retry a
torn read (a seqlock). The memory is an anonymous memory file (memfd) handed to the worker by
descriptor: it lives as long as a process maps it, so nothing is left behind on disk whoever is
killed.
"""

from __future__ import annotations

import math
import mmap
import os
import struct

_IDLE = -1
_GENERATION, _RUNNING = struct.Struct("q"), struct.Struct("qdd")
#: The deadline of a worker that leaves its deadlines to the pool.
POOL_KEEPS_DEADLINE = math.nan
_READ_TRIES = 1000  # a live writer holds the generation odd for a few instructions


class Marker:
    """(mini-batch index, -1 for none or several; since when; the deadline the worker keeps, `math.inf` for
    none, `POOL_KEEPS_DEADLINE` when it keeps none), times by `time.monotonic()`, one clock for every process
    on Linux."""

    _FIELDS = struct.Struct("qqdd")

    def __init__(self, fd: int):
        """Maps the memory file `fd`; the pool keeps `fd` open to hand it to the worker (`pass_fds`)."""
        self.fd = fd
        self._map = mmap.mmap(fd, self._FIELDS.size)
        self._generation = self._FIELDS.unpack_from(self._map)[0]

    @classmethod
    def create(cls) -> Marker:
        fd = os.memfd_create("parallel-steps-marker")
        os.write(fd, cls._FIELDS.pack(0, _IDLE, 0.0, POOL_KEEPS_DEADLINE))
        return cls(fd)

    def set(self, index: int, since: float = 0.0, deadline: float = POOL_KEEPS_DEADLINE) -> None:
        """Twice a mini-batch in every worker: compiled structs, three stores."""
        _GENERATION.pack_into(self._map, 0, self._generation + 1)
        _RUNNING.pack_into(self._map, 8, index, since, deadline)
        self._generation += 2
        _GENERATION.pack_into(self._map, 0, self._generation)

    def clear(self) -> None:
        self.set(_IDLE)

    def get(self) -> tuple[int, float, float]:
        """A consistent reading. Bounded: a writer that died in the middle of `set` leaves the
        generation odd for good, and then the last reading stands (each field is one aligned
        word, so it is either the old or the new value, never a mix)."""
        for _ in range(_READ_TRIES):
            generation, index, since, deadline = self._FIELDS.unpack_from(self._map)
            if generation % 2 == 0 and _GENERATION.unpack_from(self._map)[0] == generation:
                return index, since, deadline
        return index, since, deadline

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)
