"""Running a pipeline file on this machine: its jobs in order, each once; a failed job stops its dependants.

    <run_root>/pipelines/<pipeline>/<run id>/pipeline.json   the run: its status, each job's status, outputs, key
                                            jobs/<job>/step/             a parallel job's run directory
                                            jobs/<job>/outputs/<name>    outputs without a path
                                            jobs/<job>/logs/std_log.txt  a command job's output
                                            outputs/<name>               the pipeline's outputs without a path

A rerun resumes the newest run of the pipeline that did not succeed: a job that succeeded there with
the same key is kept, a parallel job resumes in its run directory. A job that succeeded with the same
key in an earlier run is reused (its outputs are read where that run left them), as steps are.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ParallelRunConfig
from ..config.secrets import storage_settings
from ..config.types import default_run_root
from ..errors import ConfigError, InputError, StepFailed
from ..run import reuse_key, run_step
from ..run.checks import check_inputs, entry_script_path, script_path
from ..run.plan import planner_for
from ..storage import options as storage_options
from ..store.runs import hold_driver_lock, new_run_id
from ..store.space import write_site
from .binding import PLACEHOLDER_ROOT, Bindings, bind, make_output_places
from .command import CommandFailed, command_key, command_line, ignored_keys, keyed, run_command
from .job import AZURE_NAMES, job_fields
from .pipeline import Node, Pipeline, read_pipeline

log = logging.getLogger("parallel_steps.azure")

RECORD = "pipeline.json"
_DONE = ("Succeeded", "Reused")
_EARLIER_RUNS = 5  # earlier runs of the pipeline whose finished jobs a run looks up


@dataclass
class PipelineOptions:
    """What a caller sets beside the file: `--set` values, or an engine's parameters."""

    inputs: dict[str, Any] = field(default_factory=dict)  # the pipeline's inputs by name
    output_paths: dict[str, str] = field(default_factory=dict)  # "outputs.x" or "jobs.n.outputs.o" -> path
    datastores: dict[str, str] = field(default_factory=dict)  # datastore name -> folder or URL
    fields: dict[str, Any] = field(default_factory=dict)  # configuration fields of every parallel job
    job_fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # job name -> its fields
    run_root: str | None = None


