"""Writing a run's plan into its ledger: every mini-batch, with the results it may take from reuse sources.

Two ways, each an explicit call that writes: `whole` (when there is something to reuse:
whole-step reuse needs every fingerprint before any worker starts), or `start_streaming`
then `write_next_chunk`, which the running driver calls whenever it runs out of mini-batches
(a fresh run: the first mini-batches run while the rest is listed, and files are
fingerprinted by the workers that read them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .checks import check_step
from .config import ParallelRunConfig
from .config_sections import PlanSettings
from .environment import storage_settings
from .inputs import storage_options
from .inputs.minibatch import MiniBatch
from .inputs.planner import Planner
from .reuse import ReuseSources, step_code_key
from .store.ledger import Ledger, PlanRow
from .store.runs import RunIndex
from .summary import RESUMED_COUNTS, Counters

if TYPE_CHECKING:
    from .inputs.incremental import IncrementalPlanner, PlanDiff

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
    ):
        """`resumed`: a restart, or a rerun in the same folder; the counts of work done (workers started,
        attempts retried) go on from where the run's earlier attempts left them in the ledger. `check`
        is called between two chunks of the plan and may raise to stop planning (a cancel)."""
        self.settings, self.ledger, self.run_id = settings, ledger, run_id
        self._check = check or (lambda: None)
        self.counters = Counters()
        if resumed:
            for name in RESUMED_COUNTS:
                setattr(self.counters, name, int(ledger.get(name) or 0))
        self.notes: list[str] = []  # the planner's advice, logged with the plan
        self.diff: PlanDiff | None = None  # against the earlier plan, when the plan was sticky
        self._streaming: tuple[Planner, Iterator[MiniBatch]] | None = None  # a streamed plan's planner, listing

    def whole(self, sources: ReuseSources) -> None:
        """Write the whole plan, taking finished results from `sources`. File inputs keep the earlier
        plan's mini-batches (inputs/incremental.py); others are matched by fingerprint."""
        settings = self.settings
        # Here, not at the top: the sticky planner's index needs numpy (0.1 s to import), which a fresh
        # run, planned while it streams, never pays for.
        from .inputs.incremental import IncrementalPlanner, is_incremental

        planner: IncrementalPlanner | Planner
        rows: Iterator[PlanRow]
        datasets = settings.inputs
        if is_incremental(datasets, settings.partition_keys):
            planner = IncrementalPlanner(datasets, settings.batch_size, settings.fingerprint, sources.earlier_plan())
            rows = ((p.mini_batch, sources.find(p.mini_batch), p.tokens) for p in planner.mini_batches())
        else:
            planner = planner_for(settings, defer_files=False)
            rows = ((mini_batch, sources.find(mini_batch), None) for mini_batch in planner.mini_batches())
        self.ledger.clear_plan()
        while chunk := list(itertools.islice(rows, _CHUNK)):
            self._check()
            self._add(chunk)
        if isinstance(planner, IncrementalPlanner):
            self.diff = planner.diff
            if not sources.own_plan:  # a resume goes on with the counts its first plan made
                self._count_diff(planner.diff)
        else:
            self.notes = planner.notes
        self.ledger.commit()

    def start_streaming(self) -> None:
        """Begin a fresh run's plan, written by `write_next_chunk`: `counters.planning` until it is complete.
        Nothing came before it: every mini-batch and input is new."""
        self.counters.planning = True
        planner = planner_for(self.settings, defer_files=True)
        self._streaming = planner, planner.mini_batches()

    def write_next_chunk(self) -> list[MiniBatch]:
        """List the plan's next mini-batches, write them into the ledger and count them; `[]` once the plan
        is complete (`counters.planning` is then off and the planner's `notes` are here)."""
        if self._streaming is None:
            return []
        planner, listing = self._streaming
        chunk = list(itertools.islice(listing, _CHUNK))
        if not chunk:
            self.counters.planning = False
            self.notes = planner.notes
            self._streaming = None
            return []
        self._add([(mini_batch, None, None) for mini_batch in chunk], descriptors=False)
        self.counters.mini_batches_new += len(chunk)
        self.counters.inputs_new += sum(mb.items or 0 for mb in chunk if mb.kind == "files")
        return chunk

    def _add(self, rows: list[PlanRow], descriptors: bool = True) -> None:
        """Rows into the ledger; a result from this run's own past counts as succeeded, not as reused."""
        for _, result, _ in rows:
            if result and result["run_id"] == self.run_id:
                result["run_id"] = None
        self.ledger.add(rows, descriptors)
        counters = self.counters
        for _, result, _ in rows:
            counters.mini_batches_total += 1
            if result:
                items = result["items"] if result["items"] is not None else result["returned"]
                counters.add_succeeded(items, result["items_failed"] or 0, reused=result["run_id"] is not None)

    def _count_diff(self, diff: PlanDiff) -> None:
        counters = self.counters
        counters.mini_batches_new = diff.mini_batches_new
        counters.inputs_new, counters.inputs_changed = diff.inputs_new, diff.inputs_changed
        counters.inputs_deleted = diff.inputs_deleted


def planner_for(settings: PlanSettings, defer_files: bool = False) -> Planner:
    """The planner of a step's inputs (`defer_files`: file mini-batches are fingerprinted by their workers)."""
    return Planner(
        settings.inputs, settings.batch_size, settings.partition_keys, settings.fingerprint, defer_files=defer_files
    )


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
