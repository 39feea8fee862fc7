"""Deltas (codec 3): a blob stored against its previous version, read back exactly, kept by gc,
checked by fsck, and refused loudly when its base is damaged."""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ckpt.objstore import (
    CorruptObject,
    EntryKind,
    ObjectId,
    ObjectStore,
    StoreOptions,
    Tree,
    TreeEntry,
    codec,
    hash_bytes,
)
from ckpt.objstore.delta import MIN_DELTA_SIZE, envelope_closure, read_chain
from ckpt.objstore.fsck import check_store
from ckpt.objstore.gc import collect_garbage
from ckpt.objstore.memory import MemoryBackend

Content = Callable[[str, int, int], bytes]


def _edit(data: bytes, rng: random.Random, size: int = 12) -> bytes:
    at = rng.randrange(max(1, len(data) - size))
    return data[:at] + rng.randbytes(size) + data[at + size:]


def _depth(store: ObjectStore, oid: ObjectId) -> int:
    stored = store.backend.get(oid)
    return codec.delta_header(stored)[1] if stored[4] == codec.CODEC_DELTA else 0


def _root(store: ObjectStore, blobs: list[ObjectId], sizes: list[int]) -> ObjectId:
    entries = [TreeEntry(f"f{i:04}".encode(), EntryKind.FILE, oid, None, size)
               for i, (oid, size) in enumerate(zip(blobs, sizes))]
    return store.put_tree(Tree.build(entries))


def test_an_edited_version_is_stored_as_a_small_delta_and_read_back(
    tmp_path: os.PathLike[str], content: Content
) -> None:
    store = ObjectStore.init(os.path.join(tmp_path, "s"))
    with open(os.path.join(tmp_path, "s", "format"), "wb") as out:
        out.write(b"ckpt-objstore 1\n")  # an older store: raised by the first delta
    store.close()
    store = ObjectStore.open(os.path.join(tmp_path, "s"))
    old = content("text", 200_000, 1)
    new = _edit(old, random.Random(2))
    base = store.put_bytes(old)
    oid = store.put_bytes(new, base=base)
    stored = store.backend.get(oid)
    assert stored[4] == codec.CODEC_DELTA
    assert codec.envelope_refs(stored) == (base,)
    assert codec.delta_header(stored) == (base, 1)
    assert len(stored) < 400 < len(codec.encode_object(new, 3))
    assert store.get_bytes(oid) == new
    assert store.verify(oid) == len(new)
    assert store.format_version == 2
    assert store.delta_savings() > 10_000
    store.close()
    reopened = ObjectStore.open(os.path.join(tmp_path, "s"))
    assert reopened.format_version == 2
    assert reopened.get_bytes(oid) == new
    assert reopened.delta_savings() > 10_000
    reopened.close()


@pytest.mark.parametrize(("kind", "size", "why"), [
    ("random", 100_000, "an unrelated base gives no saving"),
    ("text", MIN_DELTA_SIZE - 1, "too small to be worth a chain"),
])
def test_a_delta_is_stored_only_where_it_pays(
    memory_store: ObjectStore, content: Content, kind: str, size: int, why: str
) -> None:
    base = memory_store.put_bytes(content(kind, size, 1))
    new = content(kind, size, 2)
    oid = memory_store.put_bytes(new, base=base)
    assert memory_store.backend.get(oid)[4] != codec.CODEC_DELTA, why
    assert memory_store.get_bytes(oid) == new


def test_deltas_off_or_a_chain_of_zero_store_plain(content: Content) -> None:
    old = content("text", 50_000, 1)
    for options in (StoreOptions(deltas=False), StoreOptions(delta_chain=0)):
        store = ObjectStore(MemoryBackend(), options)
        oid = store.put_bytes(_edit(old, random.Random(1)), base=store.put_bytes(old))
        assert store.backend.get(oid)[4] != codec.CODEC_DELTA


def test_a_missing_or_damaged_hint_is_no_base(memory_store: ObjectStore, content: Content) -> None:
    old = content("text", 50_000, 1)
    new = _edit(old, random.Random(1))
    oid = memory_store.put_bytes(new, base=hash_bytes(b"never stored"))
    assert memory_store.backend.get(oid)[4] != codec.CODEC_DELTA
    assert memory_store.get_bytes(oid) == new


@pytest.mark.parametrize("chain", [1, 2, 3])
def test_chains_stay_within_the_bound_and_restart_on_the_full_object(
    content: Content, chain: int
) -> None:
    store = ObjectStore(MemoryBackend(), StoreOptions(delta_chain=chain))
    rng = random.Random(chain)
    data = content("text", 100_000, 7)
    versions = [(store.put_bytes(data), data)]
    for _ in range(3 * chain + 2):
        data = _edit(data, rng)
        versions.append((store.put_bytes(data, base=versions[-1][0]), data))
    depths = [_depth(store, oid) for oid, _ in versions]
    assert depths == [0] + [1 + i % chain for i in range(len(versions) - 1)]
    full = versions[0][0]
    for oid, data in versions:
        chain_ids = [member for member, _ in read_chain(store.backend, oid)]
        assert chain_ids[-1] == full and len(chain_ids) <= chain + 1
        assert store.get_bytes(oid) == data


