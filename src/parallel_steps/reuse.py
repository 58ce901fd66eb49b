"""Reuse keys (DESIGN.md section 6): what determines a step's results, hashed.

The code key covers everything but the inputs: the entry script, the
source directory, arguments, side inputs, models, the fields that change results,
and the project's version. Each mini-batch adds its own input fingerprint, so a
result is reusable when the code key and that fingerprint are unchanged; the
step key (code key plus every fingerprint) identifies a whole run. Speed-only
fields (node and process counts, timeouts, logging, backend) are left out.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from . import __version__
from .config import ParallelRunConfig
from .inputs.fingerprints import content_hash, file_identity
from .inputs.planner import iter_files

_SKIPPED_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", ".pytest_cache", ".venv", ".venvs"}
RESULT_FIELDS = ("arguments", "environment_variables", "partition_keys", "output_action")


def code_key(
    config: ParallelRunConfig,
    entry_script: Path | None,
    entry_callables: bytes | None,
    side_inputs: dict[str, str],
    models: dict[str, str],
    skip: Iterable[Path] = (),
) -> str:
    """The key of everything except the inputs; `skip` leaves run and output folders out of the source tree."""
    digest = hashlib.sha256(f"parallel-steps {__version__}\n".encode())
    if entry_callables is not None:
        digest.update(b"callables\0" + entry_callables)
    else:
        digest.update(b"script\0" + content_hash(str(entry_script)).encode())
    if config.source_directory:
        _tree(digest, Path(config.source_directory), config.reuse_fingerprint, {Path(p).resolve() for p in skip})
    for kind, entries in (("side_input", side_inputs), ("model", models)):
        for name, path in sorted(entries.items()):
            digest.update(f"{kind}\0{name}\0".encode())
            for file, stat in iter_files([path]):
                digest.update(file_identity(file, stat, config.reuse_fingerprint))
    fields = {name: getattr(config, name) for name in RESULT_FIELDS}
    fields["batch_size"] = config.batch_size
    fields["output_format"] = config.output_format
    digest.update(repr(sorted(fields.items())).encode())
    return digest.hexdigest()


def step_key(code: str, fingerprints: Iterable[str]) -> str:
    digest = hashlib.sha256(code.encode())
    for fingerprint in fingerprints:
        digest.update(fingerprint.encode())
    return digest.hexdigest()


def _tree(digest, root: Path, mode: str, skip: set[Path]) -> None:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and (Path(folder) / d).resolve() not in skip)
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                digest.update(file_identity(path, os.stat(path), mode, name=os.path.relpath(path, root)))
            except OSError:
                continue  # vanished or unreadable: not part of the code
