"""`append_row_dataframe_header`: the setting from where ParallelRunStep users put it, and the text output's
one header line, through the spool and the assembly (no workers: slices appended and assembled here)."""

import textwrap

import pandas as pd
import pytest

from parallel_steps import ParallelRunConfig, load_job
from parallel_steps.store.output import Spool, assemble, spool_format, spool_path


@pytest.mark.parametrize(
    ("arguments", "header"),
    [
        (["--model", "m", "--append_row_dataframe_header", True], True),
        (["--append_row_dataframe_header", "False"], False),
        (["--append_row_dataframe_header=true"], True),
        (["--append_row_dataframe_header", "--model", "m"], True),  # a bare flag
        (["--model", "m"], False),
    ],
)
def test_the_v1_argument_sets_the_field_and_stays_in_the_arguments(arguments, header):
    config = ParallelRunConfig(arguments=arguments)
    assert config.append_row_dataframe_header is header
    assert config.arguments == [str(a) for a in arguments]


def test_the_field_wins_over_the_argument():
    config = ParallelRunConfig(arguments=["--append_row_dataframe_header", "True"], append_row_dataframe_header=False)
    assert config.append_row_dataframe_header is False


def test_a_v2_job_sets_it_in_program_arguments(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "job.yml").write_text(
        textwrap.dedent("""
            type: parallel
            inputs: {data: {type: uri_folder, path: data}}
            input_data: ${{inputs.data}}
            task:
              entry_script: score.py
              program_arguments: --append_row_dataframe_header True
        """)
    )
    assert load_job(tmp_path / "job.yml").append_row_dataframe_header is True


def test_only_text_output_gets_the_header_encoding():
    assert spool_format("text", True) != "text"
    assert [spool_format(fmt, True) for fmt in ("csv", "parquet", "jsonl")] == ["csv", "parquet", "jsonl"]
    assert spool_format("text", False) == "text"


def test_the_first_dataframes_header_once_on_top_whatever_comes_first(tmp_path):
    fmt = spool_format("text", True)
    spools = [Spool(spool_path(str(tmp_path), "w0", fmt)), Spool(spool_path(str(tmp_path), "w1", fmt))]
    parts = [
        spools[0].append(["a list element"], fmt),  # a list first: no header of its own
        spools[1].append(pd.DataFrame({"x": [1, 2], "y z": ["p", "q"]}), fmt),
        spools[0].append(pd.DataFrame({"x": [3], "y z": ["r"]}), fmt),
    ]
    for spool in spools:
        spool.close()
    assemble(parts, tmp_path / "out.txt", fmt)
    assert (tmp_path / "out.txt").read_text().splitlines() == ['x "y z"', "a list element", "1 p", "2 q", "3 r"]


def test_no_dataframe_no_header(tmp_path):
    fmt = spool_format("text", True)
    spool = Spool(spool_path(str(tmp_path), "w0", fmt))
    parts = [spool.append(["a", "b"], fmt), spool.append(["c"], fmt)]
    spool.close()
    assemble(parts, tmp_path / "out.txt", fmt)
    assert (tmp_path / "out.txt").read_text().splitlines() == ["a", "b", "c"]