def test_put_file_and_put_files_take_hints(tmp_path: os.PathLike[str], content: Content) -> None:
    store = ObjectStore.init(os.path.join(tmp_path, "s"))
    rng = random.Random(3)
    old = [content("text", 30_000 + i, i) for i in range(4)]
    bases = [store.put_bytes(data) for data in old]
    new = [_edit(data, rng) for data in old]
    paths = []
    for i, data in enumerate(new):
        path = os.path.join(tmp_path, f"f{i}")
        with open(path, "wb") as out:
            out.write(data)
        paths.append(path)
    hints: list[ObjectId | None] = [bases[0], None, bases[2], bases[3]]
    results = list(store.put_files(paths, threads=2, bases=hints))
    for result, data, hint in zip(results, new, hints):
        assert not isinstance(result, Exception)
        assert result.oid == hash_bytes(data) and result.is_new
        is_delta = store.backend.get(result.oid)[4] == codec.CODEC_DELTA
        assert is_delta == (hint is not None)
        assert result.stored_bytes == len(store.backend.get(result.oid))
        assert store.get_bytes(result.oid) == data
    single = os.path.join(tmp_path, "one")
    again = _edit(new[1], rng)
    with open(single, "wb") as out:
        out.write(again)
    one = store.put_file(single, base=results[1].oid)  # type: ignore[union-attr]
    assert store.backend.get(one.oid)[4] == codec.CODEC_DELTA
    store.close()


def test_a_damaged_base_fails_every_dependent_loudly(
    local_store: ObjectStore, content: Content,
    object_file: Callable[[ObjectStore, ObjectId], str],
) -> None:
    rng = random.Random(5)
    data = content("text", 60_000, 5)
    ids = [local_store.put_bytes(data)]
    sizes = [len(data)]
    for _ in range(5):
        data = _edit(data, rng)
        ids.append(local_store.put_bytes(data, base=ids[-1]))
        sizes.append(len(data))
    root = _root(local_store, ids, sizes)
    damaged = ids[2]  # a delta in the middle of the chain
    needs = {oid for oid in ids
             if damaged in [member for member, _ in read_chain(local_store.backend, oid)]}
    assert needs >= {ids[2], ids[3]} and ids[0] not in needs
    path = object_file(local_store, damaged)
    with open(path, "r+b") as stream:
        stream.seek(-3, os.SEEK_END)
        last = stream.read(3)
        stream.seek(-3, os.SEEK_END)
        stream.write(bytes(b ^ 0x55 for b in last))
    for oid in needs - {damaged}:
        with pytest.raises(CorruptObject) as raised:
            local_store.get_bytes(oid)
        assert raised.value.oid == oid
        assert damaged.hex() in raised.value.reason
    for oid in set(ids) - needs:
        local_store.get_bytes(oid)  # what does not build on it reads as before
    report = check_store(local_store, [root], full=True)
    assert {d.oid for d in report.problems} == needs
    assert report.damaged_roots == {root}
    os.unlink(path)  # gone instead: the structural check names every dependent
    report = check_store(local_store, [root])
    assert {d.oid for d in report.problems} == needs
    assert all(d.problem == "corrupt" for d in report.problems if d.oid != damaged)


def test_a_crafted_cycle_is_corrupt_not_a_recursion(memory_store: ObjectStore) -> None:
    a, b = hash_bytes(b"a"), hash_bytes(b"b")
    header = struct.Struct("<3sBBQ")
    memory_store.backend.put(a, header.pack(b"CKO", 1, codec.CODEC_DELTA, 5) + b + b"\x02xx")
    memory_store.backend.put(b, header.pack(b"CKO", 1, codec.CODEC_DELTA, 5) + a + b"\x01xx")
    for oid in (a, b):
        with pytest.raises(CorruptObject):
            memory_store.get_bytes(oid)
    with pytest.raises(CorruptObject):
        codec.decode_object(memory_store.backend.get(a), a)  # no refs: needs its base


def test_gc_keeps_the_base_a_live_delta_needs(memory_store: ObjectStore, clock: object,
                                             content: Content) -> None:
    store = memory_store
    data = content("text", 40_000, 9)
    old = store.put_bytes(data)
    rng = random.Random(9)
    mid_data = _edit(data, rng)
    mid = store.put_bytes(mid_data, base=old)
    new_data = _edit(mid_data, rng)
    new = store.put_bytes(new_data, base=mid)
    root = _root(store, [new], [len(new_data)])  # old and mid are reachable by no tree
    assert envelope_closure(store.backend, [new]) == {old, mid}
    clock.advance(10_000)  # type: ignore[attr-defined]
    report = collect_garbage(store, [root], grace_seconds=60, now=clock())  # type: ignore[operator]
    assert report.objects_removed == 0
    assert store.get_bytes(new) == new_data
    # Once nothing needs them they go, and the ledger forgets the deltas it counted.
    saved = store.delta_savings()
    assert saved > 0
    empty = store.put_tree(Tree.build([]))
    clock.advance(10_000)  # type: ignore[attr-defined]
    report = collect_garbage(store, [empty], grace_seconds=60, now=clock())  # type: ignore[operator]
    assert not any(store.has(oid) for oid in (old, mid, new))
    assert store.delta_savings() == 0


