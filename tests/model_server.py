"""An OpenAI-compatible model server on a loopback port, for tests and benches of steps that call a model.

It answers the way a hosted model endpoint does, with real sockets, so a step can use the `openai` client or
httpx unchanged (`base_url=server.url`), while the answers stay deterministic and the load stays measurable:

- `POST /v1/chat/completions` echoes the last user message ("echo: " + its text), `POST /v1/completions`
  echoes the prompt, `POST /v1/embeddings` returns 8 floats derived from a hash of each input (as a list, or
  base64 float32 when the request asks for `encoding_format="base64"`, as the `openai` client does by
  default), and `GET /v1/models` lists the one model, `echo`.
- Each model request holds one of `max_concurrency` slots for `latency_s`, as a model replica with a fixed
  number of batch slots would; a request over the cap waits for a slot (`queue=True`) or is answered at once
  with 429 and `Retry-After: 1` (`queue=False`), as a rate-limited provider does.

Fault markers, found in the text of the last user message, the prompt or the embedding input, let a test
make chosen rows fail:

- `[fail]`: 500 with an OpenAI-style error body, after the usual latency.
- `[hang]`: no answer; the connection is closed after `hang_s` or when `stop()` is called, whichever is
  first. A hung request holds no slot, so it does not slow the rows around it.
- `[429]`: the first request with a given text gets 429 with `Retry-After: <retry_after_s>` at once (no slot,
  no latency); later requests with the same text are served.
- `[bad-json]`: 200 with a body that is not valid JSON.

The counters (`requests`, `completed`, `rejected_429`, `failed_500`, `in_flight`, `max_in_flight`), and
`retry_waits` (how long after its 429 each `[429]` text came back), are what a test or bench asserts on; `wait_for` lets a test wait for a counter without sleeping.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "echo"
EMBEDDING_SIZE = 8
_MODEL_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
_POLL_S = 0.05  # how often the accept loop checks for shutdown: stop() takes up to this long (default 0.5 s)
_STOP_JOIN_S = 2.0  # how long stop() waits for the connection threads it woke to finish


class ModelServer:
    """A started (or startable) model server; see the module docstring for what it answers."""

    def __init__(
        self,
        latency_s: float = 0.05,
        max_concurrency: int = 8,
        queue: bool = True,
        *,
        hang_s: float = 3600.0,
        retry_after_s: float = 1,
    ):
        self.latency_s = latency_s
        self.max_concurrency = max_concurrency
        self.queue = queue
        self.hang_s = hang_s
        self.retry_after_s = retry_after_s
        self.requests = 0
        self.completed = 0
        self.rejected_429 = 0
        self.failed_500 = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._changed = threading.Condition()  # guards the counters and `_seen`; notified when a counter moves
        self._seen: dict[str, float] = {}  # texts that carried `[429]` and were rejected once: when
        self.retry_waits: dict[str, float] = {}  # `[429]` text -> seconds from its 429 to the retry that was served
        self._stopped = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._connections: dict[socket.socket, threading.Thread] = {}

    # --- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> ModelServer:
        """Listen on a free loopback port and serve from a daemon thread."""
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._stopped.clear()
        self._server = _Server(("127.0.0.1", 0), Handler)
        serve = threading.Thread(target=self._server.serve_forever, args=(_POLL_S,), daemon=True, name="model-server")
        serve.start()
        return self

    def stop(self) -> None:
        """Stop listening, wake hung and waiting requests, and drop open keep-alive connections.

        Without dropping them, the threads serving idle keep-alive connections would outlive the server.
        """
        server, self._server = self._server, None
        if server is None:
            return
        self._stopped.set()
        server.shutdown()
        server.server_close()
        with self._changed:
            connections = dict(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + _STOP_JOIN_S
        for thread in connections.values():
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the model server is not started")
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        """The base URL a client is given (`openai.OpenAI(base_url=...)`, httpx's `base_url`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- counters ---------------------------------------------------------------------------------------

    @property
    def capacity_rps(self) -> float:
        """The most requests a second the server can complete: what a bench compares its throughput with."""
        return self.max_concurrency / self.latency_s if self.latency_s > 0 else float("inf")

    def reset(self) -> None:
        """Zero the counters between a bench's runs, and forget the `[429]` texts so they are rejected again.

        `in_flight` is a state, not a count, so it is kept, and `max_in_flight` restarts from it.
        """
        with self._changed:
            self.requests = self.completed = self.rejected_429 = self.failed_500 = 0
            self.max_in_flight = self.in_flight
            self._seen.clear()
            self.retry_waits.clear()
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[ModelServer], bool], timeout: float = 5.0) -> bool:
        """Wait until `predicate(self)` holds (checked each time a counter changes); False on timeout.

        Lets a test act once the server has reached a state (a hung request received) without sleeping.
        """
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def _count(self, counter: str) -> int:
        with self._changed:
            value: int = getattr(self, counter) + 1
            setattr(self, counter, value)
            self._changed.notify_all()
            return value

    def _first_429(self, text: str) -> bool:
        """Whether this `[429]` text is rejected now (its first request); a later one notes its wait."""
        with self._changed:
            now = time.monotonic()
            first = text not in self._seen
            if first:
                self._seen[text] = now
            else:
                self.retry_waits.setdefault(text, now - self._seen[text])
            return first

    def _acquire_slot(self) -> bool:
        """Take a slot, waiting for one if `queue`; False if none was taken (over the cap, or stopping)."""
        if not self.queue:
            return self._slots.acquire(blocking=False)
        while not self._slots.acquire(timeout=_POLL_S):
            if self._stopped.is_set():
                return False
        return True

    def _serve_in_slot(self) -> bool:
        """Hold a slot for `latency_s`; False if the server was stopped meanwhile (the request goes unanswered)."""
        with self._changed:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._changed.notify_all()
        try:
            return not self._stopped.wait(self.latency_s)
        finally:
            with self._changed:
                self.in_flight -= 1
                self._changed.notify_all()
            self._slots.release()

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._changed:
            if open_:
                self._connections[connection] = threading.current_thread()
            else:
                self._connections.pop(connection, None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 drops connections when a bench opens many at once

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away, or a connection stop() dropped: nothing to report


class _Handler(BaseHTTPRequestHandler):
    server_owner: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive, so clients with connection pools reuse connections
    disable_nagle_algorithm = True  # headers and body go out in two writes; Nagle would delay the second

    def setup(self) -> None:
        super().setup()
        self.server_owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the client went away before the last bytes were flushed
        finally:
            self.server_owner._track(self.connection, False)

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client disconnected: a timeout or a cancelled row, not the server's concern

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: test output is for the tests

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "parallel-steps-tests"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_error(404, f"no such path: {self.path}", "invalid_request_error", "not_found")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            self._send_error(400, "Content-Length is not a number", "invalid_request_error", "bad_request")
            return
        raw = self.rfile.read(length)
        path = self.path.rstrip("/")
        if path not in _MODEL_PATHS:
            self._send_error(404, f"no such path: {self.path}", "invalid_request_error", "not_found")
            return
        owner = self.server_owner
        number = owner._count("requests")  # numbers the answer's id
        try:
            body = json.loads(raw)
            texts = _texts(path, body)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            self._send_error(400, f"a malformed request body: {exc}", "invalid_request_error", "bad_request")
            return
        text = "\n".join(texts)
        if "[hang]" in text:
            owner._stopped.wait(owner.hang_s)
            self.close_connection = True
            return
        if "[429]" in text and owner._first_429(text):
            self._reject(owner.retry_after_s)
            return
        if not owner._acquire_slot():
            if owner._stopped.is_set():
                self.close_connection = True
            else:
                self._reject(1)
            return
        if not owner._serve_in_slot():
            self.close_connection = True
            return
        if "[fail]" in text:
            owner._count("failed_500")
            self._send_error(500, "the model failed on this input ([fail])", "server_error", "internal_error")
            return
        owner._count("completed")
        if "[bad-json]" in text:
            self._send(200, b'{"id": "bad-json", "choices": [', {})
            return
        self._send_json(200, _answer(path, body, texts, number))

    def _reject(self, retry_after_s: float) -> None:
        self.server_owner._count("rejected_429")
        message = "rate limit reached; retry after the Retry-After header"
        self._send_error(429, message, "rate_limit_error", "rate_limit_exceeded", {"Retry-After": f"{retry_after_s}"})

    def _send_error(
        self, status: int, message: str, type_: str, code: str, headers: dict[str, str] | None = None
    ) -> None:
        error = {"error": {"message": message, "type": type_, "param": None, "code": code}}
        self._send(status, json.dumps(error).encode(), headers or {})

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), {})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (the vision-style form)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _texts(path: str, body: dict[str, Any]) -> list[str]:
    """The texts a request is about: the last user message, each prompt, or each embedding input."""
    if path == "/v1/chat/completions":
        users = [message for message in body["messages"] if message.get("role") == "user"]
        return [_text_of(users[-1].get("content")) if users else ""]
    value = body["prompt"] if path == "/v1/completions" else body["input"]
    values = value if isinstance(value, list) and value and not isinstance(value[0], int) else [value]
    return [item if isinstance(item, str) else json.dumps(item) for item in values]


