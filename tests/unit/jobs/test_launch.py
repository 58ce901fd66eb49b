"""The launcher: where a driver runs (the decision table), what every way shares (checks first, the run
directory, no trace after a user error), and how `run()` ends for a driver here and one elsewhere.
The ways themselves are fakes: no process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from parallel_steps import ConfigError, InputError, ParallelRunConfig, StepFailed
from parallel_steps.jobs import launch as launch_module
from parallel_steps.jobs.follow import RunHooks
from parallel_steps.jobs.launch import Launcher, where
from parallel_steps.store.runs import write_ray_job, write_summary

LOCAL = dict(entry_script="score.py", inputs=["data"], name="score")
RAY_JOB = dict(LOCAL, backend="ray", submit_to="ray_job")


@pytest.mark.parametrize(
    ("fields", "background", "expected"),
    [
        (LOCAL, False, "local"),
        (LOCAL, True, "detached"),
        (RAY_JOB, False, "ray_job"),
        (RAY_JOB, True, "ray_job"),
    ],
)
def test_where_the_driver_runs(fields, background, expected):
    assert where(ParallelRunConfig(**fields), background) == expected


def test_only_a_ray_job_is_followed_by_run():
    assert not Launcher(ParallelRunConfig(**LOCAL)).elsewhere
    assert Launcher(ParallelRunConfig(**RAY_JOB)).elsewhere


class Starters:
    """Fake ways to start a driver: they record the call and may write what the driver would."""

    def __init__(self, monkeypatch, ends: dict | None = None, error: Exception | None = None):
        self.calls: list[tuple[str, Path, str]] = []
        self.ends, self.error = ends, error
        for name in ("detached", "ray_job"):
            monkeypatch.setitem(launch_module._STARTERS, name, self._starter(name))

    def _starter(self, name):
        def start(config, run_dir, run_id, entry_callables):
            self.calls.append((name, run_dir, run_id))
            if self.error:
                raise self.error
            if name == "ray_job":
                write_ray_job(run_dir, "http://head:8265", f"parallel-steps-{run_id}-1")
            if self.ends is not None:
                write_summary(run_dir, {"run_id": run_id, "run_dir": str(run_dir), **self.ends})

        return start


@pytest.fixture
def data(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a\n")
    (tmp_path / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    return tmp_path


class TestStart:
    def test_a_local_step_starts_detached_in_a_new_directory_under_the_run_root(self, data, monkeypatch):
        starters = Starters(monkeypatch)
        run_dir = Launcher(ParallelRunConfig(**LOCAL)).start()
        ((way, folder, run_id),) = starters.calls
        assert (way, folder, folder.parent) == ("detached", run_dir, data / "runs")
        assert run_id.startswith("score-")
        assert run_dir.name == run_id

    def test_a_ray_job_step_starts_as_a_ray_job_in_the_given_directory(self, data, monkeypatch):
        starters = Starters(monkeypatch)
        run_dir = Launcher(ParallelRunConfig(**RAY_JOB), run_dir="mine", run_id="run-1").start()
        assert starters.calls == [("ray_job", data / "mine", "run-1")]
        assert run_dir == data / "mine"

    def test_inputs_are_checked_before_anything_starts(self, data, monkeypatch):
        starters = Starters(monkeypatch)
        with pytest.raises(InputError, match=r"^missing: no such file or folder"):
            Launcher(ParallelRunConfig(**dict(LOCAL, inputs=["missing"])), run_dir="new").start()
        assert starters.calls == []
        assert not (data / "new").exists()

    def test_a_refused_start_leaves_no_new_directory_behind(self, data, monkeypatch):
        Starters(monkeypatch, error=ConfigError("submit_to", "the Ray cluster refused the job"))
        with pytest.raises(ConfigError, match=r"^submit_to: the Ray cluster refused the job"):
            Launcher(ParallelRunConfig(**RAY_JOB), run_dir="new").start()
        assert not (data / "new").exists()

    def test_a_refused_start_keeps_a_directory_that_was_there(self, data, monkeypatch):
        (data / "earlier").mkdir()
        (data / "earlier" / "run.json").write_text("{}")
        Starters(monkeypatch, error=ConfigError("submit_to", "refused"))
        with pytest.raises(ConfigError):
            Launcher(ParallelRunConfig(**RAY_JOB), run_dir="earlier").start()
        assert (data / "earlier" / "run.json").exists()


def test_an_entry_script_and_entry_functions_together_are_refused():
    with pytest.raises(ConfigError, match=r"^entry_script: is not run when entry functions"):
        Launcher(ParallelRunConfig(**LOCAL), entry_callables=b"functions")


class Told(RunHooks):
    def __init__(self):
        self.launched_at: list[str] = []

    def launched(self, follower, where):
        self.launched_at.append(where)


class TestRun:
    def test_a_local_driver_runs_here_with_the_hooks_as_callbacks(self, monkeypatch):
        seen = {}

        def run_step(config, **kwargs):
            seen.update(kwargs, config=config)
            return {"status": "Succeeded"}

        monkeypatch.setattr(launch_module, "run_step", run_step)
        hooks, cancel = Told(), object()
        config = ParallelRunConfig(**LOCAL)
        summary = Launcher(config, run_dir="d", run_id="i").run(hooks, cancel)  # type: ignore[arg-type]
        assert summary == {"status": "Succeeded"}
        assert (seen["config"], seen["run_dir"], seen["run_id"], seen["cancel"]) == (config, "d", "i", cancel)
        assert (seen["on_progress"], seen["on_event"]) == (hooks.progress, hooks.event)
        assert hooks.launched_at == []

    def test_a_driver_elsewhere_is_started_told_and_followed_to_its_end(self, data, monkeypatch):
        Starters(monkeypatch, ends={"status": "Succeeded", "status_reason": "every mini-batch succeeded"})
        hooks = Told()
        summary = Launcher(ParallelRunConfig(**RAY_JOB), run_id="run-2").run(hooks)
        assert hooks.launched_at == ["the driver runs as Ray job parallel-steps-run-2-1"]
        assert (summary["status"], summary["ray_job"], summary["mini_batches_total"]) == (
            "Succeeded",
            "parallel-steps-run-2-1",
            0,
        )

    def test_a_driver_elsewhere_that_failed_raises_with_its_summary(self, data, monkeypatch):
        Starters(monkeypatch, ends={"status": "Failed", "status_reason": "error_threshold exceeded"})
        with pytest.raises(StepFailed, match=r"^Failed: error_threshold exceeded") as failed:
            Launcher(ParallelRunConfig(**RAY_JOB)).run()
        assert failed.value.summary["items_failed"] == 0

    def test_follow_starts_and_hands_over_the_follower(self, data, monkeypatch):
        Starters(monkeypatch, ends={"status": "Running", "status_reason": "running"})
        hooks = Told()
        follower = Launcher(ParallelRunConfig(**LOCAL), run_dir="here").follow(hooks)
        assert Path(follower.run) == data / "here"
        assert hooks.launched_at == ["the driver runs in the background"]
