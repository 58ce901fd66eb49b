"""The pool <-> worker wire: the messages of protocol.py, and the frames of a local worker's socket
(pool/local/frames.py), in one process (a socket pair at most, no worker process)."""

import pickle
import socket

import pytest

from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool.local.frames import FrameReader, FrameWriter, PoolEnd, WorkerEnd, encode
from parallel_steps.protocol import (
    Outcome,
    Part,
    RunAttempts,
    StopWorker,
    WorkerEnded,
    WorkerHangTimeout,
    WorkerInitFailed,
    WorkerLoaded,
    WorkerOverMemory,
    WorkerReady,
    WorkerResults,
    WorkerRunning,
)

MINI_BATCH = MiniBatch(4, "csv", ("data/a.csv",), "fp-4", 120, None, start=0, end=120, read={"sep": ";"})
OUTCOME = Outcome(True, 10, 10, Part("parts/node0-process000.csv", 64, 200), started=1.5, duration=0.25)
MESSAGES = [
    RunAttempts([(MINI_BATCH, 1), (MiniBatch(5, "files", ("x",), None, 1, 1), 3)]),
    StopWorker(),
    WorkerReady(1234),
    WorkerReady(1234, "1"),
    WorkerInitFailed("Traceback ...\nRuntimeError: no model", 1234, None),
    WorkerLoaded(4, 1, 10),
    WorkerHangTimeout(4, 1, 60.0),
    WorkerHangTimeout(4, 1, None),
    WorkerHangTimeout(4, 1, -1),
    WorkerResults([(4, OUTCOME), (5, Outcome(False, None, error="Traceback ..."))]),
    WorkerOverMemory(4, 2, 700 << 20),
    WorkerRunning(4, 1, 1.5),
    WorkerEnded(4, 1, [(3, OUTCOME), (4, OUTCOME)]),
]


# Messages ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_pickling_whole(message):
    assert pickle.loads(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)) == message


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_pickles_as_its_class_and_its_fields(message):
    """The cheap form (as Outcome's): no instance dictionary, no dataclass state to rebuild."""
    cls, fields = message.__reduce__()
    assert cls is type(message)
    assert cls(*fields) == message
    assert not hasattr(message, "__dict__")


def test_messages_are_frozen():
    with pytest.raises(AttributeError):
        WorkerLoaded(1, 1, 5).items = 6


def test_a_run_message_carries_the_descriptors_and_attempts_in_order():
    message = pickle.loads(pickle.dumps(MESSAGES[0]))
    (first, attempt), (second, retry) = message.attempts
    assert (first, attempt) == (MINI_BATCH, 1)
    assert first.read == {"sep": ";"}
    assert (second.index, retry) == (5, 3)


def test_results_carry_the_slice_each_outcome_names():
    (index, outcome), (failed_index, failed) = pickle.loads(pickle.dumps(MESSAGES[9])).results
    assert (index, outcome.part, outcome.duration) == (4, Part("parts/node0-process000.csv", 64, 200), 0.25)
    assert (failed_index, failed.ok, failed.error) == (5, False, "Traceback ...")


# Frames -------------------------------------------------------------------------------------------------


def test_a_frame_is_its_length_then_its_pickle():
    frame = encode(StopWorker())
    body = pickle.dumps(StopWorker(), protocol=pickle.HIGHEST_PROTOCOL)
    assert frame == len(body).to_bytes(8, "big") + body


def test_frames_read_whole_whatever_the_pieces_they_arrive_in():
    stream = b"".join(encode(m) for m in MESSAGES)
    for size in (1, 3, 7, 64, len(stream)):
        reader, got = FrameReader(), []
        for start in range(0, len(stream), size):
            got += reader.feed(stream[start : start + size])
        assert got == MESSAGES, size


def test_a_partial_frame_waits_for_the_rest():
    frame = encode(WorkerLoaded(1, 1, 5))
    reader = FrameReader()

    assert reader.feed(frame[:5]) == []  # not even the header
    assert reader.feed(frame[5:-1]) == []  # all but the last byte
    assert reader.feed(frame[-1:] + encode(StopWorker())) == [WorkerLoaded(1, 1, 5), StopWorker()]
    assert reader.feed(b"") == []


