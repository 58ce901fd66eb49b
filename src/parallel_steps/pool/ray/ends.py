"""Where a Ray worker actor notes the end of each call before it returns, for the pool to read once the actor
died: Ray may lose a call's reply when its actor dies a moment after (2 in 25 tries here), and the pool must
then not blame the loss on a call that ended (`ray_handle.RayActorHandle.died_after`).

On the driver's machine the note is the call's number written over a small file in the run directory: one
`pwrite`, which the pool reads from the same page cache. An actor on another machine sends it to the mailbox
(mailbox.py) and waits for it before its next call: an actor call, 0.5-2.5 ms of the mailbox's CPU (on 2
busy cores, a CPU-bound run's calls of a few mini-batches made that 7% of its wall), but another machine's
writes to a shared filesystem may reach the driver's late when their writer was killed. A machine is known
by its address (`ray_nodes.RayNodes.here`): a node in a container with the host's network but a mount of the
run directory of its own would count as the driver's machine.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import ray

_NUMBER = struct.Struct("q")


def ends_file(parts_dir: str, node_id: str, process_name: str) -> str:
    """The note file of a worker on the driver's machine, beside its spool in the run's `parts/`."""
    return os.path.join(parts_dir, f"{node_id}-{process_name}.ended")


def last_ended(path: str) -> int:
    """The number of the last call the note file says ended; 0 when none did, or the file cannot be read (a
    loss then blames the call whose reply did not come, as before notes)."""
    try:
        with open(path, "rb") as file:
            data = file.read(_NUMBER.size)
    except OSError:
        return 0
    return _NUMBER.unpack(data)[0] if len(data) == _NUMBER.size else 0


def ends_for(path: str | None, mailbox: Any, worker_id: str) -> FileEnds | MailboxEnds:
    """An actor's notes: in the file at `path` (on the driver's machine), else, or when the file cannot be made
    (a full disk), in the mailbox."""
    if path:
        try:
            return FileEnds(path)
        except OSError:
            pass
    return MailboxEnds(mailbox, worker_id)


class FileEnds:
    """Notes in a file of the actor's own, emptied as it starts (a resumed run's workers reuse names): an empty
    file says no call ended."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def note(self, call: int) -> None:
        try:
            os.pwrite(self._fd, _NUMBER.pack(call), 0)
        except OSError:
            # A full disk (a copy-on-write filesystem allocates even to overwrite) must not fail a call whose
            # outcomes the spool settled: without the note, a reply Ray loses blames this call, as before notes.
            pass

    def wait(self) -> None:
        """Nothing: a written note is in."""


class MailboxEnds:
    """Notes sent to the mailbox; the next call waits until the last one is in."""

    def __init__(self, mailbox: Any, worker_id: str):
        self._mailbox, self._id = mailbox, worker_id
        self._sent: Any = None  # the ref of the last note

    def note(self, call: int) -> None:
        self._sent = self._mailbox.ended.remote(self._id, call)

    def wait(self) -> None:
        if self._sent is not None:
            ray.get(self._sent)  # sent as the call before returned: in by now
