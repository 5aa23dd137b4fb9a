"""Cloud object stores: Amazon S3 (and compatibles), Azure Blob Storage, Google Cloud Storage.

Each is an :class:`~mere.storage._obstore.ObstoreStore` over the matching
obstore store, so all share one error mapping and retry discipline (see that
module). What differs is configuration, which comes from two places:

1. the cloud's **standard environment variables and credential chain**, read
   by obstore when the store is built (``AWS_ACCESS_KEY_ID``,
   ``AWS_REGION``, ``AWS_ENDPOINT_URL``, instance and web-identity
   credentials; ``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``,
   ``AZURE_CLIENT_ID``..., managed identity; ``GOOGLE_APPLICATION_CREDENTIALS``,
   ``GOOGLE_SERVICE_ACCOUNT``...);
2. **storage_options**, a flat mapping that overrides them: obstore's
   configuration keys for that cloud (``access_key_id``, ``region``,
   ``endpoint``, ``account_name``, ``sas_key``, ``service_account_key``...)
   and its HTTP client keys (``allow_http``, ``timeout``, ``connect_timeout``,
   ``proxy_url``...), which are routed to ``client_options``.

URIs (:func:`open_cloud_store`)::

    s3://bucket/prefix        s3a://bucket/prefix
    az://container/prefix     azure://container/prefix
    abfs://container@account.dfs.core.windows.net/prefix     (and abfss://)
    gs://bucket/prefix        gcs://bucket/prefix

Credentials never appear in a store's ``uri``, ``repr`` or error messages.
Stores refuse to be pickled (they would carry the credentials along).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlsplit

from mere.errors import StorageError
from mere.storage._obstore import (
    DEFAULT_WHOLE_OBJECT_LIMIT,
    Backend,
    MissingDependency,
    ObstoreStore,
    Redactor,
    RetryPolicy,
    import_obstore,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore as ObstoreBackend

__all__ = [
    "AzureStore",
    "GCSStore",
    "MissingDependency",
    "ObstoreStore",
    "RetryPolicy",
    "S3Store",
    "open_cloud_store",
]

#: obstore's HTTP client keys; everything else in storage_options is store config.
CLIENT_OPTION_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "root_certificate",
        "timeout",
        "user_agent",
    }
)

#: obstore must not retry: a retried create that landed would read "already exists".
_NO_RETRIES: dict[str, Any] = {"max_retries": 0}

_SECRET_NAME = re.compile(r"(?i)secret|key|token|password|sas|credential|signature|session")
_SECRET_ENV = re.compile(r"^(AWS|AZURE|AZURITE|GOOGLE|GCS|GCP|MERE)_")


def _split_options(
    options: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split storage_options into (store config, client options)."""
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if not isinstance(name, str):
            raise StorageError(f"storage_options keys must be strings, not {type(name).__name__}")
        lowered = name.lower()
        if lowered == "client_options":
            if not isinstance(value, Mapping):
                raise StorageError("storage_options['client_options'] must be a mapping")
            client.update(value)
        elif lowered in CLIENT_OPTION_KEYS:
            client[lowered] = value
        else:
            config[name] = value
    return config, client


def _redactor(options: Mapping[str, Any] | None) -> Redactor:
    """Mask every secret-looking option value and environment variable."""
    secrets: list[str] = []
    for name, value in (options or {}).items():
        if isinstance(value, str) and isinstance(name, str) and _SECRET_NAME.search(name):
            secrets.append(value)
    for name, value in os.environ.items():
        if _SECRET_ENV.match(name) and _SECRET_NAME.search(name):
            secrets.append(value)
    return Redactor(secrets)


def _build(
    factory: Any,
    name: str,
    redact: Redactor,
    config: dict[str, Any],
    client: dict[str, Any],
    credential_provider: Any,
) -> ObstoreBackend:
    """Construct an obstore store, turning configuration errors into credential-free ones."""
    failure: str | None = None
    try:
        return factory(
            name,
            config=config,
            client_options=client or None,  # None: obstore reads *_ALLOW_HTTP etc. from the env
            retry_config=_NO_RETRIES,
            credential_provider=credential_provider,
        )
    except Exception as exc:  # obstore raises ValueError and its own errors
        first = str(exc).split("\n\nDebug source", 1)[0].strip().splitlines()
        failure = f"{type(exc).__name__}: {redact(first[0] if first else '')}"
    raise StorageError(
        f"cannot configure the store for {name!r}: {failure}",
        help="check storage_options and the environment variables of this cloud",
    )


