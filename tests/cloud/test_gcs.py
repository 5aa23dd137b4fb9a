"""GCSStore against a small capturing server that answers like GCS's XML API.

There is no faithful local GCS emulator (gcp-storage-emulator ignores
``ifGenerationMatch=0``; see the shared notes), so these tests check what
the store *sends* -- a create-only put carries ``x-goog-if-generation-match:
0`` -- and how it maps GCS's answers (412 → AlreadyExists, 404 →
ObjectNotFound, 503 → retried, a create that landed and lost its answer →
unknown). The fake applies the precondition atomically, like GCS; it proves
the wiring, not GCS's own behaviour.

Credentials come from a ``credential_provider`` returning a static token:
without one obstore would ask the cloud metadata server for a token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pyarrow as pa
import pytest

import mere
from mere.errors import AlreadyExists, ObjectNotFound, StorageError
from mere.storage import GCSStore, RetryPolicy

BUCKET = "mere-gcs"
TOKEN = "gcs-test-token-0123456789"


class FakeGCS:
    """Objects in a dict; every request's method, path and headers recorded."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, int, float]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.fail_next: list[int] = []  # statuses to answer before handling, in order
        self.drop_next_put = False
        self.lock = threading.Lock()
        self.generation = 0
        fake = self

        class Handler(_Handler):
            owner = fake

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: FakeGCS
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response_only(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = f"<?xml version='1.0'?><Error><Code>{code}</Code></Error>".encode()
        self._reply(status, body, {"Content-Type": "application/xml"})

    def _meta_headers(self, data: bytes, generation: int, modified: float) -> dict[str, str]:
        return {
            "Content-Length": str(len(data)),
            "ETag": f'"{generation:x}"',
            "Last-Modified": formatdate(modified, usegmt=True),
            "x-goog-generation": str(generation),
        }

    def handle_one(self) -> None:
        fake = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        with fake.lock:
            fake.requests.append((self.command, self.path, dict(self.headers.items())))
            failing = fake.fail_next.pop(0) if fake.fail_next else None
        if failing is not None:
            self._error(failing, "ServiceUnavailable" if failing == 503 else "Injected")
            return
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "AuthenticationRequired")
            return
        bucket, _, name = parts.path.lstrip("/").partition("/")
        bucket, name = unquote(bucket), unquote(name)
        if bucket != BUCKET:
            self._error(404, "NoSuchBucket")
            return
        if not name and self.command == "GET":
            self._list(parse_qs(parts.query))
            return
        with fake.lock:
            found = fake.objects.get(name)
            if self.command == "PUT":
                if self.headers.get("x-goog-if-generation-match") == "0" and found is not None:
                    self._error(412, "PreconditionFailed")
                    return
                fake.generation += 1
                fake.objects[name] = (body, fake.generation, time.time())
                generation = fake.generation
                drop, fake.drop_next_put = fake.drop_next_put, False
        if self.command == "PUT":
            if drop:  # stored, but the answer is lost
                self.close_connection = True
                self.connection.close()
                return
            self._reply(200, headers={"ETag": f'"{generation:x}"', "x-goog-generation": "1"})
            return
        if found is None:
            self._error(404, "NoSuchKey")
            return
        data, generation, modified = found
        if self.command == "DELETE":
            with fake.lock:
                fake.objects.pop(name, None)
            self._reply(204)
            return
        headers = self._meta_headers(data, generation, modified)
        wanted = self.headers.get("Range")
        if wanted and self.command == "GET":
            start_text, _, end_text = wanted.removeprefix("bytes=").partition("-")
            start = int(start_text)
            end = min(int(end_text), len(data) - 1) if end_text else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            headers["Content-Length"] = str(end - start + 1)
            self._reply(206, data[start : end + 1], headers)
            return
        self._reply(200, data, headers)

    def _list(self, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        after = query.get("start-after", [""])[0]
        with self.owner.lock:
            items = sorted(
                (name, value)
                for name, value in self.owner.objects.items()
                if name.startswith(prefix) and name > after
            )
        contents = "".join(
            f"<Contents><Key>{escape(name)}</Key><Size>{len(data)}</Size>"
            f"<LastModified>{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(modified))}"
            f'</LastModified><ETag>"{generation:x}"</ETag></Contents>'
            for name, (data, generation, modified) in items
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
            f"<Name>{BUCKET}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(items)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
        ).encode()
        self._reply(200, body, {"Content-Type": "application/xml"})

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = handle_one


@pytest.fixture
def fake() -> Iterator[FakeGCS]:
    server = FakeGCS()
    yield server
    server.stop()


def gcs_store(fake: FakeGCS, prefix: str = "db") -> GCSStore:
    return GCSStore(
        BUCKET,
        prefix,
        storage_options={"base_url": fake.url, "allow_http": True},
        credential_provider=lambda: {"token": TOKEN, "expires_at": None},
        retry=RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01),
    )


def test_create_only_put_sends_generation_match_zero(fake: FakeGCS) -> None:
    store = gcs_store(fake)
    store.put_if_absent("_log/00000000000000000001.json", b"first")
    method, path, headers = fake.requests[-1]
    assert method == "PUT"
    assert unquote(path) == f"/{BUCKET}/db/_log/00000000000000000001.json"
    assert headers.get("x-goog-if-generation-match") == "0"
    with pytest.raises(AlreadyExists):
        store.put_if_absent("_log/00000000000000000001.json", b"second")
    assert fake.objects["db/_log/00000000000000000001.json"][0] == b"first"
    store.put("_log/_latest", b"1")  # an overwrite carries no precondition
    assert "x-goog-if-generation-match" not in fake.requests[-1][2]


def test_reads_lists_and_deletes(fake: FakeGCS) -> None:
    store = gcs_store(fake)
    for name in ("b", "a/2", "a/1", "a-x"):
        store.put_if_absent(name, name.encode())
    assert store.get("a/1") == b"a/1"
    assert store.head("a/2").size == 3
    assert [meta.key for meta in store.list("a")] == ["a-x", "a/1", "a/2"]
    assert [meta.key for meta in store.list("a/", start_after="a/1")] == ["a/2"]
    with pytest.raises(ObjectNotFound):
        store.get("missing")
    store.delete("a/1")
    store.delete("a/1")  # missing: fine
    assert not store.exists("a/1")
    source = store.open_input("b")
    assert source.read() == b"b"


def test_unavailable_is_retried_and_a_lost_answer_is_unknown(fake: FakeGCS) -> None:
    store = gcs_store(fake)
    fake.fail_next = [503, 503]
    store.put_if_absent("k", b"v")
    assert store.retries["put_if_absent:503"] == 2
    fake.drop_next_put = True
    with pytest.raises(StorageError) as info:
        store.put_if_absent("landed", b"v")
    assert not isinstance(info.value, AlreadyExists)
    assert store.get("landed") == b"v"
    assert TOKEN not in str(info.value)


def test_mere_commits_on_the_fake(fake: FakeGCS) -> None:
    db = mere.connect(gcs_store(fake))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    version = db.table("t").append([{"x": 1}, {"x": 2}])
    again = mere.connect(gcs_store(fake), create=False)
    assert again.version == version
    assert sorted(again.table("t").scan().column("x").to_pylist()) == [1, 2]
    commit_puts = [
        headers
        for method, path, headers in fake.requests
        if method == "PUT" and "/_log/0" in unquote(path)
    ]
    assert commit_puts and all(h.get("x-goog-if-generation-match") == "0" for h in commit_puts)
