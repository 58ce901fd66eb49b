"""Writing a run's plan into its ledger: every mini-batch, with the results it may take from reuse sources.

Two ways: a whole plan (when there is something to reuse: whole-step reuse needs every
fingerprint before any worker starts), or a plan that streams into the running
driver a chunk at a time (a fresh run: the first mini-batches run while the rest is
listed, and files are fingerprinted by the workers that read them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from .config import ParallelRunConfig
from .inputs.minibatch import MiniBatch
from .inputs.planner import Planner
from .reuse import ReuseSources
from .store.ledger import Ledger
from .summary import Counters

_CHUNK = 100  # mini-batches planned at a time: a few milliseconds of the driver


class RunPlan:
    """The plan of one run, and the counts it implies (planned, reused, taken from this run's own past)."""

    def __init__(self, config: ParallelRunConfig, ledger: Ledger, run_id: str):
        self.config, self.ledger, self.run_id = config, ledger, run_id
        self.counters = Counters()
        self.notes: list[str] = []  # the planner's advice, logged with the plan

    def whole(self, sources: ReuseSources) -> None:
        """Write the whole plan, taking finished results from `sources`."""
        planner = self._planner(defer_files=False)
        self.ledger.clear_plan()
        mini_batches = planner.mini_batches()
        while chunk := list(itertools.islice(mini_batches, _CHUNK)):
            self._add([(mini_batch, sources.find(mini_batch)) for mini_batch in chunk])
        self.ledger.commit()
        self.notes = planner.notes

    def streamed(self, on_planned: Callable[[], None]) -> Iterator[MiniBatch]:
        """The plan, written a chunk at a time as the driver takes it; `counters.planning` until the end,
        when `on_planned()` is called."""
        self.counters.planning = True
        return self._stream(on_planned)

    def _stream(self, on_planned: Callable[[], None]) -> Iterator[MiniBatch]:
        planner = self._planner(defer_files=True)
        mini_batches = planner.mini_batches()
        while chunk := list(itertools.islice(mini_batches, _CHUNK)):
            self._add([(mini_batch, None) for mini_batch in chunk], descriptors=False)
            yield from chunk
        self.counters.planning = False
        self.notes = planner.notes
        on_planned()

    def _planner(self, defer_files: bool) -> Planner:
        config = self.config
        return Planner(
            config.inputs, config.batch_size, config.partition_keys, config.reuse_fingerprint, defer_files=defer_files
        )

    def _add(self, rows: list[tuple[MiniBatch, dict[str, Any] | None]], descriptors: bool = True) -> None:
        """Rows into the ledger; a result from this run's own past counts as succeeded, not as reused."""
        for _, result in rows:
            if result and result["run_id"] == self.run_id:
                result["run_id"] = None
        self.ledger.add(rows, descriptors)
        for _, result in rows:
            self.counters.mini_batches_total += 1
            if result:
                items = result["items"] if result["items"] is not None else result["returned"]
                self.counters.add_succeeded(items, result["items_failed"] or 0, reused=result["run_id"] is not None)