class PipelineRun:
    """One run of a pipeline: its folder and record, and how each of its jobs is bound and run."""

    def __init__(
        self,
        pipeline: Pipeline,
        options: PipelineOptions,
        run_dir: Path | None = None,
        preview: bool = False,
        fresh: bool = False,
    ):
        """Open the run in `run_dir`, else the newest unfinished run of the pipeline (unless `fresh`), else a new
        one; `preview`: only read (`plan`), neither create nor lock anything."""
        self.pipeline, self.options = pipeline, options
        root = default_run_root(options.run_root) / "pipelines" / folder_name(pipeline.name)
        # A pipeline is its file and its name: another file of the same name keeps runs of its own here.
        mine = [p.parent for p in root.glob(f"*/{RECORD}") if _same_file(_read(p.parent), pipeline.file)]
        self.earlier = sorted(mine, key=lambda p: p.stat().st_mtime)[::-1]
        unfinished = [p for p in self.earlier if _read(p).get("status") != "Succeeded"]
        self._root = None if run_dir is not None else root  # the pipeline's folder, when this run is in it
        if run_dir is None:
            latest = self.earlier[:1] if preview else [] if fresh else unfinished[:1]
            run_dir = latest[0] if latest else root / new_run_id(folder_name(pipeline.name))
        self.path = run_dir
        self._lock = None
        if not preview:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = hold_driver_lock(self.path)
        self.record = _read(self.path) or {
            "run_id": self.path.name,
            "name": pipeline.name,
            "pipeline": str(pipeline.file.resolve()),
            "jobs": {},
        }
        self.record.update(status="Running", status_reason="", started_at=time.time(), ended_at=None)
        self.run_id = str(self.record["run_id"])
        # The newest run's outputs, then this run's: what `--job` reads of the jobs it does not run.
        produced: dict[str, dict[str, str]] = {}
        for record in ([_read(self.earlier[0])] if self.earlier else []) + [self.record]:
            produced |= {n: job["outputs"] for n, job in record.get("jobs", {}).items() if job.get("status") in _DONE}
        self.bindings = Bindings(pipeline, self.run_id, self.path, options.datastores, options.output_paths, produced)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()

    def assume_produced(self) -> None:
        """Take every job's outputs to be where this run puts them (an engine runs the jobs, in order)."""
        for node in self.pipeline.nodes.values():
            self.bindings.produced.setdefault(node.name, _paths(self.bindings.node_outputs(node)))

    # One job ---------------------------------------------------------------------------------

    def parallel_config(self, node: Node, outputs_root: Path | None = None, make: bool = True) -> ParallelRunConfig:
        """A parallel job's configuration (`outputs_root`: see `bind`); `make`: create its outputs' folders."""
        job = bind(node, self.bindings, outputs_root)
        appended = str(job.get("task", {}).get("append_row_to", ""))
        side_outputs = [name for name in job["outputs"] if not re.search(rf"outputs\.{name}\b", appended)]
        with naming(node):
            fields = job_fields({**job, "name": node.name}, self.pipeline.file)
            if side_outputs:  # written by the script itself: mini-batches of another run did not write them here
                fields["allow_reuse"] = False
            if self.options.run_root:  # the pipeline's run root holds its jobs' run index and locks too
                fields["run_root"] = self.options.run_root
            config = ParallelRunConfig.from_dict(
                {**fields, **self.options.fields, **self.options.job_fields.get(node.name, {})}
            )
        if make:
            make_output_places(job["outputs"])
        return config

    def command(self, node: Node) -> tuple[dict[str, Any], str]:
        """A command job bound, and its command line."""
        job = bind(node, self.bindings)
        with naming(node):
            return job, command_line(job, f"jobs.{node.name}")

    def key(self, node: Node) -> str:
        """What makes two runs of the job the same: its bound job with its outputs at placeholder places."""
        if node.kind == "parallel":
            return reuse_key(self.parallel_config(node, PLACEHOLDER_ROOT, make=False))
        job, command = self.command(node)
        return command_key(job, keyed(command, job["outputs"]), default_run_root(self.options.run_root))

    def run_job(self, node: Node, cancel: threading.Event | None = None, **step_options: Any) -> dict[str, Any]:
        """Run one job here; its record (status, outputs, the step's summary). Raises StepFailed when it fails."""
        folder = self.path / "jobs" / node.name
        if node.kind == "parallel":
            config = self.parallel_config(node, make=False)
            if not config.allow_reuse:  # from scratch: nothing of a failed attempt is resumed or read
                self._clear(node, folder / "step")
            make_output_places(self.bindings.node_outputs(node))
            run_id = f"{self.run_id}-{node.name}"  # the run index's key: one per job of each pipeline run
            summary = run_step(config, run_dir=folder / "step", run_id=run_id, cancel=cancel, **step_options)
            return _job(node, "Succeeded", summary["status_reason"], self.bindings, summary)
        job, command = self.command(node)
        self._clear(node)  # a command runs again whole: what a failed attempt half wrote goes first
        log.info("job %s: %s", node.name, command)
        ignored = ignored_keys(job, f"jobs.{node.name}")
        if ignored:
            log.info("%s accepted as Azure ML takes them, no effect here", ", ".join(ignored))
        make_output_places(job["outputs"])
        try:
            with naming(node):
                run_command(job, command, folder, cancel)
        except CommandFailed as failed:
            raise StepFailed(_job(node, "Failed", str(failed), self.bindings)) from None
        return _job(node, "Succeeded", "the command exited with 0", self.bindings)

    def _clear(self, node: Node, *also: Path) -> None:
        """Remove what an earlier attempt of the job left in this run: `also`, and its outputs placed in this
        run's folder (a path the file or a `--set` gave is the user's, and stays)."""
        outputs = [Path(path) for path in _paths(self.bindings.node_outputs(node)).values() if "://" not in path]
        for path in [*also, *(p for p in outputs if p.is_relative_to(self.path))]:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    # The whole pipeline -----------------------------------------------------------------------

    def run(
        self, only: str | None = None, cancel: threading.Event | None = None, **step_options: Any
    ) -> dict[str, Any]:
        """Run the jobs in order (`only`: that one job), and return the run's summary."""
        self._check(only)
        continue_on_failure = bool(self.pipeline.settings.get("continue_on_step_failure"))
        failed: list[str] = []
        for node in self.pipeline.nodes.values():
            if only is not None and node.name != only:
                continue
            blocked = [up for up in node.upstream if up in failed]
            if blocked or (failed and not continue_on_failure) or (cancel is not None and cancel.is_set()):
                reason = f"job {blocked[0]} failed" if blocked else "the pipeline stopped"
                status = "Skipped" if blocked else "NotStarted"
                self._set(node, {"kind": node.kind, "status": status, "status_reason": reason, "outputs": {}})
                failed += [node.name] if blocked else []
                continue
            record = self._job_once(node, cancel, **step_options)
            if record["status"] not in _DONE:
                failed.append(node.name)
        return self._finish(failed, cancel)

    def _check(self, only: str | None) -> None:
        """User errors found before any job runs (pipeline_checks.py): the first refuses the file, saying how
        many more `plan` lists; a new run that ran nothing leaves no folder."""
        try:
            problems = pipeline_problems(self, only)
            if problems:
                (where, what), more = problems[0], len(problems) - 1
                hint = f"{more} more: parallel-steps plan {self.pipeline.file} lists them" if more else None
                raise ConfigError(where, what, hint)
        except (ConfigError, InputError):
            self.close()
            if not self.record["jobs"]:  # nothing ran: no folder of it, nor the pipeline's if it had no other run
                shutil.rmtree(self.path, ignore_errors=True)
                for folder in (self._root, self._root.parent) if self._root else ():
                    _remove_if_empty(folder)
            raise

    def _job_once(self, node: Node, cancel: threading.Event | None, **step_options: Any) -> dict[str, Any]:
        """The job's record: kept or reused when it succeeded with the same key, else run now."""
        key = None
        try:
            key = self.key(node)
            kept = self.record["jobs"].get(node.name, {})
            if kept.get("status") in _DONE and kept.get("key") == key and _exist(kept["outputs"]):
                return self._set(node, {**kept, "status": "Reused", "status_reason": "succeeded in this run; kept"})
            earlier = self._earlier_success(node, key)
            if earlier is not None:
                self.bindings.produced[node.name] = earlier["outputs"]
                reason = f"reused from run {earlier['run_id']}"
                return self._set(node, {**earlier, "status": "Reused", "status_reason": reason})
            self._set(node, {"kind": node.kind, "status": "Running", "key": key, "outputs": {}})
            record = self.run_job(node, cancel, **step_options)
        except StepFailed as failed:
            summary: dict[str, Any] = dict(failed.summary)
            record = (
                summary
                if "outputs" in summary
                else _job(node, "Failed", summary["status_reason"], self.bindings, summary)
            )
        except (ConfigError, InputError) as exc:  # a job whose inputs are wrong fails; the others still could run
            record = {"kind": node.kind, "status": "Failed", "status_reason": str(exc), "outputs": {}}
        if record["status"] == "Succeeded":
            self.bindings.produced[node.name] = record["outputs"]
        return self._set(node, {**record, "key": key, "run_id": self.run_id})

    def _earlier_success(self, node: Node, key: str) -> dict[str, Any] | None:
        for path in [p for p in self.earlier if p != self.path][:_EARLIER_RUNS]:
            job = _read(path).get("jobs", {}).get(node.name, {})
            if job.get("status") in _DONE and job.get("key") == key and _exist(job["outputs"]):
                return {**job, "run_id": job.get("run_id", path.name)}
        return None

    def _set(self, node: Node, record: dict[str, Any]) -> dict[str, Any]:
        self.record["jobs"][node.name] = record
        _write(self.path, self.record)
        return record

    def _finish(self, failed: list[str], cancel: threading.Event | None) -> dict[str, Any]:
        jobs = self.record["jobs"]
        if failed:
            first = failed[0]
            status = "Canceled" if cancel is not None and cancel.is_set() else "Failed"
            reason = f"job {first} failed: {jobs[first].get('status_reason')}"
        else:
            status, reason = "Succeeded", f"{len(jobs)} job(s) succeeded"
        self.record.update(status=status, status_reason=reason, ended_at=time.time(), run_dir=str(self.path))
        _write(self.path, self.record)
        return dict(self.record)