def _clean_prefix(prefix: str) -> str:
    return prefix.strip("/")


def _uri(scheme: str, authority: str, prefix: str) -> str:
    """The store's URI, ``%``, ``#`` and ``?`` in its prefix percent-encoded, so that opening
    the URI again (which decodes it) finds the same prefix; an export writes it into its
    target's data paths. Other characters are kept as they are, as they read back."""
    if not prefix:
        return f"{scheme}://{authority}"
    escaped = prefix.replace("%", "%25").replace("#", "%23").replace("?", "%3F")
    return f"{scheme}://{authority}/{escaped}"


#: The URI scheme each backend reports its stores under.
_URI_SCHEMES: dict[Backend, str] = {"s3": "s3", "azure": "az", "gcs": "gs"}

#: The class in ``obstore.store`` that each backend's stores wrap.
_OBSTORE_CLASSES: dict[Backend, str] = {"s3": "S3Store", "azure": "AzureStore", "gcs": "GCSStore"}


class _CloudStore(ObstoreStore):
    """What the three cloud stores share: options split and redacted, the client built."""

    def _connect(
        self,
        backend: Backend,
        name: str,
        prefix: str,
        *,
        storage_options: Mapping[str, Any] | None,
        retry: RetryPolicy | None,
        whole_object_limit: int,
        credential_provider: Any,
        uri: str | None = None,
        config_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        """Build the obstore client for bucket or container ``name`` and initialize the store.

        Raises:
            MissingDependency: obstore is not installed (the hint names ``mere[backend]``).
            StorageError: the configuration is invalid.
        """
        import_obstore(backend)
        from obstore import store as obstore_stores

        obstore_class = getattr(obstore_stores, _OBSTORE_CLASSES[backend])
        redact = _redactor(storage_options)
        config, client = _split_options(storage_options)
        for key, value in (config_defaults or {}).items():
            config.setdefault(key, value)
        inner = _build(obstore_class, name, redact, config, client, credential_provider)
        prefix = _clean_prefix(prefix)
        ObstoreStore.__init__(
            self,
            inner,
            backend=backend,
            uri=uri or _uri(_URI_SCHEMES[backend], name, prefix),
            prefix=prefix,
            retry=retry,
            redactor=redact,
            whole_object_limit=whole_object_limit,
        )


class _BucketStore(_CloudStore):
    """A store in a bucket (S3, GCS): the same arguments for both; ``_backend`` picks the cloud."""

    _backend: ClassVar[Backend]

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        storage_options: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        whole_object_limit: int = DEFAULT_WHOLE_OBJECT_LIMIT,
        credential_provider: Any = None,
    ) -> None:
        self.bucket = bucket
        self._connect(
            self._backend,
            bucket,
            prefix,
            storage_options=storage_options,
            retry=retry,
            whole_object_limit=whole_object_limit,
            credential_provider=credential_provider,
        )


class S3Store(_BucketStore):
    """An Amazon S3 bucket (or an S3-compatible service) under an optional prefix.

    Create-only puts use ``If-None-Match: *`` (AWS since 2024, MinIO, R2...).

    Args:
        bucket: the bucket name.
        prefix: the key prefix the database lives under ("" for the bucket root).
        storage_options: obstore ``S3Config`` keys and client keys (see the
            module docstring); they override ``AWS_*`` environment variables.
        retry: the retry policy for transient failures.
        whole_object_limit: see :class:`ObstoreStore`.
        credential_provider: an obstore credential provider (a callable
            returning credentials), for credentials mere should not hold.

    Raises:
        MissingDependency: obstore is not installed (``pip install mere[s3]``).
        StorageError: the configuration is invalid.
    """

    _backend = "s3"


