"""The run ledger against a SQLite file in tmp_path: the plan, outcomes, batched commits, what a crash
keeps, and the reads (pending, parts, reusable results, counts, rows)."""

import sqlite3

import pytest

from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.store.ledger import Ledger
from parallel_steps.store.output import Part


def batch(index: int, fingerprint: str | None = None, items: int = 2) -> MiniBatch:
    paths = tuple(f"data/f{index:03d}-{i}.txt" for i in range(items))
    return MiniBatch(index, "files", paths, fingerprint or f"fp{index}", 10 * items, items)


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    yield ledger
    ledger.close()


def plan(ledger: Ledger, count: int) -> list[MiniBatch]:
    batches = [batch(i) for i in range(count)]
    ledger.add([(mb, None, None) for mb in batches])
    ledger.commit()
    return batches


def test_pending_yields_the_planned_descriptors_in_plan_order_across_chunks(ledger):
    batches = plan(ledger, 7)
    assert list(ledger.pending(chunk=3)) == batches


def test_a_succeeded_mini_batch_is_no_longer_pending_and_its_part_is_named_in_plan_order(ledger):
    plan(ledger, 3)
    ledger.succeed(2, 1, Part("spool-b", 0, 5), 2, 0, 2, "w1", 0.1, "fp2")
    ledger.succeed(0, 1, Part("spool-a", 7, 3), 2, 0, 2, "w0", 0.1, "fp0")
    ledger.commit()
    assert [mb.index for mb in ledger.pending()] == [1]
    assert list(ledger.parts()) == [Part("spool-a", 7, 3), Part("spool-b", 0, 5)]
    assert ledger.counts() == {"succeeded": 2, "pending": 1}


def test_successes_wait_for_the_commit_and_a_rollback_drops_them(ledger, tmp_path):
    plan(ledger, 2)
    ledger.succeed(0, 1, Part("spool", 0, 4), 2, 0, 2, "w0", 0.1, "fp0")
    reader = Ledger.open_readonly(tmp_path / "ledger.sqlite")
    assert reader.counts() == {"pending": 2}  # not committed: another reader sees nothing yet
    ledger.rollback()
    ledger.commit()
    assert reader.counts() == {"pending": 2}
    reader.close()


