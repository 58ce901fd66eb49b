"""A Ray actor killed while it holds copies of files named by URLs leaves none on its node: its copies live in the
run's folder of copies, which the pool removes from every node when the run ends (issue 47)."""

from __future__ import annotations

from pathlib import Path

from support import folders, make_inputs, output_lines, write_entry_script

from parallel_steps import ParallelRunConfig
from parallel_steps.run.step import run_step
from parallel_steps.worker.side_inputs import side_inputs_dir


def test_an_actor_killed_holding_copies_of_url_files_leaves_none(ray_cluster, tmp_path):
    write_entry_script(
        tmp_path,
        """
        import signal

        def run(mini_batch):
            names = [os.path.basename(path) for path in mini_batch]
            assert all(path.startswith(os.environ["PARALLEL_STEPS_DOWNLOADS"]) for path in mini_batch)  # copies
            if "f3.txt" in names and _first_time("kill"):
                with open(os.path.join(os.environ["MARKERS"], "killed-with"), "w") as file:
                    file.write(mini_batch[0])  # the copy it holds as it dies
                os.kill(os.getpid(), signal.SIGKILL)
            return names
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i}.txt" for i in range(6)])
    config = ParallelRunConfig(
        entry_script=str(tmp_path / "score.py"),
        inputs=[(tmp_path / "data").as_uri()],  # file:// URLs: fetched to local copies, as objects are
        output=str(tmp_path / "out"),
        run_root=str(tmp_path / "runs"),
        backend="ray",
        allow_reuse=False,
        mini_batch_size=1,
        process_count_per_node=1,
        environment_variables=folders(tmp_path),
    )

    summary = run_step(config)

    assert sorted(output_lines(summary)) == names
    assert summary["workers_started"] == 2  # one was killed with its copies
    held = Path(tmp_path / "markers" / "killed-with").read_text()
    assert held.startswith(str(side_inputs_dir() / Path(summary["run_dir"]).name))  # in the run's copies
    assert not Path(held).exists()
    assert not (side_inputs_dir() / Path(summary["run_dir"]).name).exists()