class AzureStore(_CloudStore):
    """An Azure Blob Storage container (ADLS Gen2 too) under an optional prefix.

    Create-only puts use ``If-None-Match: *``. Listing with ``start_after``
    is applied on the client: Azure lists the whole directory first.

    Args:
        container: the container name.
        prefix: the key prefix the database lives under.
        account: the storage account (else ``account_name`` in
            storage_options or ``AZURE_STORAGE_ACCOUNT_NAME``).
        storage_options: obstore ``AzureConfig`` keys and client keys. For
            Azurite: ``use_emulator=True`` (port 10000), or ``account_name``,
            ``account_key`` and ``endpoint="http://host:port/<account>"`` with
            ``allow_http=True``.
        retry: the retry policy for transient failures.
        whole_object_limit: see :class:`ObstoreStore`.
        credential_provider: an obstore credential provider.
        uri: the URI to report (``abfss://...`` keeps its form); built from
            the container and prefix when omitted.

    Raises:
        MissingDependency: obstore is not installed (``pip install mere[azure]``).
        StorageError: the configuration is invalid.
    """

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        account: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        whole_object_limit: int = DEFAULT_WHOLE_OBJECT_LIMIT,
        credential_provider: Any = None,
        uri: str | None = None,
    ) -> None:
        self.container = container
        self._connect(
            "azure",
            container,
            prefix,
            storage_options=storage_options,
            retry=retry,
            whole_object_limit=whole_object_limit,
            credential_provider=credential_provider,
            uri=uri,
            config_defaults={} if account is None else {"account_name": account},
        )


class GCSStore(_BucketStore):
    """A Google Cloud Storage bucket under an optional prefix.

    Create-only puts send ``x-goog-if-generation-match: 0``.

    Args:
        bucket: the bucket name.
        prefix: the key prefix the database lives under.
        storage_options: obstore ``GCSConfig`` keys (``service_account_key``,
            ``application_credentials``, ``base_url``...) and client keys.
        retry: the retry policy for transient failures.
        whole_object_limit: see :class:`ObstoreStore`.
        credential_provider: an obstore credential provider (a callable
            returning ``{"token": ..., "expires_at": ...}``).

    Raises:
        MissingDependency: obstore is not installed (``pip install mere[gcs]``).
        StorageError: the configuration is invalid.
    """

    _backend = "gcs"


_AZURE_HOST = re.compile(r"^(?P<account>[a-z0-9]+)\.(dfs|blob)\.core\.windows\.net$", re.I)

_SCHEME_BACKENDS: dict[str, Backend] = {
    "s3": "s3",
    "s3a": "s3",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "gs": "gcs",
    "gcs": "gcs",
}


def open_cloud_store(uri: str, storage_options: Mapping[str, Any] | None = None) -> ObstoreStore:
    """Open the cloud store a URI names (see the module docstring for the forms).

    Raises:
        MissingDependency: obstore is not installed.
        StorageError: the URI is malformed, carries credentials or a query,
            or the configuration is invalid.
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise StorageError("malformed cloud storage URI") from None
    scheme = parts.scheme.lower()
    backend = _SCHEME_BACKENDS.get(scheme)
    if backend is None:
        raise StorageError(f"not a cloud storage scheme: {scheme!r}")
    abfs = scheme in ("abfs", "abfss")
    if parts.password is not None or ("@" in parts.netloc and not abfs):
        raise StorageError(
            f"credentials in a {scheme}:// URI are not supported; pass them in storage_options "
            "or the environment"
        )
    if parts.query or parts.fragment:
        raise StorageError(f"a {scheme}:// URI takes no query or fragment")
    prefix = unquote(parts.path).strip("/")
    netloc = parts.netloc
    if not netloc:
        raise StorageError(f"{scheme}:// URIs name a bucket or container: {scheme}://NAME/prefix")
    if backend == "s3":
        return S3Store(netloc, prefix, storage_options=storage_options)
    if backend == "gcs":
        return GCSStore(netloc, prefix, storage_options=storage_options)
    if abfs and "@" in netloc:
        container, _, host = netloc.partition("@")
        match = _AZURE_HOST.match(host)
        if match is None or not container:
            raise StorageError(
                f"expected {scheme}://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix, got host "
                f"{host!r}"
            )
        return AzureStore(
            container,
            prefix,
            account=match.group("account"),
            storage_options=storage_options,
            uri=_uri(scheme, netloc, prefix),
        )
    return AzureStore(
        netloc,
        prefix,
        storage_options=storage_options,
        uri=_uri(scheme if scheme != "azure" else "az", netloc, prefix),
    )
