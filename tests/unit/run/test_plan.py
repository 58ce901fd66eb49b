"""The planner on small files in tmp_path: deterministic order, grouping into mini-batches, partition keys,
and the plan written into the ledger by explicit calls (run/plan.py)."""

import psutil
import pytest

from parallel_steps import FileDataset, InputError, ParallelRunConfig, TabularDataset
from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.run.plan import RunPlan, planner_for
from parallel_steps.store.ledger import Ledger


@pytest.fixture
def files(tmp_path):
    """data/ with b/ between the a files and the c file, and a hidden folder (file inputs keep it)."""
    root = tmp_path / "data"
    for name in ("a1.txt", "a2.txt", "c1.txt", "b/x.txt", "b/y.txt", ".hidden/z.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    return root


def plan_of(**fields) -> list[MiniBatch]:
    return list(planner_for(ParallelRunConfig(**fields).plan_settings()).mini_batches())


def names(mini_batch: MiniBatch) -> list[str]:
    return [path.rsplit("data/", 1)[1] for path in mini_batch.paths]


def test_files_are_listed_in_name_order_with_subfolders_where_their_names_fall(files):
    (only,) = plan_of(inputs=[str(files)], mini_batch_size=100)
    assert names(only) == [".hidden/z.txt", "a1.txt", "a2.txt", "b/x.txt", "b/y.txt", "c1.txt"]


def test_files_are_grouped_mini_batch_size_at_a_time_with_consecutive_indexes(files):
    dataset = FileDataset([str(files / "a1.txt"), str(files / "b"), str(files / "c1.txt")])
    batches = plan_of(inputs=[dataset, str(files / "a2.txt")], mini_batch_size=2)
    assert [names(mb) for mb in batches] == [["a1.txt", "b/x.txt"], ["b/y.txt", "c1.txt"], ["a2.txt"]]
    assert [mb.index for mb in batches] == [0, 1, 2]  # across inputs; a group never spans two inputs
    assert [(mb.kind, mb.items, bool(mb.fingerprint)) for mb in batches] == [("files", 2, True)] * 2 + [
        ("files", 1, True)
    ]


def test_the_same_inputs_plan_the_same_fingerprints_and_a_changed_file_changes_its_own(files):
    before = plan_of(inputs=[str(files / "b")], mini_batch_size=1)
    assert [mb.fingerprint for mb in before] == [
        mb.fingerprint for mb in plan_of(inputs=[str(files / "b")], mini_batch_size=1)
    ]
    (files / "b" / "y.txt").write_text("changed, and longer")
    after = plan_of(inputs=[str(files / "b")], mini_batch_size=1)
    assert (before[0].fingerprint == after[0].fingerprint, before[1].fingerprint == after[1].fingerprint) == (
        True,
        False,
    )


def test_deferred_file_mini_batches_carry_no_fingerprint_for_their_worker_to_make(files):
    settings = ParallelRunConfig(inputs=[str(files / "b")]).plan_settings()
    (mb,) = planner_for(settings, defer_files=True).mini_batches()
    assert (mb.fingerprint, mb.nbytes, mb.items) == (None, None, 2)


def test_a_missing_input_is_an_input_error_naming_it(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        plan_of(inputs=[str(tmp_path / "absent")])


def test_files_are_partitioned_by_the_keys_of_their_partition_format(tmp_path):
    for user, genre in (("ann", "rock"), ("bob", "jazz"), ("ann", "jazz"), ("ann", "rock")):
        folder = tmp_path / "audio" / user / genre
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{len(list(folder.iterdir()))}.wav").write_text("x")
    dataset = FileDataset(str(tmp_path / "audio"), partition_format="/{user}/{genre}/*.wav")
    batches = plan_of(inputs=[dataset], partition_keys=["user"])
    assert [mb.keys for mb in batches] == [("ann",), ("bob",)]
    assert [mb.items for mb in batches] == [3, 1]
    assert batches[0].key_values() == {"user": "ann"}


def test_tables_are_partitioned_by_column_values_sorted(tmp_path):
    (tmp_path / "sales.csv").write_text("store,amount\n2,10\n1,5\n2,7\n,1\n")
    batches = plan_of(inputs=[TabularDataset(str(tmp_path / "sales.csv"))], partition_keys=["store"])
    assert [mb.keys for mb in batches] == [(1,), (2,), (None,)]  # empty values last
    assert [mb.items for mb in batches] == [1, 2, 1]
    assert all(mb.kind == "keys" for mb in batches)


def test_hive_folders_are_partition_keys_of_tables(tmp_path):
    for store in (3, 1):
        folder = tmp_path / "t" / f"store={store}"
        folder.mkdir(parents=True)
        (folder / "part.csv").write_text("amount\n1\n2\n")
    batches = plan_of(inputs=[TabularDataset(str(tmp_path / "t"))], partition_keys=["store"])
    assert [mb.keys for mb in batches] == [(1,), (3,)]  # typed as pyarrow reads hive values


def test_a_small_csv_is_one_byte_range_mini_batch_and_a_large_one_several(tmp_path):
    (tmp_path / "rows.csv").write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(400)))
    one = plan_of(inputs=[TabularDataset(str(tmp_path / "rows.csv"))])
    many = plan_of(inputs=[TabularDataset(str(tmp_path / "rows.csv"))], mini_batch_size="1KB")
    assert len(one) == 1
    assert len(many) > 1
    assert [mb.start for mb in many][1:] == [mb.end for mb in many][:-1]  # ranges meet end to end


