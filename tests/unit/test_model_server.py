"""The OpenAI-compatible model server the inference tests and bench start (tests/model_server.py), driven over
real loopback sockets with the standard library's client: its answers, its fault markers, its concurrency
cap, and that stop() releases a hung request."""

import base64
import http.client
import json
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from model_server import ModelServer

TIMEOUT_S = 10.0


def post(server: ModelServer, path: str, payload: dict) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on its own connection: (status, headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    try:
        connection.request("POST", f"/v1{path}", json.dumps(payload), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def chat(text: str) -> dict:
    return {"model": "echo", "messages": [{"role": "user", "content": text}]}


def post_together(server: ModelServer, count: int) -> list[tuple[int, http.client.HTTPMessage, bytes]]:
    """`count` chat requests sent at the same moment, each from its own thread and connection."""
    barrier = threading.Barrier(count)

    def send(index: int) -> tuple[int, http.client.HTTPMessage, bytes]:
        barrier.wait(TIMEOUT_S)
        return post(server, "/chat/completions", chat(f"row {index}"))

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(send, range(count)))


@pytest.fixture
def server():
    with ModelServer(latency_s=0.01) as started:
        yield started


def test_chat_completion_echoes_the_last_user_message(server):
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "echo: first"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    status, headers, body = post(server, "/chat/completions", {"model": "echo", "messages": messages})

    assert status == 200
    assert headers["Content-Type"] == "application/json"
    answer = json.loads(body)
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "echo"
    assert answer["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "echo: second"}, "finish_reason": "stop"}
    ]
    assert set(answer["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    assert (server.requests, server.completed, server.in_flight, server.max_in_flight) == (1, 1, 0, 1)


def test_completions_echo_each_prompt_and_models_lists_one(server):
    status, _, body = post(server, "/completions", {"model": "echo", "prompt": ["a", "b c"]})

    assert status == 200
    answer = json.loads(body)
    assert answer["object"] == "text_completion"
    assert [choice["text"] for choice in answer["choices"]] == ["echo: a", "echo: b c"]

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    connection.request("GET", "/v1/models")
    models = json.loads(connection.getresponse().read())
    connection.close()
    assert [model["id"] for model in models["data"]] == ["echo"]


def test_embeddings_are_short_deterministic_vectors(server):
    status, _, body = post(server, "/embeddings", {"model": "echo", "input": ["alpha", "beta", "alpha"]})

    assert status == 200
    answer = json.loads(body)
    assert answer["object"] == "list"
    assert [row["index"] for row in answer["data"]] == [0, 1, 2]
    vectors = [row["embedding"] for row in answer["data"]]
    assert all(len(vector) == 8 and all(isinstance(x, float) for x in vector) for vector in vectors)
    assert vectors[0] == vectors[2] != vectors[1]

    # The `openai` client asks for base64 float32 unless told otherwise: the same numbers, packed.
    _, _, body = post(server, "/embeddings", {"input": "alpha", "encoding_format": "base64"})
    packed = base64.b64decode(json.loads(body)["data"][0]["embedding"])
    assert list(struct.unpack("<8f", packed)) == vectors[0]


def test_fail_marker_answers_500_with_an_openai_error(server):
    status, _, body = post(server, "/chat/completions", chat("row 3 [fail]"))

    assert status == 500
    assert set(json.loads(body)["error"]) >= {"message", "type", "code"}
    assert (server.requests, server.completed, server.failed_500) == (1, 0, 1)


def test_429_marker_rejects_a_text_once_then_serves_it():
    with ModelServer(latency_s=0.01, retry_after_s=0.5) as server:
        first = post(server, "/chat/completions", chat("row 7 [429]"))
        retry = post(server, "/chat/completions", chat("row 7 [429]"))

        assert first[0] == 429
        assert first[1]["Retry-After"] == "0.5"
        assert json.loads(first[2])["error"]["code"] == "rate_limit_exceeded"
        assert retry[0] == 200
        assert (server.requests, server.completed, server.rejected_429) == (2, 1, 1)

        server.reset()  # forgets the texts it rejected, as a fresh bench run needs
        assert (server.requests, server.completed, server.rejected_429) == (0, 0, 0)
        assert post(server, "/chat/completions", chat("row 7 [429]"))[0] == 429


def test_bad_json_marker_answers_200_with_an_unparsable_body(server):
    status, _, body = post(server, "/chat/completions", chat("[bad-json]"))

    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)


def test_queue_holds_requests_over_the_cap_until_a_slot_frees():
    with ModelServer(latency_s=0.05, max_concurrency=2, queue=True) as server:
        answers = post_together(server, 6)

        assert [status for status, _, _ in answers] == [200] * 6
        assert [json.loads(body)["choices"][0]["message"]["content"] for _, _, body in answers] == [
            f"echo: row {index}" for index in range(6)
        ]
        assert (server.completed, server.max_in_flight, server.in_flight) == (6, 2, 0)


def test_without_a_queue_requests_over_the_cap_get_429():
    with ModelServer(latency_s=0.1, max_concurrency=2, queue=False) as server:
        answers = post_together(server, 6)

        statuses = [status for status, _, _ in answers]
        assert set(statuses) == {200, 429}
        assert all(headers["Retry-After"] == "1" for status, headers, _ in answers if status == 429)
        assert server.completed == statuses.count(200)
        assert server.rejected_429 == statuses.count(429)
        assert server.max_in_flight <= 2


def test_stop_releases_a_hung_request():
    server = ModelServer(latency_s=0.01).start()
    outcome: list[object] = []

    def send() -> None:
        try:
            outcome.append(post(server, "/chat/completions", chat("row 1 [hang]")))
        except OSError as exc:
            outcome.append(exc)

    client = threading.Thread(target=send, daemon=True)
    client.start()
    assert server.wait_for(lambda s: s.requests == 1, timeout=TIMEOUT_S)

    server.stop()
    client.join(TIMEOUT_S)

    assert not client.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], ConnectionError)  # closed without an answer
    assert server.completed == 0


def test_keep_alive_serves_several_requests_on_one_connection(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    try:
        sockets = []
        for text in ("one", "two [fail]", "three"):
            connection.request("POST", "/v1/chat/completions", json.dumps(chat(text)))
            connection.getresponse().read()
            sockets.append(connection.sock)
    finally:
        connection.close()

    assert sockets[0] is sockets[1] is sockets[2]
    assert (server.completed, server.failed_500) == (2, 1)


def test_capacity_is_slots_over_latency():
    assert ModelServer(latency_s=0.05, max_concurrency=8).capacity_rps == pytest.approx(160.0)