def _embedding(text: str) -> list[float]:
    """8 floats in [-1, 1] from the text's SHA-256, rounded to float32 so the list and base64 forms agree."""
    words = struct.unpack(f"<{EMBEDDING_SIZE}I", hashlib.sha256(text.encode()).digest())
    as_float32 = struct.pack(f"<{EMBEDDING_SIZE}f", *(word / 2**31 - 1 for word in words))
    return list(struct.unpack(f"<{EMBEDDING_SIZE}f", as_float32))


def _tokens(text: str) -> int:
    return len(text.split())


def _answer(path: str, body: dict[str, Any], texts: list[str], number: int) -> dict[str, Any]:
    """The 200 answer in OpenAI's response shape, so the `openai` client parses it into its own types."""
    model = body.get("model") or MODEL
    prompt_tokens = sum(_tokens(text) for text in texts)
    if path == "/v1/embeddings":
        vectors = [_embedding(text) for text in texts]
        if body.get("encoding_format") == "base64":
            encoded: list[Any] = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
        else:
            encoded = vectors
        data = [{"object": "embedding", "index": i, "embedding": vector} for i, vector in enumerate(encoded)]
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
        return {"object": "list", "data": data, "model": model, "usage": usage}
    replies = ["echo: " + text for text in texts]
    completion_tokens = sum(_tokens(reply) for reply in replies)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    created = int(time.time())
    if path == "/v1/chat/completions":
        message = {"role": "assistant", "content": replies[0]}
        choices: list[dict[str, Any]] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage,
        }
    choices = [
        {"index": i, "text": reply, "logprobs": None, "finish_reason": "stop"} for i, reply in enumerate(replies)
    ]
    return {
        "id": f"cmpl-{number}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }
