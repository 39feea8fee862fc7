"""Large blobs stream: storing and reading back 1 GiB needs bounded memory, not 1 GiB of RAM.

The store runs in a fresh interpreter so its peak RSS (`ru_maxrss`) measures only the put and
the read-back, not pytest or the generator (which writes the file a MiB at a time).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import blake3
import pytest

GIB = 1 << 30
CHUNK = 1 << 20
RANDOM_BLOCK = 64 << 10
RSS_LIMIT = 200 * 1000 * 1000  # bytes; the budget
REPO = Path(__file__).resolve().parents[2]

# Linux folds the pre-exec memory of a spawned child into its ru_maxrss, so a child of a big
# pytest process starts with pytest's peak. The script therefore forks a worker first: a
# fork's peak starts from the small interpreter it is forked from.
STORE_SCRIPT = """
import os, sys
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
import json, resource, time
from ckpt.objstore import ObjectStore, StoreOptions

source, store_dir, copy_path = sys.argv[1:4]
started = time.monotonic()
store = ObjectStore.init(store_dir, StoreOptions(fsync="none"))
put = store.put_file(source)
put_seconds = time.monotonic() - started
with open(copy_path, "wb") as out:
    copied = store.copy_to(put.oid, out)
store.close()
print(json.dumps({
    "oid": put.oid.hex(), "size": put.size, "stored": put.stored_bytes, "copied": copied,
    "put_seconds": put_seconds, "total_seconds": time.monotonic() - started,
    "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
}), flush=True)
os._exit(0)
"""


def write_sparse_file(path: Path, size: int, seed: int) -> str:
    """Mostly zero runs (left as holes) with a random 64 KiB block in ~1 of 8 MiB; returns the
    b3sum. Works one MiB at a time, so the generator itself stays small."""
    rng = random.Random(seed)
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    zeros = bytes(CHUNK)
    with open(path, "wb") as out:
        for offset in range(0, size, CHUNK):
            length = min(CHUNK, size - offset)
            if offset == 0 or rng.random() < 0.125:
                at = rng.randrange(0, max(1, length - RANDOM_BLOCK))
                block = rng.randbytes(min(RANDOM_BLOCK, length - at))
                out.seek(offset + at)
                out.write(block)
                chunk = bytearray(length)
                chunk[at : at + len(block)] = block
                hasher.update(chunk)
            else:
                hasher.update(zeros[:length])
        out.truncate(size)
    return hasher.hexdigest()


def write_random_file(path: Path, size: int, seed: int) -> str:
    rng = random.Random(seed)
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    with open(path, "wb") as out:
        for offset in range(0, size, CHUNK):
            chunk = rng.randbytes(min(CHUNK, size - offset))
            out.write(chunk)
            hasher.update(chunk)
    return hasher.hexdigest()


def b3sum(path: Path) -> str:
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    with open(path, "rb") as stream:
        while chunk := stream.read(4 * CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def round_trip_in_fresh_process(tmp_path: Path, source: Path) -> tuple[dict[str, Any], Path]:
    copy = tmp_path / "copy.bin"
    run = subprocess.run(
        [sys.executable, "-c", STORE_SCRIPT, str(source), str(tmp_path / "store"), str(copy)],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        },
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), copy


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "size"),
    [("sparse", GIB), ("random", 256 << 20)],  # zstd stream path; raw stream path
)
def test_large_file_round_trips_through_the_store_with_bounded_memory(
    tmp_path: Path, shape: str, size: int
) -> None:
    source = tmp_path / "big.bin"
    copy = tmp_path / "copy.bin"
    try:
        write = write_sparse_file if shape == "sparse" else write_random_file
        expected = write(source, size, seed=20240601)
        assert source.stat().st_size == size
        result, copy = round_trip_in_fresh_process(tmp_path, source)
        peak = result["maxrss_kib"] * 1024
        assert result["oid"] == expected  # the id is b3sum of the file
        assert result["size"] == result["copied"] == size
        assert copy.stat().st_size == size
        assert b3sum(copy) == expected
        if shape == "sparse":
            assert result["stored"] < size // 4  # zero runs compressed away
        assert peak < RSS_LIMIT, f"peak RSS {peak / 1e6:.0f} MB storing {size >> 20} MiB"
        print(
            f"\n{shape} {size >> 20} MiB: peak RSS {peak / 1e6:.0f} MB, "
            f"{result['total_seconds']:.1f} s put+copy, stored {result['stored'] / 1e6:.0f} MB"
        )
    finally:
        for path in (source, copy):
            path.unlink(missing_ok=True)
