"""Writing a run's plan into its ledger: every mini-batch, with the results it may take from reuse sources.

A plan is written a chunk at a time, each an explicit call that writes: `start`, then `write_next_chunk`,
which the running driver calls whenever it runs out of mini-batches, so the first mini-batches run while
the rest is listed. A fresh run's files are fingerprinted by the workers that read them; a rerun's are
stat'ed here, and the chunks whose mini-batches all take a result are written on without stopping (whole-step
reuse needs every fingerprint: a step decides it only when no mini-batch has to run). `whole` writes it all
at once (a restart, a preview).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from ..config.model import ParallelRunConfig
from ..config.secrets import storage_settings
from ..config.sections import PlanSettings
from ..inputs.minibatch import MiniBatch
from ..inputs.planner import Planner
from ..inputs.step_partitions import spans
from ..storage import options as storage_options
from ..store.ledger import Ledger, PlanRow
from ..store.runs import RunIndex
from ..summary import RESUMED_COUNTS, Counters
from .checks import check_step
from .reuse import ReuseSources, step_code_key

if TYPE_CHECKING:
    from ..inputs.incremental import IncrementalPlanner, PlanDiff

_CHUNK = 100  # mini-batches planned at a time: a few milliseconds of the driver


class RunPlan:
    """The plan of one run, and the counts it implies (planned, reused, taken from this run's own past, new)."""

    def __init__(
        self,
        settings: PlanSettings,
        ledger: Ledger,
        run_id: str,
        resumed: bool = False,
        check: Callable[[], None] | None = None,
        counters: Counters | None = None,
    ):
        """`resumed`: a restart, or a rerun in the same folder; the counts of work done (workers started,
        attempts retried) go on from where the run's earlier attempts left them in the ledger. `check`
        is called between two chunks of the plan and may raise to stop planning (a cancel). `counters`: where
        the counts go (the step's rules for them set), a new `Counters` by default."""
        self.settings, self.ledger, self.run_id = settings, ledger, run_id
        self._check = check or (lambda: None)
        self.counters = counters or Counters()
        if resumed:
            for name in RESUMED_COUNTS:
                setattr(self.counters, name, int(ledger.get(name) or 0))
        self.notes: list[str] = []  # the planner's advice, logged with the plan
        self.diff: PlanDiff | None = None  # against the earlier plan, when the plan was sticky
        self._fresh = True  # no results to take: every mini-batch is new
        self._planner: Planner | None = None  # what lists the inputs, with its notes
        self._sticky: IncrementalPlanner | None = None  # or the sticky planner, with its diff
        self._sticky_own = False  # whether the earlier plan it keeps is this run's own
        self._rows: Generator[PlanRow, None, None] = _no_rows()

    def whole(self, sources: ReuseSources) -> None:
        """Write the whole plan at once (a restart, a preview), taking finished results from `sources`; the
        pending mini-batches' descriptors are written too, for `Ledger.pending`."""
        self.start(sources)
        try:
            while self._write_chunks(descriptors=True, check=True):
                pass
        finally:
            self.close()  # a restart's or a preview's plan that failed midway lets its planner go too

    def start(self, sources: ReuseSources | None = None) -> None:
        """Begin the plan, written by `write_next_chunk`: `counters.planning` until it is complete. With
        `sources`, finished results are taken from them, and file inputs keep the earlier plan's mini-batches
        (inputs/incremental.py; other inputs are matched by fingerprint). Without (a fresh run), every
        mini-batch and input is new, and files are fingerprinted by the workers that read them."""
        self.counters.planning = True
        self._fresh = sources is None
        if sources is None:
            planner = planner_for(self.settings, defer_files=True)
            self._planner, self._rows = planner, ((mb, None, None) for mb in planner.mini_batches())
        else:
            self._start_from(sources)
        self.ledger.clear_plan()  # after the sticky planner read the earlier plan: a resume's is in this ledger

    def _start_from(self, sources: ReuseSources) -> None:
        # Here, not at the top: the sticky planner's index needs numpy (0.1 s to import), which a fresh
        # run never pays for.
        from ..inputs.incremental import IncrementalPlanner, is_incremental

        settings = self.settings
        if is_incremental(settings.inputs, settings.partition_keys):
            sticky = IncrementalPlanner(
                settings.inputs, settings.batch_size, settings.fingerprint, sources.earlier_plan()
            )
            self._sticky, self._sticky_own = sticky, sources.own_plan
            self._rows = ((p.mini_batch, sources.find(p.mini_batch), p.checks) for p in sticky.mini_batches())
        else:
            planner = planner_for(settings, defer_files=False)
            self._planner, self._rows = planner, ((mb, sources.find(mb), None) for mb in planner.mini_batches())

    def partition_spans(self) -> list[tuple[str, int, int]]:
        """(key, first index, end index) of each partition's mini-batches once the plan is complete; [] for a
        step without `partitions`."""
        keys, planner = self.settings.partitions, self._sticky or self._planner
        if not keys or planner is None:
            return []
        return spans(keys, planner.starts, self.counters.mini_batches_total)

    def close(self) -> None:
        """Stop planning: what the planner holds is let go (a rerun's stat helper process ends)."""
        self._rows.close()

    def write_next_chunk(self, check: bool = False) -> list[MiniBatch]:
        """Write the plan's next chunks into the ledger until one holds mini-batches to run, and count them;
        returns those, `[]` once the plan is complete (`counters.planning` is then off, and the planner's
        `notes` and the `diff` are here). Mini-batches with a result to take are written as succeeded.
        `check`: call the plan's `check` between chunks (before the driver runs: it watches cancels itself)."""
        return self._write_chunks(descriptors=False, check=check)

    def _write_chunks(self, descriptors: bool, check: bool) -> list[MiniBatch]:
        while self.counters.planning:
            chunk = list(itertools.islice(self._rows, _CHUNK))
            if not chunk:
                self._finish()
                return []
            if check:
                self._check()
            self._add(chunk, descriptors)
            if to_run := [mini_batch for mini_batch, result, _ in chunk if result is None]:
                return to_run
        return []

    def _finish(self) -> None:
        """The plan is complete: its notes, or against the earlier plan, its diff."""
        self.counters.planning = False
        if self._sticky is not None:
            self.diff = self._sticky.diff
            if not self._sticky_own:  # a resume goes on with the counts its first plan made
                self._count_diff(self.diff)
        elif self._planner is not None:
            self.notes = self._planner.notes
        self.ledger.plan_written()
        self.ledger.commit()

    def _add(self, rows: list[PlanRow], descriptors: bool) -> None:
        """Rows into the ledger; a result from this run's own past counts as succeeded, not as reused."""
        for _, result, _ in rows:
            if result and result["run_id"] == self.run_id:
                result["run_id"] = None
        self.ledger.add(rows, descriptors)
        counters = self.counters
        for mini_batch, result, _ in rows:
            counters.mini_batches_total += 1
            if result:
                items = result["items"] if result["items"] is not None else result["returned"]
                reused, no_result = result["run_id"] is not None, max(0, items - (result["returned"] or 0))
                counters.add_succeeded(items, result["items_failed"] or 0, reused, without_result=no_result)
            elif self._fresh:  # everything is new
                counters.mini_batches_new += 1
                counters.inputs_new += (mini_batch.items or 0) if mini_batch.kind == "files" else 0

    def _count_diff(self, diff: PlanDiff) -> None:
        counters = self.counters
        counters.mini_batches_new = diff.mini_batches_new
        counters.inputs_new, counters.inputs_changed = diff.inputs_new, diff.inputs_changed
        counters.inputs_deleted = diff.inputs_deleted


def _no_rows() -> Generator[PlanRow, None, None]:
    yield from ()


def planner_for(settings: PlanSettings, defer_files: bool = False) -> Planner:
    """The planner of a step's inputs (`defer_files`: file mini-batches are fingerprinted by their workers)."""
    return Planner(
        settings.inputs, settings.batch_size, settings.partition_keys, settings.fingerprint, defer_files=defer_files
    )


def mini_batches(config: ParallelRunConfig, notes: list[str] | None = None) -> Iterator[MiniBatch]:
    """The mini-batches a run of `config` would plan, listed now (URLs with the step's storage options) and
    written nowhere: what `parallel-steps plan` shows of a step or of a pipeline's parallel job. The planner's
    notes on the inputs are added to `notes` once the listing is done."""
    planner = planner_for(config.plan_settings())
    with storage_options.using(storage_settings(config)):
        yield from planner.mini_batches()
    if notes is not None:
        notes.extend(planner.notes)


def preview(config: ParallelRunConfig, entry_callables: bytes | None = None) -> dict[str, Any]:
    """What a run of `config` would do now, without running anything or writing a file: how many
    mini-batches it would reuse, run, keep from the earlier plan or drop, and why.

    Raises:
        ConfigError, InputError: as `run_step` would, before anything runs.
    """
    with storage_options.using(storage_settings(config)):  # inputs named by URLs are listed with the step's options
        return _preview(config, entry_callables)


def _preview(config: ParallelRunConfig, entry_callables: bytes | None) -> dict[str, Any]:
    checked = check_step(config, entry_callables)
    code = step_code_key(config, checked, entry_callables)
    root = config.resolved_run_root()
    index = RunIndex(root) if (root / "index.sqlite").exists() else None
    ledger = Ledger(":memory:")
    try:
        sources = ReuseSources("", None, index, code, config.allow_reuse)
        plan = RunPlan(config.plan_settings(), ledger, "")
        plan.whole(sources)
    finally:
        ledger.close()
        if index is not None:
            index.close()
    counters, diff = plan.counters, plan.diff
    return dict(
        earlier_run=sources.newest_run,
        mini_batches=counters.mini_batches_total,
        reused=counters.mini_batches_reused,
        to_run=counters.mini_batches_total - counters.mini_batches_reused,
        kept=diff.mini_batches_kept if diff else None,
        new=diff.mini_batches_new if diff else counters.mini_batches_total - counters.mini_batches_reused,
        dropped=diff.mini_batches_dropped if diff else None,
        inputs_new=diff.inputs_new if diff else None,
        inputs_changed=diff.inputs_changed if diff else None,
        inputs_deleted=diff.inputs_deleted if diff else None,
        why=diff.dropped if diff else [],
    )
