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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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
    request with 503 SlowDown (S3's throttling answer) instead of forwarding it, and `fail_methods`
    every request of those methods. It records the requests forwarded (`requests`: method, path) and
    the response body bytes they fetched (`bytes_fetched`).
    """

    def __init__(self, upstream_port: int):
        self.upstream_port, self.port = upstream_port, free_port()
        self.fail_every = 0
        self.latency_s = 0.0  # added before each request is forwarded: a store farther away than loopback
        self.fail_methods: set[str] = set()
        self.failed = 0
        self.requests: list[tuple[str, str]] = []
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

        server = _QuietServer(("127.0.0.1", self.port), Handler)
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
            self.requests, self.bytes_fetched = [], 0

    def count(self, method: str) -> int:
        return sum(1 for seen, _ in self.requests if seen == method)

    def _should_fail(self, method: str) -> bool:
        with self._lock:
            self._seen += 1
            fail = method in self.fail_methods or (bool(self.fail_every) and self._seen % self.fail_every == 0)
            self.failed += fail
            return fail

    def _count(self, method: str, path: str, nbytes: int) -> None:
        with self._lock:
            self.requests.append((method, path))
            self.bytes_fetched += nbytes


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away (a dropped connection is what `down()` is for)


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
        if self.owner.latency_s:
            time.sleep(self.owner.latency_s)
        if self.owner._should_fail(self.command):
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
        self.owner._count(self.command, self.path, len(data))

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


# Stores as the tests see them ------------------------------------------------------------------------------


@dataclass
class Store:
    """One place a test keeps data: a local folder (file://), a moto bucket (s3://) or an Azurite container
    (abfs://). `options` are the fsspec options a step gives in `storage_options` for `scheme`, with
    `${env:NAME}` references whose values are `env` (set them in the environment of the run)."""

    name: str
    scheme: str
    root: str  # the bucket's or folder's URL
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def url(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def resolved_options(self) -> dict[str, Any]:
        return {
            key: self.env[value[6:-1]] if isinstance(value, str) and value.startswith("${env:") else value
            for key, value in self.options.items()
        }

    def filesystem(self):
        import fsspec

        return fsspec.filesystem(self.scheme.removesuffix("://"), **self.resolved_options())

    def storage_options(self) -> dict[str, dict[str, Any]]:
        """The step's `storage_options` for this store ({} for local files)."""
        return {self.scheme: dict(self.options)} if self.options else {}

    def put(self, local: Path, *parts: str) -> str:
        """Copy a local file or folder (recursively) into the store; returns its URL."""
        url = self.url(*parts)
        fs, inner = self.filesystem(), url.split("://", 1)[1]
        if self.name == "file":
            inner = "/" + inner.lstrip("/")
        files = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
        for path in files:
            target = inner if path == local else f"{inner}/{path.relative_to(local).as_posix()}"
            if self.name == "file":
                fs.makedirs(fs._parent(target), exist_ok=True)
            fs.put_file(str(path), target)
        return url

    def read_bytes(self, url: str) -> bytes:
        data: bytes = self.filesystem().cat_file(self._inner(url))
        return data

    def write_bytes(self, url: str, data: bytes) -> None:
        self.filesystem().pipe_file(self._inner(url), data)

    def listing(self, url: str) -> list[str]:
        fs = self.filesystem()
        return sorted(fs.unstrip_protocol(name) for name in fs.find(self._inner(url)))

    def _inner(self, url: str) -> str:
        inner = url.split("://", 1)[1]
        return "/" + inner.lstrip("/") if self.name == "file" else inner


def s3_store(endpoint: str, bucket: str) -> Store:
    """A moto bucket reached through `storage_options` only (no AWS_* variable is needed)."""
    options = {"key": "testing", "secret": "${env:PS_TEST_S3_SECRET}", "endpoint_url": endpoint}
    store = Store("s3", "s3://", f"s3://{bucket}", options, {"PS_TEST_S3_SECRET": "testing-secret"})
    store.filesystem().mkdir(bucket)
    return store


def azure_store(endpoint: str, container: str) -> Store:
    """An Azurite container reached through `storage_options` only (the development account's key)."""
    options = {"connection_string": "${env:PS_TEST_AZURE_CONNECTION}"}
    env = {"PS_TEST_AZURE_CONNECTION": azurite_env(endpoint)["AZURE_STORAGE_CONNECTION_STRING"]}
    store = Store("azure", "abfs://", f"abfs://{container}", options, env)
    store.filesystem().mkdir(container)
    return store


@contextlib.contextmanager
def started_servers(folder: Path) -> Iterator[tuple[Server, Server]]:
    """moto and Azurite, started side by side (each takes seconds to start), stopped at the end."""
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start_moto, folder), pool.submit(start_azurite, folder)]
    servers = [future.result() for future in futures if future.exception() is None]
    if len(servers) < 2:
        for server in servers:
            server.stop()
        raise next(future.exception() for future in futures if future.exception() is not None)  # type: ignore[misc]
    try:
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()
