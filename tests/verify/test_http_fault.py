"""verify's ``http`` fault where there is no HTTP to break: skipped, or refused.

The fault puts a proxy in front of a cloud store's plain-http endpoint (runs
on Azurite: ``tests/cloud/test_azurite_verify.py``). On a local store there
is no HTTP, so ``--faults all`` skips it with a note; on an https endpoint
(a real cloud service) the proxy cannot stand in between, so it is refused
before anything is written. Also here: how the endpoint is found in the
environment, and which requests the rules aim at.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from mere.cli.main import cli
from mere.verify import RunConfig, VerifyError, run
from mere.verify.client import FAULTS
from mere.verify.report import summary
from mere.verify.runner import COMMIT_PATH, http_endpoint, http_rules

#: Endpoint variables cleared before each refusal, so the machine's own setup cannot leak in.
ENDPOINT_VARIABLES = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_ENDPOINT",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURITE_BLOB_STORAGE_URL",
    "GOOGLE_BASE_URL",
)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")
def test_all_faults_on_a_local_store_skip_http_with_a_note(shared_dir: Path) -> None:
    assert "http" in FAULTS  # so --faults all asks for it
    result = run(
        RunConfig(
            uri=str(shared_dir / "db"),
            processes=4,
            transactions=150,
            faults=FAULTS,
            seed=4,
            time_limit=120.0,
        )
    )
    assert result.valid, (result.client_crashes, result.result.to_json()["anomalies"])
    assert not result.result.counts
    assert not any(kind.startswith("http") for kind in result.faults), result.faults
    assert result.faults.get("error_after", 0) > 0  # the other faults still ran
    assert len(result.notes) == 1 and "http fault was skipped" in result.notes[0]
    assert result.to_json()["notes"] == result.notes
    out = io.StringIO()
    Console(file=out, width=300).print(summary(result))
    assert "http fault was skipped" in out.getvalue()


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("uri", "environ"),
    [
        ("s3://bucket/p", {}),  # AWS itself
        ("s3://bucket/p", {"AWS_ENDPOINT_URL": "https://minio.example:9000"}),
        ("s3a://bucket/p", {"AWS_ENDPOINT": "https://s3.example"}),
        ("az://container/p", {}),  # <account>.blob.core.windows.net
        ("az://container/p", {"AZURE_STORAGE_ENDPOINT": "https://acct.blob.core.windows.net"}),
        ("abfss://c@acct.dfs.core.windows.net/p", {}),
        ("gs://bucket/p", {}),
    ],
)
def test_http_on_an_https_endpoint_is_refused(
    uri: str, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(VerifyError, match="plain HTTP only") as raised:
        http_endpoint(uri, environ)
    assert "https" in str(raised.value)
    assert "http" not in raised.value.help.split(": ", 1)[1].split(",")  # the other kinds
    _clean(monkeypatch)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    # Refused before the store is opened: nothing is written, no credentials needed.
    with pytest.raises(VerifyError, match="cannot be injected"):
        run(RunConfig(uri=uri, transactions=5, faults=("http",)))


def test_the_command_refuses_http_on_an_https_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    out = CliRunner().invoke(
        cli, ["verify", "s3://bucket/p", "--transactions", "5", "--faults", "all"]
    )
    assert out.exit_code == 1
    assert "plain HTTP only" in out.output


def test_http_endpoints_are_found_in_the_environment() -> None:
    assert http_endpoint("/tmp/x", {}) is None
    assert http_endpoint("file:///tmp/x", {"AWS_ENDPOINT_URL": "http://h:1"}) is None
    # Azurite through the emulator switch: its URL variable, default port 10000.
    azurite = http_endpoint("az://c/p", {"AZURE_STORAGE_USE_EMULATOR": "true"})
    assert azurite is not None
    assert (azurite.backend, azurite.host, azurite.port) == ("azure", "127.0.0.1", 10000)
    assert azurite.overrides("http://127.0.0.1:5") == {
        "AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:5"
    }
    emulator = {"AZURE_STORAGE_USE_EMULATOR": "1", "AZURITE_BLOB_STORAGE_URL": "http://a:7"}
    found = http_endpoint("azure://c/p", emulator)
    assert found is not None and (found.host, found.port) == ("a", 7)
    # An explicit Azure endpoint keeps its account path behind the proxy.
    explicit = http_endpoint("az://c/p", {"AZURE_STORAGE_ENDPOINT": "http://h:9/devacct/"})
    assert explicit is not None
    assert explicit.overrides("http://127.0.0.1:5") == {
        "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:5/devacct"
    }
    # S3: every endpoint variable that is set points at the proxy.
    s3 = http_endpoint(
        "s3://b/p", {"AWS_ENDPOINT_URL": "http://m:80", "AWS_ENDPOINT": "http://m:80"}
    )
    assert s3 is not None and (s3.backend, s3.host, s3.port) == ("s3", "m", 80)
    assert s3.overrides("http://127.0.0.1:5") == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5",
        "AWS_ENDPOINT": "http://127.0.0.1:5",
    }
    gcs = http_endpoint("gs://b/p", {"GOOGLE_BASE_URL": "http://g"})
    assert gcs is not None and (gcs.host, gcs.port) == ("g", 80)


def test_http_rules_aim_at_commit_creates() -> None:
    commit = re.compile(COMMIT_PATH)
    assert commit.search("/devstoreaccount1/c/verify-1/_log/00000000000000000012.json")
    assert commit.search("/bucket/p/_log/00000000000000000012.json?x-id=PutObject")
    assert not commit.search("/bucket/p/_log/_latest")
    assert not commit.search("/bucket/p/_log/00000000000000000012.checkpoint.parquet")
    assert not commit.search("/bucket/p/tables/t/part-0.parquet")
    s3 = dict(http_rules("s3"))
    azure = dict(http_rules("azure"))
    assert s3["http-409-before-commit"].code == "ConditionalRequestConflict"
    assert "http-409-before-commit" not in azure
    assert azure["http-503-before"].code == "ServerBusy"
    for rule in (*s3.values(), *azure.values()):
        assert 0 < rule.probability <= 0.1  # modest: a run must still make progress
