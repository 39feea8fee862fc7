"""Remote URLs: `s3://BUCKET[/PREFIX]` plus an optional endpoint and region, checked once into a
`RemoteSpec`. Pure: no network, no credentials (those never live in a URL or in ckpt's files)."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

# S3's bucket rule (lowercase letters, digits, dots and hyphens, 3-63, alphanumeric ends).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Prefix segments: what every S3 service stores and lists the same way.
_SEGMENT = re.compile(r"[A-Za-z0-9._~+=@,-]+")


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    url: str  # normalized: s3://bucket or s3://bucket/prefix
    bucket: str
    prefix: str  # "" or segments joined by "/", no slash at either end
    endpoint: str | None  # http(s)://host[:port] for non-AWS services
    region: str | None


def parse_remote_url(url: str, *, endpoint: str | None = None,
                     region: str | None = None) -> RemoteSpec:
    """Check `url` (and `endpoint`, `region`); ValueError with a one-line reason."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "s3":
        raise ValueError(f"remote URL must be s3://BUCKET[/PREFIX]: {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password or parts.port:
        raise ValueError(f"remote URL must be s3://BUCKET[/PREFIX], no credentials, port, "
                         f"query or fragment: {url!r}")
    bucket = parts.netloc
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(f"not a valid S3 bucket name (3-63 lowercase letters, digits, dots, "
                         f"hyphens): {bucket!r}")
    segments = [s for s in parts.path.split("/") if s]
    for segment in segments:
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            raise ValueError(f"remote prefix segment {segment!r} is not allowed (letters, "
                             f"digits and ._~+=@,- only)")
    prefix = "/".join(segments)
    if endpoint is not None:
        endpoint = _check_endpoint(endpoint)
    if region is not None and not re.fullmatch(r"[a-z0-9-]{1,40}", region):
        raise ValueError(f"not a valid region name: {region!r}")
    normalized = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
    return RemoteSpec(normalized, bucket, prefix, endpoint, region)


def _check_endpoint(endpoint: str) -> str:
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint must be http(s)://HOST[:PORT]: {endpoint!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"endpoint must be http(s)://HOST[:PORT], no path or credentials: "
                         f"{endpoint!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"endpoint has a bad port: {endpoint!r}") from None
    return f"{parts.scheme}://{parts.netloc}"
