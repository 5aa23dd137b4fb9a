"""Fixtures for the cloud tests: real servers, fault proxies, and fresh stores.

``moto_server`` and ``azurite_server`` are started once per session (see
``cloud_servers.py``); ``cloud`` runs a test on both, each with the right
marker. A store from ``cloud.store()`` has a unique prefix, so tests share the
servers without seeing each other's objects.
"""

from __future__ import annotations

from collections.abc import Iterator

import cloud_servers
import pytest
from cloud_servers import Cloud

from mere.verify.http_proxy import FaultProxy


@pytest.fixture(scope="session")
def moto_server() -> cloud_servers.Server:
    """The session's moto S3 server (stopped when the test process exits)."""
    return cloud_servers.moto()


@pytest.fixture(scope="session")
def azurite_server() -> cloud_servers.Server:
    """The session's Azurite server; skips without Azurite (fails under CI=true)."""
    return cloud_servers.azurite()


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def cloud(request: pytest.FixtureRequest) -> Cloud:
    """Each cloud backend in turn."""
    if request.param == "s3":
        return Cloud("s3", request.getfixturevalue("moto_server"), cloud_servers.s3_store)
    return Cloud("azure", request.getfixturevalue("azurite_server"), cloud_servers.azure_store)


@pytest.fixture
def proxy(cloud: Cloud) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the test's backend."""
    with FaultProxy(cloud.server.port, seed=1234) as running:
        yield running
