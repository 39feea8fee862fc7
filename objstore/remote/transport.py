"""The S3 calls of a remote, through obstore (the one importer of it): get, ranged gets, put
(plain, If-None-Match: *, If-Match: etag), head, list, delete; every client exception turned
into a `RemoteError` subclass with a one-line message.

Bounded: a connect timeout (the remote's `timeout`), a total per-request timeout, and a few
retries with a short backoff (obstore retries 5xx and connection errors itself; 4xx are
final). The per-request timeout follows the request's size: a small one (config, lock,
record, head, index, LIST page, HEAD) gets SMALL_TIMEOUT, so a server that accepts the
connection and never answers fails the first call within about SMALL_TIMEOUT x
(SMALL_RETRIES + 1); a pack transfer gets time for its bytes at MIN_RATE. Nothing here knows
the repository layout: keys are relative to the remote's prefix.
"""

from __future__ import annotations

import datetime
import math
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NoReturn

import obstore
import obstore.exceptions as obx
from obstore.store import S3Store

from ckpt.objstore.remote.credentials import read_settings
from ckpt.objstore.remote.errors import (
    RemoteAuthError,
    RemoteCorrupt,
    RemoteError,
    RemoteNotFound,
    RemoteUnreachable,
)
from ckpt.objstore.remote.url import RemoteSpec

RETRIES = 2
RANGE_THREADS = 4
# A request of at most SMALL_BYTES (or of unknown size: every such key is small) gets
# SMALL_TIMEOUT per attempt, connection included, and SMALL_RETRIES retries.
SMALL_BYTES = 1 << 20
SMALL_TIMEOUT = 5.0
SMALL_RETRIES = 2
# A bigger one gets BULK_BASE plus its bytes at MIN_RATE (a slow uplink's), rounded up to
# BULK_STEP so a few clients serve every size: a 64 MiB pack gets 300 s per attempt.
BULK_BASE = 30.0
MIN_RATE = 256 << 10
BULK_STEP = 60.0
# Above this a PUT goes out in parts (S3 takes at most 5 GB in one PUT).
MULTIPART_OVER = 1 << 30
_UNREACHABLE_HINTS = ("error sending request", "connection refused", "timed out", "dns error",
                      "connect error", "tcp connect", "operation timed out")


class PreconditionFailed(Exception):  # never escapes the remote package
    """A conditional PUT lost: the key exists (If-None-Match) or changed (If-Match)."""


@dataclass(frozen=True, slots=True)
class KeyInfo:
    key: str
    size: int
    etag: str | None
    modified: float  # seconds since the epoch


def _one_line(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0].strip()
    for cut in (" Debug source:", "<?xml"):
        text = text.split(cut, 1)[0].strip()
    return text[:300] or type(exc).__name__