def run_pipeline(
    path: str | Path,
    options: PipelineOptions | None = None,
    *,
    run_dir: str | Path | None = None,
    job: str | None = None,
    fresh: bool = False,
    cancel: threading.Event | None = None,
    **step_options: Any,
) -> dict[str, Any]:
    """Run a pipeline file's jobs here, in order, and return the run's summary.

    Args:
        path: the `type: pipeline` file.
        options: inputs, output paths, datastores and fields given beside the file.
        run_dir: the pipeline run's folder (default: the newest unfinished run of the pipeline, else a new one).
        job: run only this job; its upstream outputs come from the run's earlier jobs or `options.output_paths`.
        fresh: start a new run even when the newest one did not succeed (by default it resumes there).
        cancel: set it to stop the run.
        step_options: passed to each parallel job's `run_step` (`on_progress`, `on_event`).

    Raises:
        ConfigError, InputError: the file or an option is wrong (before any job ran).
        StepFailed: a job failed; `.summary` is the pipeline run's summary.
    """
    options = options or PipelineOptions()
    pipeline = read_pipeline(path, options.inputs)
    if job is not None and job not in pipeline.nodes:
        raise ConfigError("--job", f"{job!r} is not a job of the pipeline", f"jobs: {', '.join(pipeline.nodes)}")
    run = PipelineRun(pipeline, options, Path(run_dir).absolute() if run_dir else None, fresh=fresh)
    try:
        summary = run.run(job, cancel, **step_options)
    finally:
        run.close()
    if summary["status"] != "Succeeded":
        raise StepFailed(summary)
    return summary


