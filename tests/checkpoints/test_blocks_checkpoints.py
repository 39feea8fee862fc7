"""Blocks (codec 4) under checkpoints: a first snapshot's small files go into blocks, later
turns store deltas on members, every checkpoint restores exactly; a damaged block fails a
restore loudly (exit 5) with nothing written; a blocked store pushes to and restores from a
real SeaweedFS."""

from __future__ import annotations

import random
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
from remote.sync_helpers import read_tree
from seaweed import Bucket, s3_bucket, s3_env, seaweed

from ckpt.checkpoints import Checkpoints
from ckpt.objstore import ObjectStore, codec
from ckpt.objstore.ids import ObjectId

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use

WORDS = ("static", "int", "return", "struct", "buffer", "count", "if", "else", "{", "}", ";")


def source_like(rng: random.Random, size: int) -> bytes:
    out: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(WORDS)
        out.append(word)
        total += len(word) + 1
    return " ".join(out).encode()[:size]


def write_tree(root: Path, rng: random.Random, count: int, folder: str = "src") -> list[Path]:
    paths = []
    for n in range(count):
        path = root / folder / f"d{n % 5}" / f"f{n:04d}.c"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source_like(rng, rng.randint(1500, 6000)) + b"%d\n" % n)
        paths.append(path)
    return paths


def codecs(objects: ObjectStore) -> dict[int, int]:
    found: dict[int, int] = {}
    for oid in objects.backend.iter_ids():
        kind = objects.backend.get(oid)[4]
        found[kind] = found.get(kind, 0) + 1
    return found


def delta_bases(objects: ObjectStore) -> set[ObjectId]:
    bases = set()
    for oid in objects.backend.iter_ids():
        stored = objects.backend.get(oid)
        if stored[4] == codec.CODEC_DELTA:
            bases.add(codec.delta_header(stored, oid)[0])
    return bases


def test_deltas_on_members_and_new_blocks_restore_every_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    rng = random.Random(2901)
    files = write_tree(root, rng, 60)
    states = []
    with Checkpoints.init(root, session="s") as cps:
        ids = [cps.create().id]
        states.append(read_tree(root))
        for turn in range(6):
            for path in rng.sample(files, 3):  # a turn: a few edits
                data = path.read_bytes()
                at = rng.randrange(len(data))
                path.write_bytes(data[:at] + b" edited %d " % turn + data[at:])
            if turn % 3 == 1:  # and now and then many new files at once: new blocks
                files += write_tree(root, rng, 25, folder=f"new{turn}")
            ids.append(cps.create().id)
            states.append(read_tree(root))
        objects = cps.objects
        kinds = codecs(objects)
        assert kinds.get(codec.CODEC_BLOCK, 0) >= 100 and kinds.get(codec.CODEC_DELTA, 0) >= 3
        members = {oid for oid in objects.backend.iter_ids()
                   if objects.backend.get(oid)[4] == codec.CODEC_BLOCK}
        assert delta_bases(objects) & members  # deltas whose base reads through a block
        for at in (*range(len(ids)), 0):
            cps.restore(ids[at])
            assert read_tree(root) == states[at], at


def test_a_damaged_block_fails_a_restore_with_nothing_written(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    store = str(tmp_path / "store")
    rng = random.Random(2902)
    files = write_tree(root, rng, 40)
    assert h.ckpt(str(root), "init", store=store).code == 0
    created = h.ckpt(str(root), "create", "--json", store=store)
    assert created.code == 0, created
    checkpoint = created.json()["id"]
    for path in files:  # every file to restore: the one the damage hit among them
        path.write_bytes(b"changed since\n")
    before = read_tree(root)
    objects = ObjectStore.open(store)
    blocks = {codec.member_header(objects.backend.get(oid), oid)[0]
              for oid in objects.backend.iter_ids()
              if objects.backend.get(oid)[4] == codec.CODEC_BLOCK}
    objects.close()
    assert blocks
    block = min(blocks)
    where, offset, length = h.object_file(store, block)
    h.flip_byte(where, offset + length // 2)
    restored = h.ckpt(str(root), "restore", checkpoint, store=store)
    assert restored.code == 5, restored
    assert read_tree(root) == before
    checked = h.ckpt(str(root), "fsck", "--full", "--json", store=store)
    assert checked.code == 5, checked
    assert block.hex() in {p["oid"] for p in checked.json()["problems"]}


def test_a_blocked_store_pushes_and_restores_on_a_fresh_machine(tmp_path: Path,
                                                                s3_bucket: Bucket) -> None:
    root = tmp_path / "a"
    rng = random.Random(2903)
    write_tree(root, rng, 80)
    with Checkpoints.init(root, session="s") as a:
        assert codecs(a.objects).get(codec.CODEC_BLOCK, 0) == 0
        a.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        wanted = a.create().id
        assert codecs(a.objects).get(codec.CODEC_BLOCK, 0) >= 70
        a.push()
    expected = read_tree(root)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with Checkpoints.init(fresh, session="s") as b:
        b.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        b.restore(wanted)
        assert codecs(b.objects).get(codec.CODEC_BLOCK, 0) >= 70  # fetched as members
    assert read_tree(fresh) == expected
