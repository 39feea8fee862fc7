"""The S3 calls of a remote, through obstore (the one importer of it): get, ranged gets, put
(plain, If-None-Match: *, If-Match: etag), head, list, delete; every client exception turned
into a `RemoteError` subclass with a one-line message.

Bounded: a connect timeout (the remote's `timeout`), a total per-request timeout, and a few
retries with a short backoff (obstore retries 5xx and connection errors itself; 4xx are
final). Nothing here knows the repository layout: keys are relative to the remote's prefix.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NoReturn

import obstore
import obstore.exceptions as obx
from obstore.store import S3Store

from ckpt.objstore.remote.credentials import read_settings
from ckpt.objstore.remote.errors import (
    RemoteAuthError,
    RemoteError,
    RemoteNotFound,
    RemoteUnreachable,
)
from ckpt.objstore.remote.url import RemoteSpec

RETRIES = 3
# Per request, whole body included: a 64 MiB pack over a slow link must fit.
REQUEST_TIMEOUT = 600.0
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
        seconds = datetime.timedelta(seconds=timeout)
        try:
            self._store = S3Store(
                spec.bucket, prefix=spec.prefix or None,
                config=config,  # type: ignore[arg-type]  # a TypedDict of these keys
                client_options={
                    "allow_http": (settings.endpoint or "").startswith("http://"),
                    "connect_timeout": seconds,
                    "timeout": datetime.timedelta(seconds=REQUEST_TIMEOUT),
                },
                retry_config={
                    "max_retries": RETRIES,
                    "retry_timeout": seconds * (RETRIES + 1),
                    "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                                "max_backoff": datetime.timedelta(seconds=2), "base": 2},
                },
            )
        except obx.BaseError as exc:
            raise RemoteError(spec.url, _one_line(exc)) from None

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
        if "412 precondition failed" in lowered:
            raise PreconditionFailed(key) from None
        raise RemoteError(self.url, text) from None

    # -- calls ---------------------------------------------------------------------------

    def get(self, key: str) -> tuple[bytes, str | None]:
        """The bytes at `key` and their ETag; RemoteNotFound if absent."""
        try:
            result = obstore.get(self._store, key)
            data = bytes(result.bytes())
            return data, result.meta.get("e_tag")
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (start, length) of `key`, fetched concurrently; a range past the
        end comes back short (or fails) - the caller checks lengths."""
        if not ranges:
            return []
        try:
            parts = obstore.get_ranges(self._store, key, starts=[s for s, _ in ranges],
                                       lengths=[n for _, n in ranges])
            return [bytes(p) for p in parts]
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def put(self, key: str, data: bytes | memoryview, *, mode: str = "overwrite") -> str | None:
        """Write `key`; returns the new ETag. `mode` "create" sends If-None-Match: *, any
        other string than "overwrite" is an ETag for If-Match; PreconditionFailed if lost."""
        put_mode: obstore.PutMode = (
            "create" if mode == "create" else "overwrite" if mode == "overwrite"
            else {"e_tag": mode})
        try:
            result = obstore.put(self._store, key, data, mode=put_mode,
                                 use_multipart=len(data) > MULTIPART_OVER)
            return result.get("e_tag")
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)

    def head(self, key: str) -> KeyInfo:
        try:
            meta = obstore.head(self._store, key)
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)
        return KeyInfo(key, meta["size"], meta.get("e_tag"), meta["last_modified"].timestamp())

    def list(self, prefix: str) -> Iterator[KeyInfo]:
        """Every key under `prefix` (which ends with "/"), in no promised order."""
        try:
            for batch in obstore.list(self._store, prefix=prefix, chunk_size=1000):
                for meta in batch:
                    yield KeyInfo(meta["path"], meta["size"], meta.get("e_tag"),
                                  meta["last_modified"].timestamp())
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, prefix)

    def delete(self, key: str) -> None:
        """Remove `key` (absent is fine)."""
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except (obx.BaseError, OSError) as exc:
            self._fail(exc, key)


def _auth_reason(lowered: str) -> str:
    if "signaturedoesnotmatch" in lowered:
        return "the secret key does not match"
    if "invalidaccesskeyid" in lowered:
        return "unknown access key"
    if "expiredtoken" in lowered:
        return "the session token has expired"
    return "check the AWS credentials and the bucket's policy"
