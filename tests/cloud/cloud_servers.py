"""Real S3 (moto) and Azure (Azurite) servers for the tests, on 127.0.0.1 and free ports.

Each server is started once per test process, on first use, and stopped when
the process exits; every test gets an empty, unique prefix in the one bucket
or container (``s3_store(server)``), so tests never see each other's objects.
Both the cloud tests (``tests/cloud``) and the storage behaviour suite
(``tests/storage/conftest.py``) import this module.

Azurite comes from npm: ``scripts/setup.sh`` installs it into
``.cache/azurite``. Without it the Azure tests skip locally, but fail under
``CI=true``, where a missing Azurite is a broken setup, not a choice.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from mere.storage import AzureStore, ObstoreStore, RetryPolicy, S3Store

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUCKET = "mere-test"
START_TIMEOUT = 30.0

#: Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: Fast retries for tests: faults are injected on purpose, waiting seconds proves nothing.
#: Fault scenarios fail a fifth of all requests before they are applied; with
#: 12 attempts a request fails every one of them with probability 0.2**12 (4e-9),
#: where 8 (2.6e-6) failed a run once in some hundred, since catching up reads
#: many versions at once. The deadline outlasts a stalled server (below).
TEST_RETRY = RetryPolicy(attempts=12, base_delay=0.01, max_delay=0.2, deadline=150.0)
#: HTTP client options of every test store. Azurite under the full suite has
#: stalled a request for 30 s (the client's default timeout, which was then the
#: whole retry deadline) and, with a 10 s timeout, past it (the create's retry
#: then found its own object: outcome unknown). A request may now wait out a
#: stall of a minute; idle connections are dropped before the servers' own
#: keep-alive timeouts (Node's is 5 s) close them.
TEST_CLIENT_OPTIONS = {"timeout": "60s", "pool_idle_timeout": "2s"}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], name: str) -> None:
    """Wait until ``port`` accepts connections; fail if the process dies or time runs out."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} while starting")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{name} did not listen on port {port} within {START_TIMEOUT:.0f} s")


@dataclass
class Server:
    """A server process on 127.0.0.1."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    cleanup: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)


_LOCK = threading.Lock()
_SERVERS: dict[str, Server] = {}


def _stop_all() -> None:
    for server in _SERVERS.values():
        server.stop()
    _SERVERS.clear()


atexit.register(_stop_all)


def moto() -> Server:
    """The process-wide moto S3 server (atomic conditional puts; see moto_atomic.py)."""
    with _LOCK:
        if "moto" not in _SERVERS:
            port = free_port()
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "moto_atomic.py"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--bucket",
                    BUCKET,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for_port(port, process, "moto")
            _SERVERS["moto"] = Server("moto", port, process)
        return _SERVERS["moto"]


def azurite_binary() -> str | None:
    """Where ``azurite-blob`` is: $MERE_AZURITE, .cache/azurite (setup.sh), or $PATH."""
    candidates = [
        os.environ.get("MERE_AZURITE", ""),
        str(REPO / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("azurite-blob")


def azurite() -> Server:
    """The process-wide Azurite blob server; skips (fails under CI) if it is not installed."""
    binary = azurite_binary()
    if binary is None:
        message = (
            "Azurite is not installed: run scripts/setup.sh (needs npm), or "
            "npm install --prefix .cache/azurite azurite"
        )
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with _LOCK:
        if "azurite" not in _SERVERS:
            port = free_port()
            workdir = tempfile.mkdtemp(prefix="mere-azurite-")
            with open(os.path.join(workdir, "azurite.log"), "wb") as log:
                process = subprocess.Popen(
                    [
                        binary,
                        "--blobHost",
                        "127.0.0.1",
                        "--blobPort",
                        str(port),
                        # Objects in memory: faster, and nothing to clean up. (Azurite
                        # refuses --location together with --inMemoryPersistence.)
                        "--inMemoryPersistence",
                        "--skipApiVersionCheck",
                        "--disableTelemetry",  # else it tries to reach an outside host
                        "--silent",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,  # Azurite writes its debug and lock files to the cwd
                )
            wait_for_port(port, process, "azurite")
            server = Server("azurite", port, process, cleanup=[workdir])
            create_container(server.port, BUCKET)
            _SERVERS["azurite"] = server
        return _SERVERS["azurite"]


def create_container(port: int, name: str) -> None:
    """Create a blob container on Azurite (one Shared Key signed REST call)."""
    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    string_to_sign = "PUT\n" + "\n" * 11 + canonical_headers + resource
    signature = hmac.new(
        base64.b64decode(AZURITE_KEY), string_to_sign.encode(), hashlib.sha256
    ).digest()
    headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(signature).decode()}"
    headers["Content-Length"] = "0"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", headers=headers)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status not in (201, 409):
        raise RuntimeError(f"creating container {name} failed: {response.status} {body[:300]!r}")


def unique_prefix(label: str = "t") -> str:
    return f"{label}-{uuid.uuid4().hex[:12]}"


def s3_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """storage_options for moto at ``endpoint`` (moto accepts any credentials)."""
    return {
        "endpoint": endpoint,
        "access_key_id": "testing",
        "secret_access_key": "testing-secret-key",
        "region": "us-east-1",
        "allow_http": True,
        **TEST_CLIENT_OPTIONS,
        **extra,
    }


def azure_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """storage_options for Azurite at ``endpoint`` (path-style, the development account)."""
    return {
        "account_name": AZURITE_ACCOUNT,
        "account_key": AZURITE_KEY,
        "endpoint": f"{endpoint}/{AZURITE_ACCOUNT}",
        "allow_http": True,
        **TEST_CLIENT_OPTIONS,
        **extra,
    }


def s3_store(
    endpoint: str,
    prefix: str | None = None,
    *,
    retry: RetryPolicy | None = TEST_RETRY,
    options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> S3Store:
    """A fresh S3 store (unique prefix unless given) on the moto server at ``endpoint``."""
    return S3Store(
        BUCKET,
        prefix if prefix is not None else unique_prefix("s3"),
        storage_options={**s3_options(endpoint), **(options or {})},
        retry=retry,
        **kwargs,
    )


def azure_store(
    endpoint: str,
    prefix: str | None = None,
    *,
    retry: RetryPolicy | None = TEST_RETRY,
    options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> AzureStore:
    """A fresh Azure store (unique prefix unless given) on Azurite at ``endpoint``."""
    return AzureStore(
        BUCKET,
        prefix if prefix is not None else unique_prefix("az"),
        storage_options={**azure_options(endpoint), **(options or {})},
        retry=retry,
        **kwargs,
    )


@dataclass
class Cloud:
    """One backend under test: its server, and how to open stores on it."""

    name: str  # "s3" or "azure"
    server: Server
    make: Callable[..., ObstoreStore]

    def store(self, endpoint: str | None = None, **kwargs: Any) -> ObstoreStore:
        """A store on this backend (through ``endpoint``, e.g. a proxy; else direct)."""
        return self.make(endpoint or self.server.endpoint, **kwargs)

    def options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        """storage_options reaching this backend at ``endpoint``."""
        build = s3_options if self.name == "s3" else azure_options
        return build(endpoint or self.server.endpoint, **extra)

    def uri(self, prefix: str) -> str:
        scheme = "s3" if self.name == "s3" else "az"
        return f"{scheme}://{BUCKET}/{prefix}"

    @property
    def busy_code(self) -> str:
        """The service's "slow down" error code (503)."""
        return "SlowDown" if self.name == "s3" else "ServerBusy"
