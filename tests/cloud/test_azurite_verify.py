"""A real ``mere verify`` run on Azurite: client processes, every fault, serializable, inlined data.

Every fault includes ``http``: the runner puts its fault-injecting proxy in
front of Azurite and points the clients' ``AZURITE_BLOB_STORAGE_URL`` at it,
so commit-file creates are answered 500 or cut off after they landed, and
any request may be throttled (503), reset or delayed.

verify's clients open the store from the URI alone (``open_store(uri)``), so
Azurite is configured the way a user configures Azure: through environment
variables, here ``AZURE_STORAGE_USE_EMULATOR`` (the development account and
key, plain HTTP) and ``AZURITE_BLOB_STORAGE_URL`` (the session server's port).

The fork server is started before they are set, as it is after any earlier
multi-process test: its children inherit its environment, not the parent's, so
the variables reach the clients only because the runner passes its own
environment along (``ClientSpec.environ``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import sys

import cloud_servers
import pytest

import mere
from mere.storage import open_store
from mere.verify import RunConfig, run

pytestmark = [
    pytest.mark.azure,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals"),
]

FAULTS = ("latency", "error-before", "error-after", "exists-after", "kill", "stale-hint", "http")
#: The http fault's rules that must fire in a run of this size (see runner.http_rules).
HTTP_FIRED = ("http-drop-after-commit", "http-500-after-commit", "http-503-before")


def test_serializable_run_with_every_fault_is_valid(
    azurite_server: cloud_servers.Server,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "forkserver" in multiprocessing.get_all_start_methods():
        multiprocessing.forkserver.ensure_running()  # with the environment before the setenv
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite_server.endpoint)
    uri = f"az://{cloud_servers.BUCKET}/{cloud_servers.unique_prefix('verify')}"

    result = run(
        RunConfig(
            uri=uri,
            processes=4,
            transactions=150,
            isolation="serializable",
            faults=FAULTS,
            seed=5,
            # Small commits inlined (as Arrow streams) and flushed to data files as
            # checkpoints pass the bound, under every fault (issue 17).
            inline_limit=65536,
            inline_flush_bytes=4096,
            time_limit=150.0,  # then verify gives up, within pytest's 300 s timeout
        )
    )

    check_result = result.result
    assert result.valid, (result.client_crashes, check_result.to_json()["anomalies"])
    assert not check_result.counts
    assert check_result.outcomes["ok"] > 50
    fired = result.faults
    for kind in ("delay", "error_before", "error_after", "exists_after", "kill", "stale-hint"):
        assert fired.get(kind, 0) > 0, fired
    for kind in HTTP_FIRED:  # the clients really went through the proxy
        assert fired.get(kind, 0) > 0, fired
    assert not result.notes
    assert result.to_json()["faults_fired"]["http-500-after-commit"] > 0
    assert check_result.outcomes["info"] >= 1  # killed clients leave indeterminate transactions
    assert result.rearranged_versions, "no flush of inlined files happened during the run"
    store = open_store(uri)  # the run really went to Azurite
    try:
        assert any(meta.key.startswith("_log/") for meta in store.list("_log/"))
        db = mere.connect(store, create=False)
        assert db.latest_state().protocol.format_version == 4  # Arrow streams inlined
        db.close()
    finally:
        store.close()
    with capsys.disabled():
        print(
            f"\n[azurite verify] {len(result.history.txns)} transactions in "
            f"{result.elapsed:.1f} s, outcomes {dict(check_result.outcomes)}, faults {fired}"
        )
