"""How a file mini-batch's member files and their tokens are kept in the ledger, so that the next
plan can keep the mini-batch (inputs/incremental.py). Standard library only: workers import it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class EarlierBatch(NamedTuple):
    """A mini-batch of the earlier plan: its index there, members (encoded), tokens (encoded, None when
    it never ran) and fingerprint."""

    index: int
    members: str
    tokens: bytes | None
    fingerprint: str | None


def encode_members(paths: Iterable[str]) -> str:
    """The member files of a mini-batch as one text: their common folder once, then the names, NUL-separated
    (the one character a path cannot hold)."""
    paths = list(paths)
    prefix = paths[0].rpartition("/")[0] + "/"
    if not all(path.startswith(prefix) for path in paths):
        prefix = ""
    return prefix + "\0" + "\0".join(path[len(prefix) :] for path in paths)


def decode_members(text: str) -> list[str]:
    prefix, *names = text.split("\0")
    return [prefix + name for name in names]


def encode_tokens(tokens: list[str]) -> bytes:
    """Each file's token (`size\\0mtime_ns`, or its content hash), one per line."""
    return "\n".join(tokens).encode()


def decode_tokens(data: bytes | None) -> list[str] | None:
    return None if data is None else data.decode().split("\n")
