"""How a file mini-batch's member files and their tokens are compared across plans, so that the next
plan can keep the mini-batch (inputs/incremental.py). Standard library only: workers import it.

The ledger keeps each file's token as a 4-byte check (a CRC-32 of it): whether a mini-batch is kept is
decided by its fingerprint, which covers every token in full; the checks only tell which of its files
changed, for the counts.
"""

from __future__ import annotations

import array
import sys
import zlib
from typing import NamedTuple


class EarlierBatch(NamedTuple):
    """A mini-batch of the earlier plan: its index there (`idx`, as the ledger's column: `index` is a
    tuple's method), members (encoded), its files' checks (None when it never ran) and fingerprint."""

    idx: int
    members: str
    checks: bytes | None
    fingerprint: str | None


def encode_members(paths: tuple[str, ...]) -> str:
    """The member files of a mini-batch as one text: their common folder once, then the names, NUL-separated
    (the one character a path cannot hold). Built with joins and replaces, no step per path: the sticky
    planner holds one such text per earlier mini-batch."""
    text = "\0".join(paths)
    cut = paths[0].rfind("/") + 1
    prefix = paths[0][:cut]
    if cut > 1 and text.count("\0" + prefix) == len(paths) - 1:
        return prefix + "\0" + text[cut:].replace("\0" + prefix, "\0")
    return "\0" + text


def decode_members(text: str) -> list[str]:
    prefix, *names = text.split("\0")
    return [prefix + name for name in names]


def check_values(tokens: list[str]) -> list[int]:
    """Each file's token (`size\\0mtime_ns`, or its content hash) as a 32-bit check, in file order."""
    return list(map(zlib.crc32, map(str.encode, tokens)))  # in C: a worker checks every file it runs


def token_checks(tokens: list[str]) -> bytes:
    """The checks of `check_values`, 4 bytes each, as the ledger keeps them."""
    checks = array.array("I", check_values(tokens))
    if sys.byteorder == "big":  # stored little-endian, whatever the machine
        checks.byteswap()
    return checks.tobytes()


def decode_checks(data: bytes | None) -> list[int] | None:
    if data is None:
        return None
    checks = array.array("I", data)
    if sys.byteorder == "big":
        checks.byteswap()
    return checks.tolist()
