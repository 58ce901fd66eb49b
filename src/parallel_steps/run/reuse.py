"""Reuse (DESIGN.md section 6): what determines a step's results, hashed; where earlier results are found.

The code key covers everything but the inputs: the entry script, the
source directory, arguments, side inputs, models, the fields that change results,
and the project's version. Each mini-batch adds its own input fingerprint, so a
result is reusable when the code key and that fingerprint are unchanged; the
step key (code key plus every fingerprint) identifies a whole run. Speed-only
fields (node and process counts, timeouts, logging, backend) are left out.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..config.model import ParallelRunConfig
from ..config.secrets import public_config
from ..driver.health import threshold_breach
from ..inputs.datasets import Dataset
from ..inputs.fingerprints import code_files, content_hash, file_identity
from ..inputs.members import EarlierBatch
from ..inputs.minibatch import MiniBatch
from ..inputs.planner import iter_files
from ..protocol import Part
from ..report.publish import upload_report
from ..storage.objects import is_url, upload
from ..store.ledger import Ledger
from ..store.output import link_or_copy
from ..store.rundir import RunDirectory
from ..store.runs import RunIndex, read_summary
from ..summary import Counters, RunStatus, RunSummary, timestamp
from ..version import __version__
from .checks import Checked

RESULT_FIELDS = ("arguments", "environment_variables", "partition_keys", "output_action", "append_row_dataframe_header")
_REUSE_SOURCES = 5  # earlier runs whose finished mini-batches a run looks up


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
        root, skipped = config.source_directory, {Path(p).resolve() for p in skip}
        for code, found in code_files(root, skipped):
            digest.update(file_identity(code, found, config.reuse_fingerprint, name=os.path.relpath(code, root)))
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


def step_code_key(config: ParallelRunConfig, checked: Checked, entry_callables: bytes | None) -> str:
    """The code key of a checked step; the run root and the output folder are not part of its code."""
    skip = [config.resolved_run_root()]
    if config.output and not is_url(config.output):
        skip.append(Path(config.output))
    return code_key(config, checked.entry_script, entry_callables, checked.side_inputs, checked.models, skip=skip)


def inputs_key(code: str, inputs: Iterable[Dataset]) -> str:
    """What a second run of a step on the same inputs waits for (the run lock): the code key and the
    inputs as named, not as listed (the listing is written while the run goes)."""
    named = [
        dict(dataset.model_dump(), path=[p if is_url(p) else os.path.abspath(p) for p in dataset.path])
        for dataset in inputs
    ]
    return step_key(code, [json.dumps(named, sort_keys=True, default=str)])


def step_key(code: str, fingerprints: Iterable[str | None]) -> str:
    """The step's key: its code and every mini-batch's fingerprint, in plan order. Callers wait until each
    has one (a streamed plan's file mini-batches get theirs from the worker that reads them)."""
    digest = hashlib.sha256(code.encode())
    for fingerprint in fingerprints:
        if fingerprint is None:
            raise ValueError("a step key needs every mini-batch's fingerprint")
        digest.update(fingerprint.encode())
    return digest.hexdigest()


class ReuseSources:
    """Finished results a run may take instead of running them: its own (`own`, a resume or a restart),
    then those of the newest earlier runs with the same code key when `allow_reuse` is on.

    `link(run_id, spool)` makes an earlier run's spool file part of this run (None: a preview that
    writes nothing)."""

    def __init__(
        self,
        run_id: str,
        own: Ledger | None,
        index: RunIndex | None,
        code: str,
        allow_reuse: bool,
        link: Callable[[str, str], str] | None = None,
    ):
        self.run_id, self._own, self._link = run_id, own, link
        self._sources = [(run_id, own.results_by_fingerprint())] if own else []
        self._spools: dict[tuple[str, str], str | None] = {}  # (run id, spool) -> as read here (None: gone)
        self.newest_run: str | None = None
        newest = complete = None  # the ledgers of the newest earlier run, and of the newest with a whole plan
        if allow_reuse and index is not None:
            for record in index.with_code_key(code, exclude=run_id)[:_REUSE_SOURCES]:
                path = Path(record["run_dir"]) / "ledger.sqlite"
                ledger = Ledger.open_readonly(path)
                if ledger:
                    self._sources.append((record["run_id"], ledger.results_by_fingerprint()))
                    if newest is None:
                        newest, self.newest_run = path, record["run_id"]
                    if complete is None and ledger.plan_complete():
                        complete = path
                    ledger.close()
        # The plan a sticky rerun keeps: the newest written to its end, this run's own first (a resume or a
        # restart), else the newest there is. A plan cut short (its driver killed, or the run stopped while
        # planning) gives way to the one its driver kept: the same inputs and earlier plan give the same
        # mini-batches, so what that driver finished is found by fingerprint.
        self.own_plan = own is not None and (own.plan_complete() or complete is None)
        self._base = None if self.own_plan else complete or newest

    def __bool__(self) -> bool:
        return bool(self._sources)

    def earlier_plan(self) -> Iterator[EarlierBatch]:
        """The plan a sticky rerun keeps (see `own_plan`)."""
        if self._own is not None and self.own_plan:
            yield from self._own.plan()
            return
        ledger = Ledger.open_readonly(self._base) if self._base else None
        if ledger:
            try:
                yield from ledger.plan()
            finally:
                ledger.close()

    def find(self, mini_batch: MiniBatch) -> dict[str, Any] | None:
        """The committed result of a mini-batch with the same fingerprint (its part linked into this
        run), with the `run_id` of the run that made it; None when no source has it."""
        if mini_batch.fingerprint is None:  # not fingerprinted yet: nothing to match
            return None
        for run_id, results in self._sources:
            result = results.get(mini_batch.fingerprint)
            if result is None:
                continue
            part = result["part"]
            if part:
                spool = self._spool(run_id, part.path)
                if spool is None:
                    continue
                part = Part(spool, part.offset, part.length)  # not _replace: a rerun asks for every result
            return dict(result, part=part, run_id=result["reused_from"] or run_id)
        return None

    def _spool(self, run_id: str, path: str) -> str | None:
        """The spool a result of `run_id` is read from in this run (an earlier run's linked in), None when
        it is gone. Once per spool, not per result: a rerun reuses thousands of results from a few spools."""
        key = (run_id, path)
        if key not in self._spools:
            found = os.path.exists(path)
            if found and run_id != self.run_id and self._link:
                path = self._link(run_id, path)
            self._spools[key] = path if found else None
        return self._spools[key]


def restore_whole_step(
    index: RunIndex, key: str, run: RunDirectory, config: ParallelRunConfig, started_at: float
) -> RunSummary | None:
    """An earlier successful run with the same step key: its output restored here, no worker started.
    None when there is none, when rows of it returned an error, or its failed items exceed this run's
    thresholds."""
    earlier = index.succeeded_with_step_key(key)
    if not earlier or earlier["run_id"] == run.run_id:
        return None
    found = read_summary(Path(earlier["run_dir"]))
    if not found or found.get("status") != RunStatus.SUCCEEDED:
        return None
    summary = RunSummary(found)
    if summary.get("items_with_errors"):  # rows that returned an error run again
        return None
    if threshold_breach(config.thresholds(), Counters.of(summary, no_result_fails=config.error_threshold != -1)):
        return None
    output, target = summary.get("output"), summary.get("output_file")
    if target:
        # an uploaded output was assembled in its run folder first
        source = Path(earlier["run_dir"]) / "output" / target.rsplit("/", 1)[-1] if is_url(target) else Path(target)
        if not source.exists():
            return None
        if run.output_url:
            output, target = run.output_url, output_file_url(run.output_url, config)
            upload(source, target)
        elif config.output or run.chosen:  # else point at the earlier run's own output
            output = str(run.output_dir)
            target = str(link_or_copy(source, run.output_dir / config.append_row_file_name))
    # Counts describe this invocation: nothing ran, every mini-batch was reused.
    restored = RunSummary(
        summary,
        reused=True,
        output=output,
        output_file=target,
        mini_batches_reused=summary.mini_batches_total,
        mini_batches_run=0,
        workers_started=0,
        attempts_retried=0,
        started_at=timestamp(started_at),
        ended_at=timestamp(),
        elapsed_s=round(time.time() - started_at, 3),
        config=public_config(config),
        # the earlier run's page, uploaded beside this run's output
        report_url=upload_report(summary.get("report"), run.output_url, config.append_row_file_name)
        if run.output_url and config.upload_report
        else None,
    )
    return restored


def output_file_url(output_url: str, config: ParallelRunConfig) -> str:
    return f"{output_url.rstrip('/')}/{config.append_row_file_name}"