class Sender:
    """A socket that takes at most `takes[i]` bytes on its i-th send; None: it is full (EAGAIN)."""

    def __init__(self, *takes, error: Exception | None = None):
        self.takes, self.error, self.received = list(takes), error, bytearray()

    def send(self, data, flags=0):
        if self.error:
            raise self.error
        take = self.takes.pop(0)
        if take is None:
            raise BlockingIOError
        self.received += data[:take]
        return min(take, len(data))


def test_a_writer_sends_what_the_socket_takes_and_keeps_the_rest_in_order():
    writer = FrameWriter()
    writer.add(WorkerLoaded(1, 1, 5))
    writer.add(StopWorker())
    sender = Sender(10, None, 3, 10**6)

    assert writer.write(sender) is True  # 10 bytes went
    assert writer.write(sender) is True  # full: nothing went, nothing blocked
    assert writer.write(sender) is True
    assert writer.write(sender) is False  # the rest went

    assert FrameReader().feed(sender.received) == [WorkerLoaded(1, 1, 5), StopWorker()]


def test_a_writer_with_nothing_to_send_does_not_touch_the_socket():
    assert FrameWriter().write(Sender()) is False


def test_a_writer_whose_worker_died_drops_what_it_held():
    """The sentinel reports the loss; the frames can go nowhere."""
    writer = FrameWriter()
    writer.add(StopWorker())

    assert writer.write(Sender(error=BrokenPipeError())) is False
    assert writer.unsent == b""


# Both ends of a socket pair --------------------------------------------------------------------------------


@pytest.fixture
def ends():
    pool_sock, worker_sock = socket.socketpair()
    pool, worker = PoolEnd(pool_sock), WorkerEnd(worker_sock)
    yield pool, worker, worker_sock
    pool.close()
    worker_sock.close()


def test_messages_cross_both_ways_in_order(ends):
    pool, worker, _ = ends
    pool.send(MESSAGES[0])
    pool.send(StopWorker())
    assert worker.waiting()
    assert (worker.recv(), worker.recv()) == (MESSAGES[0], StopWorker())
    assert not worker.waiting()

    for message in MESSAGES[2:]:
        worker.send(message)
    got = []
    while len(got) < len(MESSAGES) - 2:
        got += pool.receive()
    assert got == MESSAGES[2:]


def test_the_pool_end_never_blocks_on_a_worker_that_does_not_read(ends):
    """A worker stuck in run() reads nothing: sends return at once with the frames waiting, and go
    as the worker reads again."""
    pool, _, worker_sock = ends
    big = RunAttempts([(MiniBatch(i, "files", ("p" * 100_000,), None, 1, 1), 1) for i in range(40)])

    assert pool.send(big) is True  # megabytes: far more than the socket holds
    assert pool.send(StopWorker()) is True
    assert pool.flush() is True  # still full, still not blocking

    reader, got = FrameReader(), []
    while pool.flush() or len(got) < 2:  # the worker reads what has come; the pool writes more
        try:
            got += reader.feed(worker_sock.recv(1 << 16, socket.MSG_DONTWAIT))
        except BlockingIOError:
            pass
    assert got == [big, StopWorker()]


def test_the_pool_end_reads_nothing_without_blocking(ends):
    pool, _, _ = ends
    assert pool.receive() == []


def test_the_pool_end_reads_what_came_before_the_worker_closed_then_eof(ends):
    pool, worker, worker_sock = ends
    worker.send(WorkerLoaded(1, 1, 5))
    worker.send(WorkerResults([(1, OUTCOME)]))
    worker_sock.close()

    assert pool.receive() == [WorkerLoaded(1, 1, 5), WorkerResults([(1, OUTCOME)])]
    with pytest.raises(EOFError):
        pool.receive()


def test_a_frame_cut_off_by_the_worker_dying_is_not_a_message(ends):
    pool, _, worker_sock = ends
    worker_sock.sendall(encode(WorkerLoaded(1, 1, 5))[:-2])
    worker_sock.close()

    with pytest.raises(EOFError):
        pool.receive()


def test_the_worker_end_sees_eof_when_the_pool_closes(ends):
    pool, worker, _ = ends
    pool.send(StopWorker())
    pool.close()

    assert worker.recv() == StopWorker()
    with pytest.raises(EOFError):
        worker.recv()