class S3Transport:
    """One bucket (and prefix) of an S3 service, with bounded, classified failures."""

    def __init__(self, spec: RemoteSpec, *, timeout: float) -> None:
        self.url = spec.url
        settings = read_settings(endpoint=spec.endpoint, region=spec.region)
        if settings.access_key_id is None and not settings.metadata_allowed:
            raise RemoteAuthError(spec.url, "no AWS credentials (set AWS_ACCESS_KEY_ID and "
                                            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
        config: dict[str, str] = {"region": settings.region}
        if settings.endpoint is not None:
            config["endpoint"] = settings.endpoint
        if settings.access_key_id is not None and settings.secret_access_key is not None:
            config["access_key_id"] = settings.access_key_id
            config["secret_access_key"] = settings.secret_access_key
            if settings.session_token is not None:
                config["session_token"] = settings.session_token
        self._config = config
        self._allow_http = (settings.endpoint or "").startswith("http://")
        self._connect = timeout
        self._spec = spec
        self._stores: dict[float, S3Store] = {}
        self._stores_lock = threading.Lock()
        self._store_for(None)  # a bad configuration fails here, before any request

    def _store_for(self, size: int | None) -> S3Store:
        """The client whose per-request timeout fits a request of `size` bytes."""
        limit = request_timeout(size)
        with self._stores_lock:
            store = self._stores.get(limit)
            if store is None:
                store = self._stores[limit] = self._new_store(limit)
            return store

    def _new_store(self, limit: float) -> S3Store:
        retries = SMALL_RETRIES if limit <= SMALL_TIMEOUT else RETRIES
        try:
            return S3Store(
                self._spec.bucket, prefix=self._spec.prefix or None,
                config=self._config,  # type: ignore[arg-type]  # a TypedDict of these keys
                client_options={
                    "allow_http": self._allow_http,
                    "connect_timeout": datetime.timedelta(seconds=min(self._connect, limit)),
                    "timeout": datetime.timedelta(seconds=limit),
                },
                retry_config={
                    "max_retries": retries,
                    # No retry starts once the attempts so far could have used their time.
                    "retry_timeout": datetime.timedelta(seconds=limit * retries + 1),
                    "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                                "max_backoff": datetime.timedelta(seconds=2), "base": 2},
                },
            )
        except obx.BaseError as exc:
            raise RemoteError(self._spec.url, _one_line(exc)) from None

    # -- failures ------------------------------------------------------------------------

    def _fail(self, exc: Exception, key: str) -> NoReturn:
        text = _one_line(exc)
        lowered = str(exc).lower()
        if isinstance(exc, obx.AlreadyExistsError | obx.PreconditionError):
            raise PreconditionFailed(key) from None
        if isinstance(exc, FileNotFoundError | obx.NotFoundError):
            if "nosuchbucket" in lowered:
                raise RemoteError(self.url, "the bucket does not exist") from None
            raise RemoteNotFound(self.url, key) from None
        if (isinstance(exc, obx.PermissionDeniedError | obx.UnauthenticatedError)
                or "403 forbidden" in lowered or "401 unauthorized" in lowered):
            raise RemoteAuthError(self.url, f"access denied ({_auth_reason(lowered)})") from None
        if any(hint in lowered for hint in _UNREACHABLE_HINTS):
            raise RemoteUnreachable(self.url, f"unreachable: {text}") from None
        if "416 range not satisfiable" in lowered:
            raise RemoteCorrupt(self.url, key, "shorter than its index says") from None
        if "412 precondition failed" in lowered:
            raise PreconditionFailed(key) from None
        raise RemoteError(self.url, text) from None

    # -- calls ---------------------------------------------------------------------------

    def get(self, key: str, *, size: int | None = None) -> tuple[bytes, str | None]:
        """The bytes at `key` and their ETag; RemoteNotFound if absent. `size`: what a
        listing said the key holds (None: a small key)."""
        try:
            result = obstore.get(self._store_for(size), key)
            data = bytes(result.bytes())
            return data, result.meta.get("e_tag")
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (start, length) of `key`, up to RANGE_THREADS at once. A range
        that runs past the end comes back short; one that starts past it is RemoteCorrupt.
        (One GET per range: obstore's own get_ranges merges ranges itself and panics when
        the object is shorter than they say, as a truncated pack is.)"""
        return [bytes(view) for view in self.get_range_views(key, ranges)]

    def get_range_views(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """`get_ranges`, each range's bytes as the client received them (not copied into a
        bytes object): a fetch reads hundreds of megabytes so."""
        if len(ranges) <= 1:
            return [self._get_range_view(key, start, length) for start, length in ranges]
        with ThreadPoolExecutor(min(RANGE_THREADS, len(ranges)),
                                thread_name_prefix="ckpt-remote-get") as pool:
            return list(pool.map(lambda r: self._get_range_view(key, *r), ranges))

    def _get_range_view(self, key: str, start: int, length: int) -> memoryview:
        try:
            return memoryview(obstore.get_range(self._store_for(length), key, start=start,
                                                length=length))
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def put(self, key: str, data: bytes | memoryview, *, mode: str = "overwrite") -> str | None:
        """Write `key`; returns the new ETag. `mode` "create" sends If-None-Match: *, any
        other string than "overwrite" is an ETag for If-Match; PreconditionFailed if lost."""
        put_mode: obstore.PutMode = (
            "create" if mode == "create" else "overwrite" if mode == "overwrite"
            else {"e_tag": mode})
        try:
            result = obstore.put(self._store_for(len(data)), key, data, mode=put_mode,
                                 use_multipart=len(data) > MULTIPART_OVER)
            return result.get("e_tag")
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def head(self, key: str) -> KeyInfo:
        try:
            meta = obstore.head(self._store_for(None), key)
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)
        return KeyInfo(key, meta["size"], meta.get("e_tag"), meta["last_modified"].timestamp())

    def list(self, prefix: str) -> Iterator[KeyInfo]:
        """Every key under `prefix` (which ends with "/"), in no promised order."""
        try:
            for batch in obstore.list(self._store_for(None), prefix=prefix, chunk_size=1000):
                for meta in batch:
                    yield KeyInfo(meta["path"], meta["size"], meta.get("e_tag"),
                                  meta["last_modified"].timestamp())
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, prefix)

    def delete(self, key: str) -> None:
        """Remove `key` (absent is fine)."""
        try:
            obstore.delete(self._store_for(None), key)
        except FileNotFoundError:
            return
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)


def request_timeout(size: int | None) -> float:
    """Seconds one attempt of a request moving `size` bytes may take (None: a small one)."""
    if size is None or size <= SMALL_BYTES:
        return SMALL_TIMEOUT
    return math.ceil((BULK_BASE + size / MIN_RATE) / BULK_STEP) * BULK_STEP


def _auth_reason(lowered: str) -> str:
    if "signaturedoesnotmatch" in lowered:
        return "the secret key does not match"
    if "invalidaccesskeyid" in lowered:
        return "unknown access key"
    if "expiredtoken" in lowered:
        return "the session token has expired"
    return "check the AWS credentials and the bucket's policy"