def test_what_a_killed_driver_committed_stands_and_the_rest_is_pending_again(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    plan(ledger, 3)
    ledger.succeed(0, 1, Part("spool", 0, 4), 2, 0, 2, "w0", 0.1, "fp0")
    ledger.commit()
    ledger.succeed(1, 1, Part("spool", 4, 4), 2, 0, 2, "w0", 0.1, "fp1")  # never committed
    ledger._db.close()  # the driver dies: no close(), no commit
    again = Ledger(path)
    assert [mb.index for mb in again.pending()] == [1, 2]
    assert list(again.parts()) == [Part("spool", 0, 4)]
    again.close()


def test_a_failed_mini_batch_keeps_its_error_and_each_failed_attempt_is_listed(ledger):
    plan(ledger, 1)
    ledger.record_attempt(0, 1, "w0", 11, 100.0, "crashed", "worker exited", -9)
    ledger.fail(0, 2, "ValueError: bad", None, 2, "w1", 0.5)
    ledger.commit()
    (row,) = ledger.rows()
    assert (row["state"], row["attempts"], row["error"], row["worker"]) == ("failed", 2, "ValueError: bad", "w1")
    (attempt,) = ledger.attempts(0)
    assert (attempt["outcome"], attempt["exit_code"], attempt["pid"]) == ("crashed", -9, 11)
    assert list(ledger.pending()) == []


def test_a_reused_result_is_planned_as_succeeded_with_its_source_run(ledger):
    reused = dict(part=Part("old-spool", 0, 9), returned=2, items_failed=1, run_id="earlier-run")
    ledger.add([(batch(0), reused, None), (batch(1), None, None)])
    ledger.commit()
    assert [mb.index for mb in ledger.pending()] == [1]
    (row0, row1) = ledger.rows()
    assert (row0["state"], row0["reused_from"], row0["items_failed"]) == ("succeeded", "earlier-run", 1)
    assert row1["state"] == "pending"


def test_results_by_fingerprint_are_what_a_later_run_may_reuse(ledger):
    plan(ledger, 3)
    ledger.succeed(0, 1, Part("spool", 0, 4), 2, 0, 2, "w0", 0.1, None)
    ledger.succeed(1, 1, None, 0, 0, 2, "w0", 0.1, "fp1-from-worker")  # returned no rows: no part
    ledger.fail(2, 3, "boom", 1, 2, "w0", 0.1)
    ledger.commit()
    results = ledger.results_by_fingerprint()
    assert set(results) == {"fp0", "fp1-from-worker"}  # the worker's fingerprint replaces none; failures never
    assert results["fp0"]["part"] == Part("spool", 0, 4)
    assert results["fp1-from-worker"]["part"] is None
    assert ledger.fingerprints() == ["fp0", "fp1-from-worker", "fp2"]


def test_a_streamed_plan_row_without_its_descriptor_is_still_counted_and_listed(ledger):
    ledger.add([(batch(0, fingerprint=None), None, None)], descriptors=False)
    ledger.commit()
    assert ledger.counts() == {"pending": 1}
    assert ledger.rows()[0]["source"].startswith("data/f000-0.txt")
    assert ledger.fingerprints() == ["fp0"]


def test_meta_values_are_text_and_none_clears_them(ledger):
    ledger.set(workers_started=4, status="Running")
    ledger.set(status=None)
    ledger.commit()
    assert ledger.get("workers_started") == "4"
    assert ledger.get("status") is None
    assert ledger.get("missing", "default") == "default"


def test_clear_plan_drops_every_row_for_a_new_plan(ledger):
    plan(ledger, 3)
    ledger.clear_plan()
    ledger.add([(batch(5), None, None)])
    ledger.commit()
    assert [mb.index for mb in ledger.pending()] == [5]


def test_the_plan_keeps_file_members_for_a_sticky_rerun(ledger):
    plan(ledger, 2)
    earlier = list(ledger.plan())
    assert [e[0] for e in earlier] == [0, 1]
    assert all(e[1] for e in earlier)  # encoded member files


def test_open_readonly_is_none_without_a_ledger_or_for_another_layout(tmp_path):
    assert Ledger.open_readonly(tmp_path / "absent.sqlite") is None
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("PRAGMA user_version=1")
    db.close()
    assert Ledger.open_readonly(other) is None


def test_a_ledger_of_another_layout_is_rebuilt_empty(tmp_path):
    path = tmp_path / "ledger.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE mini_batches (idx INTEGER)")
    db.execute("INSERT INTO mini_batches VALUES (1)")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    ledger = Ledger(path)
    assert ledger.counts() == {}
    ledger.close()


class _Watched:
    """A writer's connection that, after each script it runs (how a ledger builds its tables), lets `look` read
    the file as another process would."""

    def __init__(self, db: sqlite3.Connection, look):
        self._db, self._look = db, look

    def __getattr__(self, name):
        return getattr(self._db, name)

    def executescript(self, script):
        result = self._db.executescript(script)
        self._look()
        return result


def test_a_reader_never_sees_a_new_ledgers_layout_without_its_tables(tmp_path, monkeypatch):
    """`status` may read a run's ledger while its driver creates it: whenever the writer has built part of it, a
    ledger of this layout has its tables (or is not of this layout yet, which a reader takes for none)."""
    path = tmp_path / "ledger.sqlite"
    seen = []

    def look():
        reader = Ledger.open_readonly(path)
        if reader is not None:
            try:
                seen.append(len(reader.rows()))
            finally:
                reader.close()

    connect, connections = sqlite3.connect, []

    def watch_the_first(*args, **kwargs):  # the writer's; the reader's own connections are not watched
        connections.append(connect(*args, **kwargs))
        return _Watched(connections[0], look) if len(connections) == 1 else connections[-1]

    monkeypatch.setattr(sqlite3, "connect", watch_the_first)
    Ledger(path).close()

    assert seen == [0]  # the reader looked once, at the finished ledger, never at a half-made one
