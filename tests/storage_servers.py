"""Real storage servers on loopback ports for the storage suite and bench/objstore.py: moto's S3 server and
Azurite (Azure Blob), each started as a child process and stopped by its owner, and an HTTP proxy in front
of a server that can refuse connections (the service restarting), answer 503 SlowDown, and count bytes.

moto comes with the `test` extra (`moto[server]`); Azurite is the npm package `azurite`, which
./scripts/test-all installs into `.venvs/azurite` beside the Python environments.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Azurite's well-known development account (public: it is in Microsoft's documentation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_START_S = 60.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the storage server exited ({process.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the storage server did not listen on port {port} within {_START_S} s")


@dataclass
class Server:
    """A started storage server: its process, its endpoint and what a client needs to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    env: dict[str, str] = field(default_factory=dict)  # the variables that point a client at it

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_moto(folder: Path) -> Server:
    """moto's S3 server (state in memory); clients reach it through AWS_ENDPOINT_URL and dummy keys."""
    port = free_port()
    log = folder / "moto.log"
    binary = Path(sys.executable).with_name("moto_server")
    command = [str(binary)] if binary.exists() else [sys.executable, "-m", "moto.server"]
    with open(log, "wb") as out:
        process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
    _wait_listening(port, process, log)
    return Server(process, port, moto_env(f"http://127.0.0.1:{port}"))


def moto_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def azurite_binary() -> Path:
    """`azurite-blob` from `.venvs/azurite` beside this Python's environment (where ./scripts/test-all puts it),
    else from PATH."""
    beside = Path(sys.prefix).parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if beside.exists():
        return beside
    found = shutil.which("azurite-blob")
    if not found:
        raise RuntimeError(
            f"azurite-blob not found in {beside.parent} nor on PATH: run ./scripts/test-all, or "
            f"npm install --prefix {beside.parents[2]} azurite"
        )
    return Path(found)


def start_azurite(folder: Path) -> Server:
    """Azurite's Blob service in memory; clients use the development account's connection string."""
    port = free_port()
    log = folder / "azurite.log"
    command = [str(azurite_binary()), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    command += ["--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, cwd=folder)
    _wait_listening(port, process, log)
    return Server(process, port, azurite_env(f"http://127.0.0.1:{port}"))


def azurite_env(endpoint: str) -> dict[str, str]:
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};"
    )
    return {"AZURE_STORAGE_CONNECTION_STRING": connection}


# The proxy ------------------------------------------------------------------------------------------------


class FaultProxy:
    """An HTTP proxy in front of a storage server, on its own loopback port.

    `down()` closes its port and drops open connections (clients get "connection refused", as while a
    service restarts) and `up()` listens again on the same port; `fail_every = n` answers every n-th
    request with 503 SlowDown (S3's throttling answer) instead of forwarding it. It counts the requests
    forwarded and the response body bytes they fetched (`bytes_fetched`), by method.
    """

    def __init__(self, upstream_port: int):
        self.upstream_port, self.port = upstream_port, free_port()
        self.fail_every = 0
        self.failed = 0
        self.requests: dict[str, int] = {}
        self.bytes_fetched = 0
        self._seen = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        proxy = self

        class Handler(_ForwardingHandler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True, name="fault-proxy")
        self._thread.start()

    def down(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        for connection in list(_ForwardingHandler.open_connections.get(id(self), set())):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests, self.bytes_fetched = {}, 0

    def _should_fail(self) -> bool:
        with self._lock:
            self._seen += 1
            fail = bool(self.fail_every) and self._seen % self.fail_every == 0
            self.failed += fail
            return fail

    def _count(self, method: str, nbytes: int) -> None:
        with self._lock:
            self.requests[method] = self.requests.get(method, 0) + 1
            self.bytes_fetched += nbytes


class _ForwardingHandler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"
    open_connections: dict[int, set[socket.socket]] = {}  # noqa: RUF012 (shared on purpose: per proxy id)

    def setup(self) -> None:
        super().setup()
        self.open_connections.setdefault(id(self.owner), set()).add(self.connection)

    def finish(self) -> None:
        self.open_connections.get(id(self.owner), set()).discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raw = b""
            while True:
                line = self.rfile.readline()
                raw += line
                size = int(line.split(b";")[0].strip() or b"0", 16)
                chunk = self.rfile.read(size + 2)
                raw += chunk
                if size == 0:
                    while chunk not in (b"\r\n", b""):  # trailers, then the empty line
                        chunk = self.rfile.readline()
                        raw += chunk
                    return raw
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        if self.owner._should_fail():
            payload = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503, "Slow Down")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=60)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                upstream.putheader(name, value)
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and not (name.lower() == "content-length" and self.command != "HEAD"):
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.owner._count(self.command, len(data))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


# Buckets and containers -----------------------------------------------------------------------------------


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """`variables` in os.environ for the block (the workers a run starts inherit them)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
