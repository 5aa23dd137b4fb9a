"""A fault-injecting HTTP reverse proxy, to put in front of an object store's endpoint.

``mere verify --faults http`` runs one in the parent process in front of a
cloud store's plain-http endpoint (an emulator such as Azurite or moto, or
an S3-compatible server), and the client processes reach the store through
it; the cloud tests (``tests/cloud``) put one in front of moto and Azurite.
Point a store's endpoint at :attr:`FaultProxy.endpoint`; the proxy forwards
each request to the real server, except when a :class:`Fault` rule fires:

================  ===========================================================
kind              effect
================  ===========================================================
``error_before``  answer ``status`` (with an S3/Azure-style XML error whose
                  ``<Code>`` is ``code``) without forwarding: not applied
``error_after``   forward, let the server apply it, then answer ``status``
                  instead of the real response: applied, reported as failed
``drop_after``    forward, let the server apply it, then close the connection
                  without answering: applied, outcome unknown to the client
``reset_before``  reset the connection (RST) without forwarding: not applied
``delay``         sleep ``delay`` seconds, then forward normally
================  ===========================================================

A rule applies to a request when its method is in ``methods`` and its
``path`` regex is found in the request path (which includes the query). Of the
applying rules, the first (in order added) with ``times`` left that passes
its ``probability`` roll fires; at most one fires per request. Each rule
counts its own firings (``Fault.fired``); the proxy counts firings by kind
(``fired``) and requests by method (``requests``).

The proxy listens on 127.0.0.1 and serves each connection in a thread of the
process that started it. It speaks plain HTTP/1.1 only, on both sides: it
cannot stand in front of an https endpoint (it would have to terminate TLS
with a certificate the clients trust). Requests are forwarded with their
headers unchanged, ``Host`` included, so signatures computed by the client
for the proxy's address still verify at the server.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["Fault", "FaultKind", "FaultProxy"]

FaultKind = Literal["error_before", "error_after", "drop_after", "reset_before", "delay"]

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


@dataclass
class Fault:
    """One injection rule (see the module docstring).

    Attributes:
        kind: what the rule does to a request.
        methods: the HTTP methods it applies to (PUT only by default).
        path: a regex searched for in the request path and query ("" matches all).
        status, code: the answer of ``error_before`` and ``error_after``.
        probability: the chance that an applying request fires the rule.
        times: how often it may fire at most (None: without limit).
        delay: the seconds a ``delay`` rule waits.
        fired: how often it has fired.
    """

    kind: FaultKind
    methods: frozenset[str] = frozenset({"PUT"})
    path: str = ""
    status: int = 500
    code: str = "InternalError"
    probability: float = 1.0
    times: int | None = None
    delay: float = 0.0
    fired: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path)

    def applies(self, method: str, path: str) -> bool:
        """Whether the rule covers a request (before its ``times`` and ``probability``)."""
        return method in self.methods and bool(self._pattern.search(path))


class FaultProxy:
    """A threaded reverse proxy to ``upstream_host:upstream_port`` that injects faults.

    Args:
        upstream_port: the port of the real server.
        upstream_host: its host (plain HTTP; 127.0.0.1 by default).
        seed: seeds the probability rolls.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self, upstream_port: int, *, upstream_host: str = "127.0.0.1", seed: int = 0
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.fired: Counter[str] = Counter()
        #: Firings by (kind, what the request touched: commit, data, list, other).
        self.fired_on: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The port the proxy listens on (on 127.0.0.1)."""
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: what clients should use as the store's endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        """Start serving in a daemon thread; returns the proxy."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut every open client connection."""
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() that must be running
            self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for sock in list(self._sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, fault: Fault) -> Fault:
        """Add a rule after the existing ones; returns it (its ``fired`` counts its firings)."""
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every rule: from now on, requests are forwarded untouched."""
        with self._lock:
            self.faults.clear()

    def choose(self, method: str, path: str) -> Fault | None:
        """The fault to fire for this request, if any (consumed when chosen)."""
        with self._lock:
            self.requests[method] += 1
            for fault in self.faults:
                if not fault.applies(method, path):
                    continue
                if fault.times is not None and fault.fired >= fault.times:
                    continue
                if self._rng.random() >= fault.probability:
                    continue
                fault.fired += 1
                self.fired[fault.kind] += 1
                self.fired_on[(fault.kind, _category(path))] += 1
                return fault
        return None

    def track(self, sock: socket.socket, add: bool) -> None:
        """Remember (or forget) a client connection, so that :meth:`stop` can cut it."""
        with self._lock:
            if add:
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)


class _Server(ThreadingHTTPServer):
    """The listening server: quiet about connections its clients broke off."""

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """Ignore a client that went away (killed, or gave up); report anything else."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def _category(path: str) -> str:
    """What a request touches, for reports: a commit, a data file, a listing, or other."""
    if re.search(r"/_log/\d{20}\.json", path):
        return "commit"
    if "/tables/" in path:
        return "data"
    if "list-type=2" in path or "comp=list" in path:
        return "list"
    return "other"


class _ProxyHandler(BaseHTTPRequestHandler):
    """Serves one client connection: reads each request, injects or forwards it."""

    owner: FaultProxy
    protocol_version = "HTTP/1.1"
    timeout = 60

    def setup(self) -> None:
        super().setup()
        self.owner.track(self.connection, True)
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        self.owner.track(self.connection, False)
        if self._upstream is not None:
            self._upstream.close()
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        """Every method is proxied alike."""
        self._handle()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._read_body()
        fault = self.owner.choose(self.command, self.path)
        if fault is not None and fault.kind == "reset_before":
            self._reset()
            return
        if fault is not None and fault.kind == "error_before":
            self._send_error(fault)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay)
        try:
            status, reason, headers, payload = self._forward(body)
        except (OSError, http.client.HTTPException):
            # The server is unreachable or broke off: a gateway's answer, which
            # clients read as "may have been applied".
            self._send_error(Fault("error_after", status=502, code="BadGateway"))
            self.close_connection = True
            return
        if fault is not None and fault.kind == "drop_after":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault is not None and fault.kind == "error_after":
            self._send_error(fault)
            return
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        if self.command == "HEAD":
            length = dict((k.lower(), v) for k, v in headers).get("content-length", "0")
            self.send_header("Content-Length", length)
        else:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
        }
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        for attempt in range(2):
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(
                    self.owner.upstream_host, self.owner.upstream_port, timeout=60
                )
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                response = self._upstream.getresponse()
                payload = response.read()
            except (ConnectionError, http.client.HTTPException):
                self._upstream.close()
                self._upstream = None
                if attempt:
                    raise
                continue
            if response.will_close:
                self._upstream.close()
                self._upstream = None
            return response.status, response.reason, response.getheaders(), payload
        raise AssertionError("unreachable")

    def _send_error(self, fault: Fault) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{fault.code}</Code><Message>injected by mere's fault proxy</Message>"
            "</Error>"
        ).encode()
        self.send_response_only(fault.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-ms-error-code", fault.code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self) -> None:
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
