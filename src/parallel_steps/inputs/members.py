"""How a file mini-batch's member files and their tokens are kept in the ledger, so that the next
plan can keep the mini-batch (inputs/incremental.py). Standard library only: workers import it."""

from __future__ import annotations

from typing import NamedTuple


class EarlierBatch(NamedTuple):
    """A mini-batch of the earlier plan: its index there (`idx`, as the ledger's column: `index` is a
    tuple's method), members (encoded), tokens (encoded, None when it never ran) and fingerprint."""

    idx: int
    members: str
    tokens: bytes | None
    fingerprint: str | None


def encode_members(paths: tuple[str, ...]) -> str:
    """The member files of a mini-batch as one text: their common folder once, then the names, NUL-separated
    (the one character a path cannot hold). Built with joins and replaces, no step per path: the driver
    encodes every mini-batch of a fresh plan."""
    text = "\0".join(paths)
    cut = paths[0].rfind("/") + 1
    prefix = paths[0][:cut]
    if cut > 1 and text.count("\0" + prefix) == len(paths) - 1:
        return prefix + "\0" + text[cut:].replace("\0" + prefix, "\0")
    return "\0" + text


def decode_members(text: str) -> list[str]:
    prefix, *names = text.split("\0")
    return [prefix + name for name in names]


def encode_tokens(tokens: list[str]) -> bytes:
    """Each file's token (`size\\0mtime_ns`, or its content hash), one per line."""
    return "\n".join(tokens).encode()


def decode_tokens(data: bytes | None) -> list[str] | None:
    return None if data is None else data.decode().split("\n")