# The plan in the ledger ---------------------------------------------------------------------------------


@pytest.fixture
def ledger():
    ledger = Ledger(":memory:")
    yield ledger
    ledger.close()


def test_a_streamed_plan_is_written_only_by_write_next_chunk(files, ledger):
    plan = RunPlan(ParallelRunConfig(inputs=[str(files)], mini_batch_size=1).plan_settings(), ledger, "run-1")
    plan.start()
    assert plan.counters.planning
    assert ledger.counts() == {}  # starting writes nothing
    chunk = plan.write_next_chunk()
    assert [mb.index for mb in chunk] == [0, 1, 2, 3, 4, 5]
    ledger.commit()
    assert ledger.counts() == {"pending": 6}
    assert (plan.counters.mini_batches_total, plan.counters.mini_batches_new, plan.counters.inputs_new) == (6, 6, 6)
    assert plan.write_next_chunk() == []
    assert not plan.counters.planning


class EarlierResults:
    """Reuse sources holding a result for the mini-batches of `indices`."""

    own_plan = False

    def __init__(self, indices):
        self.indices = indices

    def find(self, mini_batch):
        if mini_batch.index in self.indices:
            return dict(part=None, returned=1, items_failed=0, items=1, run_id="earlier")
        return None

    def earlier_plan(self):
        return iter(())


def test_a_plan_with_results_to_take_streams_only_what_has_to_run(files, ledger):
    plan = RunPlan(ParallelRunConfig(inputs=[str(files)], mini_batch_size=1).plan_settings(), ledger, "run-1")
    plan.start(EarlierResults({0, 1, 3, 4, 5}))
    assert [mb.index for mb in plan.write_next_chunk()] == [2]  # the taken results are written on the way
    ledger.commit()
    assert ledger.counts() == {"succeeded": 5, "pending": 1}
    assert (plan.counters.mini_batches_total, plan.counters.mini_batches_reused) == (6, 5)
    assert plan.write_next_chunk() == []
    assert not plan.counters.planning


def test_a_whole_plan_is_written_at_once_and_takes_results_from_its_sources(files, ledger):
    settings = ParallelRunConfig(inputs=[TabularDataset(str(files.parent / "t.csv"))]).plan_settings()
    (files.parent / "t.csv").write_text("a\n1\n")
    plan = RunPlan(settings, ledger, "run-1")
    plan.whole(EarlierResults({0}))
    assert ledger.counts() == {"succeeded": 1}
    assert (plan.counters.mini_batches_total, plan.counters.mini_batches_reused) == (1, 1)


def test_a_rerun_plan_closed_before_its_end_ends_its_stat_helper(tmp_path, ledger):
    """A rerun's plan of more than one listing run (10,000 files) has a helper process stat the next run;
    a run that stops before its plan is complete (a failure, a cancel) closes the plan, and the helper ends."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(10_001):
        (folder / f"{i:05}").touch()
    plan = RunPlan(ParallelRunConfig(inputs=[str(folder)], mini_batch_size=10).plan_settings(), ledger, "run-2")
    plan.start(EarlierResults(set()))
    assert len(plan.write_next_chunk()) == 100  # of 1,001 mini-batches
    assert [child.cmdline()[1:3] for child in psutil.Process().children()] == [["-I", "-S"]]
    plan.close()
    assert psutil.Process().children() == []