class naming:
    """Errors in a job's fields name the job and the field as the file writes it (`jobs.<name>.inputs.x: ...`,
    `jobs.<name>.resources.instance_count: ...` for the configuration's node_count)."""

    def __init__(self, node: Node):
        self.node = node

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, ConfigError) and not exc.field.startswith(("jobs.", "inputs.", "outputs.")):
            field = AZURE_NAMES.get(exc.field, exc.field)
            raise ConfigError(f"jobs.{self.node.name}.{field}", exc.problem, exc.hint) from None


def pipeline_problems(run: PipelineRun, only: str | None = None) -> list[tuple[str, str]]:
    """Every problem the run would meet in its jobs, found before the first starts: (where, what) each, where
    the file (and the component file the job runs), what the job, its field and what is wrong. Each job is
    checked as `run` binds it, the outputs of the jobs before it where this run will put them: every field
    known and of its type (bindings resolved), the entry script there and compiling, a command's `code:`
    folder there, and for a job that reads no other's outputs, its inputs and the partition columns of the
    first file of each table. `plan` lists them all; `run` refuses the file with the first."""
    produced = dict(run.bindings.produced)
    run.assume_produced()
    problems = []
    try:
        for node in run.pipeline.nodes.values():
            if only is None or node.name == only:
                try:
                    _check_job(run, node)
                except (ConfigError, InputError) as exc:
                    source = f" (component {node.component})" if node.component else ""
                    problems.append((f"{run.pipeline.file}{source}", str(exc)))
    finally:
        run.bindings.produced = produced
    return problems


def _check_job(run: PipelineRun, node: Node) -> None:
    with naming(node):
        run.bindings.node_outputs(node)
        if node.kind == "command":
            code = run.command(node)[0].get("code")
            if code and not os.path.isdir(str(code)):
                raise ConfigError("code", f"{code} is not a folder")
            return
        try:
            config = run.parallel_config(node, make=False)
        except InputError:  # an input the jobs before it make, not made yet: its script can still be checked
            if not node.upstream:
                raise
            task = node.job.get("task") or {}
            script_path(str(task.get("entry_script", "")), task.get("code"))
            return
        entry_script_path(config)
        if not node.upstream:  # its inputs are there now
            check_inputs(config)
            with storage_options.using(storage_settings(config)):
                planner_for(config.plan_settings()).check_partition_keys()


def _job(node: Node, status: str, reason: str, bindings: Bindings, summary: Any = None) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": node.kind, "status": status, "status_reason": reason}
    record["outputs"] = _paths(bindings.node_outputs(node))
    if summary is not None:
        record["step"] = {key: summary.get(key) for key in ("run_id", "run_dir", "status", "output_file", "job_result")}
    return record


def _paths(outputs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: str(spec["path"]) for name, spec in outputs.items()}


def _exist(outputs: dict[str, str]) -> bool:
    return all("://" in path or Path(path).exists() for path in outputs.values())


def folder_name(name: str) -> str:
    """A name as one safe path component."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "pipeline"


def pipeline_runs(run_root: str | None = None) -> list[dict[str, Any]]:
    """Every pipeline file's runs under the run root, newest first: run id, name, file, status, jobs, folder."""
    records = []
    for path in (default_run_root(run_root) / "pipelines").glob(f"*/*/{RECORD}"):
        record = _read(path.parent)
        records.append(
            {
                "run_id": record.get("run_id", path.parent.name),
                "name": record.get("name", path.parent.parent.name),
                "file": record.get("pipeline"),
                "status": record.get("status"),
                "started_at": record.get("started_at"),
                "jobs": len(record.get("jobs", {})),
                "run_dir": str(path.parent),
            }
        )
    return sorted(records, key=lambda r: r["started_at"] or 0, reverse=True)


def _same_file(record: dict[str, Any], file: Path) -> bool:
    """Whether a run's record is of the pipeline file `file` (resolved paths compared)."""
    recorded = record.get("pipeline")
    return recorded is not None and Path(recorded).resolve() == file.resolve()


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty (another run's), or gone
        pass


def _read(folder: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((folder / RECORD).read_text())
        return data
    except (OSError, ValueError):
        return {}


def _write(folder: Path, record: dict[str, Any]) -> None:
    write_site("pipeline", folder / RECORD)
    tmp = folder / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(folder / RECORD)
