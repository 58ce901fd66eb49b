"""A rerun's listing statted a run ahead in a helper process (inputs/stat_ahead.py): the same sizes and
tokens as `os.stat` gives, errors that name the file, the listing's own stats for URLs, and no helper
left behind."""

import os
import time

import psutil
import pytest

from parallel_steps import InputError
from parallel_steps.inputs import stat_ahead
from parallel_steps.inputs.fingerprints import content_hash, file_token
from parallel_steps.inputs.stat_ahead import tokens_ahead
from parallel_steps.storage.objects import RemoteStat


@pytest.fixture
def runs(tmp_path):
    """Three local runs of files of different sizes."""
    listing = []
    for run in range(3):
        paths = []
        for i in range(5):
            path = tmp_path / f"{run}-{i}.txt"
            path.write_bytes(b"x" * (10 * run + i))
            paths.append(str(path))
        listing.append((paths, None))
    return listing


def helpers() -> list[psutil.Process]:
    return [child for child in psutil.Process().children() if "-S" in _command_line(child)]


def _command_line(process: psutil.Process) -> list[str]:
    """A child's command line, once its new program has one: Popen returns when the exec closes the child's
    copy of its error pipe, a moment before the kernel sets the new command line (read then, it is empty)."""
    for _ in range(100):
        if command_line := process.cmdline():
            return command_line
        time.sleep(0.01)
    return []


def sizes_of(given) -> list[list[int]]:
    return [list(sizes) for _, sizes, _ in given]


def test_every_local_file_has_its_size_and_the_token_a_worker_computes(runs):
    given = list(tokens_ahead(runs, "stat"))
    assert [run for run, _, _ in given] == [paths for paths, _ in runs]
    for paths, sizes, tokens in given:
        assert list(sizes) == [os.stat(p).st_size for p in paths]
        assert tokens == [file_token(os.stat(p)) for p in paths]


def test_in_mode_content_the_tokens_are_the_files_hashes(runs):
    for paths, sizes, tokens in tokens_ahead(runs, "content"):
        assert tokens == [content_hash(p) for p in paths]
        assert list(sizes) == [os.stat(p).st_size for p in paths]


def test_the_runs_after_the_first_are_statted_by_a_helper_that_ends_with_the_listing(runs):
    given = tokens_ahead(runs, "stat")
    next(given)
    assert len(helpers()) == 1  # statting the second run while the caller works on the first
    assert list(given)
    assert helpers() == []


def test_a_listing_given_up_early_ends_its_helper(runs):
    given = tokens_ahead(runs, "stat")
    next(given)
    given.close()
    assert helpers() == []


def test_a_file_gone_before_the_helper_stats_it_is_named_in_the_error(runs):
    gone = runs[2][0][3]
    os.unlink(gone)
    with pytest.raises(InputError, match="cannot read") as error:
        list(tokens_ahead(runs, "stat"))
    assert gone in str(error.value)
    assert helpers() == []


def test_a_listings_own_stats_are_given_as_they_are(runs):
    listed = [RemoteStat(7, "etag-1"), RemoteStat(8, "etag-2")]
    given = list(tokens_ahead([runs[0], (["s3://b/k1", "s3://b/k2"], listed), runs[1]], "stat"))
    assert given[1] == (["s3://b/k1", "s3://b/k2"], [7, 8], ["7\0etag-1", "8\0etag-2"])
    assert sizes_of(given)[2] == [10, 11, 12, 13, 14]


def test_with_one_cpu_the_driver_stats_every_run_itself(runs, monkeypatch):
    monkeypatch.setattr(stat_ahead, "cpu_count", lambda: 1)
    given = tokens_ahead(runs, "stat")
    next(given)
    assert helpers() == []
    assert sizes_of(given)[-1] == [20, 21, 22, 23, 24]


def test_a_helper_that_dies_leaves_its_run_to_the_driver(runs):
    given = tokens_ahead(runs, "stat")
    next(given)
    (helper,) = helpers()
    helper.kill()
    helper.wait()
    assert sizes_of(given) == [[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]]