def test_gc_keeps_an_old_base_of_a_young_delta(memory_store: ObjectStore, clock: object,
                                              content: Content) -> None:
    """A snapshot in progress has written a delta (young, reachable by no root yet) on an
    old, unreachable version: gc must keep that base, or the snapshot commits a loss."""
    store = memory_store
    data = content("text", 40_000, 11)
    old = store.put_bytes(data)
    clock.advance(10_000)  # type: ignore[attr-defined]
    new_data = _edit(data, random.Random(11))
    new = store.put_bytes(new_data, base=old)
    empty = store.put_tree(Tree.build([]))
    report = collect_garbage(store, [empty], grace_seconds=60, now=clock())  # type: ignore[operator]
    assert report.objects_removed == 0
    assert store.get_bytes(new) == new_data


def test_a_delta_left_without_its_base_by_a_stopped_gc_is_stranded_not_damage(
        memory_store: ObjectStore, clock: object, content: Content) -> None:
    """A gc stopped between the packs it rewrites can have removed a base and not yet its
    unreachable dependent: fsck --full lists that one apart, and the next gc removes it. The
    same gap under a live checkpoint stays damage."""
    store = memory_store
    data = content("text", 40_000, 13)
    old = store.put_bytes(data)
    rng = random.Random(13)
    mid_data = _edit(data, rng)
    mid = store.put_bytes(mid_data, base=old)
    new = store.put_bytes(_edit(mid_data, rng), base=mid)
    empty = store.put_tree(Tree.build([]))
    store.backend.delete(old)  # what the stopped gc got to
    report = check_store(store, [empty], full=True)
    assert report.ok and set(report.stranded) == {mid, new}
    assert check_store(store, [empty]).stranded == ()  # only --full reads every object
    live = _root(store, [new], [len(mid_data)])
    report = check_store(store, [live], full=True)
    assert not report.ok and mid not in report.stranded and report.damaged_roots == {live}
    clock.advance(10_000)  # type: ignore[attr-defined]
    removed = collect_garbage(store, [empty], grace_seconds=60, now=clock())  # type: ignore[operator]
    assert removed.objects_removed >= 2 and not store.has(mid) and not store.has(new)
    assert check_store(store, [empty], full=True).stranded == ()


@seed(29)
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(["edit", "edit", "edit", "grow", "gc", "drop"]),
                             st.integers(0, 2**32 - 1)), min_size=4, max_size=24),
    chain=st.integers(1, 4),
)
def test_random_edit_sequences_read_back_exactly_through_gc_and_repack(
    tmp_path_factory: pytest.TempPathFactory, content: Content,
    steps: list[tuple[str, int]], chain: int,
) -> None:
    """A file edited at random, each version a delta on the last where it pays; at random
    points gc runs (with a full repack of the packs) keeping only some versions: every kept
    version reads back exactly, and so does everything fsck --full checks."""
    root_dir = str(tmp_path_factory.mktemp("deltas"))
    store = ObjectStore.init(os.path.join(root_dir, "s"), StoreOptions(delta_chain=chain))
    data = content("text", 20_000, chain)
    kept: dict[ObjectId, bytes] = {store.put_bytes(data): data}
    last = next(iter(kept))
    now = 2_000_000_000.0
    for action, value in steps:
        rng = random.Random(value)
        if action in ("edit", "grow"):
            data = _edit(data, rng) if action == "edit" else data + content("text", 3000, value)
            last = store.put_bytes(data, base=last)
            kept[last] = data
        elif action == "drop" and len(kept) > 1:
            victim = rng.choice([oid for oid in kept if oid != last])
            del kept[victim]
        elif action == "gc":
            store.sync()
            root = _root(store, list(kept), [len(v) for v in kept.values()])
            now += 10_000
            collect_garbage(store, [root], grace_seconds=0, now=now)
            for oid, expected in kept.items():
                assert store.get_bytes(oid) == expected
    store.sync()
    root = _root(store, list(kept), [len(v) for v in kept.values()])
    collect_garbage(store, [root], grace_seconds=0, now=now + 10_000)
    store.close()
    store = ObjectStore.open(os.path.join(root_dir, "s"))
    for oid, expected in kept.items():
        assert store.get_bytes(oid) == expected
        assert len(read_chain(store.backend, oid)) <= chain + 1
    assert check_store(store, [root], full=True).ok
    store.close()
