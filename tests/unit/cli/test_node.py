"""A worker node of a multi-node job (cli/node.py): when its Ray stops, it leaves if the main node's head
is going away (the step ended), and joins again only while the head stays up, a bounded number of times."""

import argparse
import types

import pytest

from parallel_steps.cli import node


class ExitingRay:
    """`ray start` that stops at once, as when the head it joined goes away."""

    started = 0

    def __init__(self, options, node_index, extra):
        pass

    def start(self):
        ExitingRay.started += 1

    def running(self):
        return False

    def stop(self):
        pass

    def log_hint(self):
        return "the GCS may be overloaded"


@pytest.fixture
def worker_node(monkeypatch):
    ExitingRay.started = 0
    monkeypatch.setattr(node, "RayStart", ExitingRay)
    monkeypatch.setattr(node, "PROBE_EVERY_S", 0)
    monkeypatch.setattr(node.signal, "signal", lambda *args: None)
    args = argparse.Namespace(port=6379, node_address=None, ray_start_args="", join_timeout=5)
    topology = types.SimpleNamespace(main_address="10.0.0.1", node_index=1)
    return node._WorkerNode(args, topology)


def head_answers(monkeypatch, answers: list[bool]) -> None:
    """The head's probes answer `answers` in turn, then the last one for ever."""
    state = iter(answers)
    monkeypatch.setattr(node, "reachable", lambda host, port: next(state, answers[-1]))


def test_a_head_that_goes_away_just_after_this_nodes_ray_stopped_means_the_job_is_done(
    worker_node, monkeypatch, capsys
):
    head_answers(monkeypatch, [True, True, True, False])  # up when joining, at the first probe and the next, then gone

    assert worker_node.run() == 0
    assert ExitingRay.started == 1
    assert "joining again" not in capsys.readouterr().err


def test_while_the_head_stays_up_the_node_joins_again_a_bounded_number_of_times(worker_node, monkeypatch, capsys):
    head_answers(monkeypatch, [True])

    assert worker_node.run() == 1
    assert ExitingRay.started == node._JOIN_ATTEMPTS
    assert f"could not join the Ray head at 10.0.0.1:6379 in {node._JOIN_ATTEMPTS} attempts" in capsys.readouterr().err
