"""Blocks (codec 4): small new blobs of a `put_files` call stored together, each member an
object naming its block. Real stores on disk; damage made with the fault helpers."""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ckpt.objstore import CorruptObject, ObjectStore, StoreOptions, Tree, TreeEntry, codec
from ckpt.objstore import store as store_module
from ckpt.objstore.blocks import MIN_BLOCK_BYTES, MIN_BLOCK_MEMBERS, SMALL_LIMIT
from ckpt.objstore.errors import UnsupportedFormat
from ckpt.objstore.fsck import check_store
from ckpt.objstore.gc import collect_garbage
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.objects import EntryKind
from ckpt.objstore.store import FORMAT_FILE, PutResult


def source_like(rng: random.Random, size: int) -> bytes:
    words = [b"int", b"return", b"struct", b"static", b"void", b"if", b"else", b"for",
             b"(x)", b"{", b"}", b";", b"\n", b"    ", b"buffer", b"count"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def write_files(folder: Path, contents: list[bytes]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, data in enumerate(contents):
        path = folder / f"f{n:05d}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def put_all(store: ObjectStore, paths: list[str], *, threads: int = 2) -> list[PutResult]:
    results = list(store.put_files(paths, threads=threads))
    assert all(isinstance(r, PutResult) for r in results), results
    store.sync()
    return results  # type: ignore[return-value]


def codec_of(store: ObjectStore, oid: ObjectId) -> int:
    return store.backend.get(oid)[4]


def block_of(store: ObjectStore, oid: ObjectId) -> ObjectId:
    return codec.member_header(store.backend.get(oid), oid)[0]


def tree_of(store: ObjectStore, oids: list[ObjectId]) -> ObjectId:
    return store.put_tree(Tree(tuple(TreeEntry(b"f%05d" % n, EntryKind.FILE, oid, None, 1)
                                     for n, oid in enumerate(oids))))


def many_small(seed_: int, count: int, low: int = 200, high: int = 4000) -> list[bytes]:
    rng = random.Random(seed_)
    return [source_like(rng, rng.randint(low, high)) + b"%d" % n for n in range(count)]


# -- writing and reading ---------------------------------------------------------------------


@seed(29004)
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=60),
       block_size=st.sampled_from([4 << 10, 16 << 10, 64 << 10]),
       duplicates=st.integers(0, 5), threads=st.sampled_from([1, 2]),
       layout=st.sampled_from(["packed", "loose"]))
def test_random_small_files_restore_byte_exact_through_their_blocks(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int], block_size: int,
        duplicates: int, threads: int, layout: str) -> None:
    folder = tmp_path_factory.mktemp("blocks")
    rng = random.Random(len(sizes) * 7919 + block_size)
    contents = [source_like(rng, size) if size % 3 else rng.randbytes(size) for size in sizes]
    contents += contents[:duplicates]  # the same content twice in one put: one object
    contents += [source_like(rng, 3000) for _ in range(12)]  # enough for a block or two
    paths = write_files(folder / "tree", contents)
    options = StoreOptions(block_size=block_size, layout=layout)  # type: ignore[arg-type]
    store = ObjectStore.init(str(folder / "store"), options)
    results = put_all(store, paths, threads=threads)
    members = [r.oid for r in results if codec_of(store, r.oid) == codec.CODEC_BLOCK]
    assert members  # at least the tail of source-like files went into a block
    for result, data in zip(results, contents):
        assert result.oid == hash_bytes(data) and result.size == len(data)
    store.close()
    reopened = ObjectStore.open(str(folder / "store"), options)  # nothing cached
    for oid in members:  # every member's bytes, cut from its block, hash to its id
        block, offset, length = codec.member_header(reopened.backend.get(oid), oid)
        content = reopened.get_bytes(block)
        assert hash_bytes(content[offset:offset + length]) == oid
    for result, data in zip(results, contents):
        assert reopened.get_bytes(result.oid) == data
        assert reopened.verify(result.oid) == len(data)
    assert check_store(reopened, [tree_of(reopened, [r.oid for r in results])],
                       full=True).ok
    reopened.close()


def test_a_format_2_store_is_raised_to_3_by_its_first_block_and_older_ckpt_refuses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store"
    ObjectStore.init(str(path)).close()
    (path / FORMAT_FILE).write_text("ckpt-objstore 2\n")  # as the ckpt before blocks made it
    store = ObjectStore.open(str(path))
    few = write_files(tmp_path / "few", many_small(8, 3, 200, 900))
    put_all(store, few)  # stored one by one: no block, the format stays
    assert (path / FORMAT_FILE).read_text() == "ckpt-objstore 2\n"
    put_all(store, write_files(tmp_path / "many", many_small(9, 40)))
    assert (path / FORMAT_FILE).read_text() == "ckpt-objstore 3\n"
    store.close()
    # A ckpt that reads formats 1 and 2 only refuses the store instead of calling its
    # members corrupt.
    monkeypatch.setattr(store_module, "READABLE_FORMATS", (1, 2))
    with pytest.raises(UnsupportedFormat):
        ObjectStore.open(str(path))


def test_blocks_hold_members_in_path_order(tmp_path: Path) -> None:
    contents = many_small(1, 40)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=32 << 10))
    results = put_all(store, paths)
    blocks: dict[ObjectId, list[tuple[int, int]]] = {}
    members = [r for r in results if codec_of(store, r.oid) == codec.CODEC_BLOCK]
    tail = results[len(members):]  # a short tail one by one
    assert members == results[:len(members)] and sum(r.size for r in tail) < MIN_BLOCK_BYTES
    for result in members:
        block, offset, length = codec.member_header(store.backend.get(result.oid))
        blocks.setdefault(block, []).append((offset, length))
    assert len(blocks) >= 2
    for block, spans in blocks.items():
        content = store.get_bytes(block)  # an ordinary blob, zstd at the block level
        assert codec_of(store, block) == codec.CODEC_ZSTD
        assert spans[0][0] == 0 and sum(length for _, length in spans) == len(content)
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(spans))
    # What the results say was written adds up to what the store holds for them.
    stored = sum(r.stored_bytes for r in results)
    held = sum(store.backend.stat(oid).size for oid in blocks) + sum(
        store.backend.stat(r.oid).size for r in results)
    assert abs(stored - held) <= len(results)
    store.close()


def test_a_small_put_stores_objects_one_by_one_as_without_blocks(tmp_path: Path) -> None:
    contents = many_small(2, MIN_BLOCK_MEMBERS - 1, 200, 900)
    assert sum(map(len, contents)) < MIN_BLOCK_BYTES
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"))
    results = put_all(store, paths)
    assert codec.CODEC_BLOCK not in {codec_of(store, r.oid) for r in results}
    store.close()


def test_blocks_off_stores_every_file_as_put_file_does(tmp_path: Path) -> None:
    contents = many_small(3, 200)
    paths = write_files(tmp_path / "tree", contents)
    off = StoreOptions(block_size=0, dictionaries=False)
    batch = ObjectStore.init(str(tmp_path / "batch"), off)
    single = ObjectStore.init(str(tmp_path / "single"), off)
    results = put_all(batch, paths)
    for result, path in zip(results, paths):
        assert single.put_file(path).oid == result.oid
        assert batch.backend.get(result.oid) == single.backend.get(result.oid)
        assert codec_of(batch, result.oid) != codec.CODEC_BLOCK
    assert set(batch.backend.iter_ids()) == set(single.backend.iter_ids())
    batch.close()
    single.close()


def test_large_files_and_files_with_a_delta_hint_stay_out_of_blocks(tmp_path: Path) -> None:
    rng = random.Random(4)
    contents = [*many_small(4, 60), source_like(rng, SMALL_LIMIT + 1000)]
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"))
    first = put_all(store, paths)
    assert codec_of(store, first[-1].oid) != codec.CODEC_BLOCK
    # The same paths edited, each given its previous version as a hint: deltas on members.
    edited = [data[:100] + b"edited" + data[100:] for data in contents]
    paths = write_files(tmp_path / "tree", edited)
    bases = [r.oid for r in first]
    second = list(store.put_files(paths, threads=2, bases=bases))
    store.sync()
    kinds = {codec_of(store, r.oid) for r in second}  # type: ignore[union-attr]
    assert codec.CODEC_BLOCK not in kinds and codec.CODEC_DELTA in kinds
    store.forget_cached()
    for result, data in zip(second, edited):
        assert store.get_bytes(result.oid) == data  # type: ignore[union-attr]
    store.close()


# -- damage ----------------------------------------------------------------------------------


def _damaged_block_store(tmp_path: Path
                         ) -> tuple[Path, ObjectId, list[ObjectId], ObjectId, list[bytes]]:
    """(store, its one damaged block, the members, their tree, their contents), the block's
    stored bytes flipped in the middle on disk."""
    path = tmp_path / "store"
    contents = many_small(5, 30)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(path), StoreOptions(block_size=1 << 20))
    members = [r.oid for r in put_all(store, paths)]
    blocks = {block_of(store, oid) for oid in members}
    assert len(blocks) == 1
    tree = tree_of(store, members)
    store.sync()
    store.close()
    block = blocks.pop()
    where, offset, length = h.object_file(str(path), block)
    h.flip_byte(where, offset + length // 2)
    return path, block, members, tree, contents


def test_a_damaged_block_is_a_corrupt_member_and_fsck_names_the_block(tmp_path: Path) -> None:
    path, block, members, tree, contents = _damaged_block_store(tmp_path)
    store = ObjectStore.open(str(path))
    # A member before the damage may still read (its prefix of the block decodes and its
    # hash verifies); one past it is corrupt, named for itself; none reads wrong bytes.
    failed = []
    for oid, data in zip(members, contents):
        store.forget_cached()
        try:
            assert store.get_bytes(oid) == data
        except CorruptObject as exc:
            assert exc.oid == oid
            failed.append(oid)
    assert failed  # the member whose bytes the flip hit, at least
    full = check_store(store, [tree], full=True)
    named = {damage.oid for damage in full.problems}
    assert block in named and set(failed) <= named
    assert tree in full.damaged_roots
    store.close()


def _count_reads(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> list[ObjectId]:
    """The ids `store`'s backend reads from now on, in order."""
    reads: list[ObjectId] = []
    get = store.backend.get

    def counted(oid: ObjectId) -> bytes:
        reads.append(oid)
        return get(oid)

    monkeypatch.setattr(store.backend, "get", counted)
    return reads


def test_get_many_reads_each_block_once_ahead_and_gives_contents_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    contents = many_small(7, 300)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=32 << 10))
    members = [r.oid for r in put_all(store, paths)]
    blocks = {block_of(store, oid) for oid in members if codec_of(store, oid) == codec.CODEC_BLOCK}
    assert len(blocks) > 10
    big = store.put_bytes(random.Random(1).randbytes(300_000))  # plain zstd, no block
    envelopes = {oid: store.backend.get(oid) for oid in members[::2]}  # a fetch's, in hand
    store.forget_cached()
    reads = _count_reads(store, monkeypatch)
    items = [(oid, envelopes.get(oid)) for oid in members] + [(big, None)]
    got = list(store.get_many(items))
    assert got == [*contents, store.get_bytes(big)]
    assert sorted(oid for oid in reads if oid in blocks) == sorted(blocks)  # each block once
    assert not set(envelopes) & set(reads)  # an envelope in hand is not read again
    # As slices: the same bytes, a block's members all in one buffer (its content, not copies).
    slices = list(store.get_many_slices(items))
    assert [bytes(memoryview(data)[start:start + length]) for data, start, length in slices
            ] == got
    buffers = {block_of(store, oid): data for oid, (data, _, _) in zip(members, slices)
               if codec_of(store, oid) == codec.CODEC_BLOCK}
    assert all(len(data) == len(store.get_bytes(block)) for block, data in buffers.items())
    # A block loaded for an earlier call, still in the cache, is not read again.
    reads.clear()
    assert list(store.get_many((oid, None) for oid in members[1::2])) == contents[1::2]
    assert not set(reads) & blocks
    # Stopped early, the read ahead ends its thread; nothing is read wrong on the next call.
    early = store.get_many((oid, None) for oid in members)
    assert next(early) == contents[0]
    early.close()
    assert list(store.get_many([(members[-1], None)])) == [contents[-1]]


def test_a_held_block_is_read_from_memory_once_then_from_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks a fetch has just stored (`hold_blocks`) serve the first read of their members
    without a read of the store; once taken, or past the bound (oldest first), a block is
    read from the store again, with the same contents."""
    contents = many_small(8, 300)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=32 << 10))
    members = [r.oid for r in put_all(store, paths)]
    blocks = list(dict.fromkeys(block_of(store, oid) for oid in members
                                if codec_of(store, oid) == codec.CODEC_BLOCK))
    assert len(blocks) > 3
    envelopes = [(block, store.backend.get(block)) for block in blocks]
    store.forget_cached()
    reads = _count_reads(store, monkeypatch)
    store.hold_blocks(envelopes)
    assert list(store.get_many((oid, None) for oid in members)) == contents
    assert not set(reads) & set(blocks)  # every block from memory
    store.forget_cached()
    assert list(store.get_many((oid, None) for oid in members)) == contents
    assert sorted(oid for oid in reads if oid in blocks) == sorted(blocks)  # taken: read now
    cache = store_module.blocks.BlockCache(held_limit=2 * max(len(e) for _, e in envelopes))
    cache.hold(envelopes)
    held = [block for block, _ in envelopes if cache.take(block) is not None]
    assert held == blocks[len(blocks) - len(held):] and 1 <= len(held) <= 2  # the newest
    assert all(cache.take(block) is None for block in blocks)


def test_get_many_decodes_other_envelopes_ahead_on_threads_and_raises_in_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ObjectStore.init(str(tmp_path / "store"))
    rng = random.Random(2)
    larger = [store.put_bytes(source_like(rng, 300_000)) for _ in range(8)]  # one frame each
    contents = [store.get_bytes(oid) for oid in larger]
    caller = threading.current_thread()
    threads: list[threading.Thread] = []
    decode = store._decode

    def noted(oid: ObjectId, stored: bytes) -> bytes:
        threads.append(threading.current_thread())
        return decode(oid, stored)

    monkeypatch.setattr(store, "_decode", noted)
    assert list(store.get_many((oid, None) for oid in larger)) == contents
    assert len(threads) == len(larger) and caller not in threads
    # A damaged envelope (one in hand, as a fetch's): the contents before it come right, and
    # its own read raises when its turn comes, naming it.
    damaged = bytearray(store.backend.get(larger[3]))
    damaged[len(damaged) // 2] ^= 0xFF
    items = [(oid, None) for oid in larger]
    items[3] = (larger[3], bytes(damaged))
    got: list[bytes] = []
    with pytest.raises(CorruptObject) as caught:
        got.extend(store.get_many(items))
    assert got == contents[:3] and caught.value.oid == larger[3]
    store.close()


def test_get_many_names_the_member_of_a_damaged_block(tmp_path: Path) -> None:
    path, block, members, _, contents = _damaged_block_store(tmp_path)
    store = ObjectStore.open(str(path))
    with pytest.raises(CorruptObject) as caught:
        for oid, content in zip(members, store.get_many((oid, None) for oid in members),
                                strict=True):
            assert content == contents[members.index(oid)]  # never wrong bytes
    assert caught.value.oid in members and block.hex() in str(caught.value)
    store.forget_cached()
    with pytest.raises(CorruptObject) as caught:
        for oid, (data, start, length) in zip(
                members, store.get_many_slices((oid, None) for oid in members), strict=True):
            assert data[start:start + length] == contents[members.index(oid)]
    assert caught.value.oid in members and block.hex() in str(caught.value)
    store.close()


@given(offset=st.integers(0, 1 << 40), length=st.integers(0, 1 << 30),
       cut=st.integers(0, 12), extra=st.binary(max_size=3))
@settings(max_examples=200, deadline=None)
@seed(4242)
def test_a_member_envelope_reads_back_and_a_damaged_one_is_refused(
        offset: int, length: int, cut: int, extra: bytes) -> None:
    block = ObjectId(bytes(range(32)))
    envelope = codec.member_envelope(length, block, offset)
    assert codec.member_header(envelope) == (block, offset, length)
    damaged = envelope[:len(envelope) - cut] + extra if cut or extra else envelope + b"\x00"
    with pytest.raises(CorruptObject):
        codec.member_header(damaged)


def python_member(stored: bytes) -> tuple[ObjectId, int, int] | None:
    """What codec.py's Python loop alone makes of a member envelope (None: it refuses it)."""
    native, codec._native_member = codec._native_member, None
    try:
        return codec.member_header(stored)
    except CorruptObject:
        return None
    finally:
        codec._native_member = native


@pytest.mark.skipif(codec._native_member is None,
                    reason="objstore._codec is not built (or CKPT_NATIVE=0)")
@given(offset=st.integers(0, (1 << 64) - 1), length=st.integers(0, (1 << 64) - 1),
       how=st.sampled_from(["flip", "truncate", "extend", "insert"]),
       index=st.integers(0, 80), extra=st.binary(min_size=1, max_size=11))
@settings(max_examples=300, deadline=None)
@seed(4243)
def test_the_native_member_decoder_agrees_with_python(
        offset: int, length: int, how: str, index: int, extra: bytes) -> None:
    block = ObjectId(bytes(range(32)))
    envelope = codec.member_envelope(length, block, offset)
    assert codec._native_member(envelope) == (block, offset, length) == python_member(envelope)
    at = index % len(envelope)
    damaged = {"flip": envelope[:at] + bytes([envelope[at] ^ (extra[0] or 1)]) + envelope[at + 1:],
               "truncate": envelope[:at], "extend": envelope + extra,
               "insert": envelope[:at] + extra + envelope[at:]}[how]
    got = codec._native_member(damaged)
    if len(damaged) < 5 or damaged[4] != codec.CODEC_BLOCK:
        assert got is None and codec.member_place(damaged) is None
    else:  # the same place as Python's, or None where Python refuses it or goes past 64 bits
        assert got is None or got == python_member(damaged)
        expected = python_member(damaged)
        assert got is not None or expected is None or max(expected[1:]) >= 1 << 64
        assert codec.member_place(damaged) == got


@pytest.mark.skipif(codec._native_member is None,
                    reason="objstore._codec is not built (or CKPT_NATIVE=0)")
def test_the_native_member_decoder_leaves_a_varint_past_64_bits_to_python() -> None:
    block = ObjectId(bytes(32))
    header = codec.member_envelope(5, block, 0)[:codec.HEADER_SIZE + 32]
    widest = b"\xff" * 9 + b"\x01"  # 2**64 - 1: ten bytes, the last holds bit 63
    assert codec._native_member(header + widest + b"\x05") == (block, (1 << 64) - 1, 5)
    past = b"\x80" * 9 + b"\x02"  # 2**64
    assert codec._native_member(header + past + b"\x05") is None
    assert python_member(header + past + b"\x05") == (block, 1 << 64, 5)
    assert codec._native_member(header + b"\x80" * 10 + b"\x00\x05") is None
    assert python_member(header + b"\x80" * 10 + b"\x00\x05") is None


# -- gc --------------------------------------------------------------------------------------


def test_gc_keeps_a_block_while_one_member_is_live_and_drops_it_after(tmp_path: Path) -> None:
    contents = many_small(6, 30)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=1 << 20))
    members = [r.oid for r in put_all(store, paths)]
    block = block_of(store, members[0])
    one = tree_of(store, [members[7]])
    store.sync()
    report = collect_garbage(store, [one], grace_seconds=0, now=2**40)
    assert report.objects_removed == len(members) - 1
    assert store.has(block) and store.has(members[7]) and not store.has(members[0])
    store.forget_cached()
    assert store.get_bytes(members[7]) == contents[7]
    report = collect_garbage(store, [], grace_seconds=0, now=2**40)
    assert not store.has(block) and not store.has(members[7])
    assert not list(store.backend.iter_ids())
    store.close()


def test_a_young_member_keeps_its_old_block(tmp_path: Path) -> None:
    contents = many_small(7, 30)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=1 << 20,
                                                                  layout="loose"))
    members = [r.oid for r in put_all(store, paths)]
    block = block_of(store, members[0])
    store.sync()
    # Everything unreachable, the grace period long: nothing goes, the block included.
    collect_garbage(store, [], grace_seconds=3600, now=time.time())
    assert store.has(block) and all(store.has(oid) for oid in members)
    store.close()


def test_get_many_out_of_block_order_decompresses_on_its_threads_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Members that come back to a block the cache has dropped (a fetch's members pushed apart
    from their block) reuse the read ahead's load: the caller's thread decompresses nothing,
    and `verify=False` gives the same bytes unhashed."""
    contents = many_small(8, 300)
    paths = write_files(tmp_path / "tree", contents)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=32 << 10))
    members = [r.oid for r in put_all(store, paths)]
    assert len({block_of(store, oid) for oid in members
                if codec_of(store, oid) == codec.CODEC_BLOCK}) > 4
    order = list(range(len(members)))
    random.Random(8).shuffle(order)
    store.forget_cached()
    monkeypatch.setattr(store, "_blocks", store_module.blocks.BlockCache(40 << 10))
    caller = threading.current_thread()
    on_caller: list[ObjectId] = []
    content_of = store_module.blocks._content

    def noted(backend: object, block: ObjectId, *args: object, **kwargs: object) -> bytes:
        if threading.current_thread() is caller:
            on_caller.append(block)
        return content_of(backend, block, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module.blocks, "_content", noted)
    got = list(store.get_many([(members[i], None) for i in order], verify=False))
    assert got == [contents[i] for i in order]
    assert on_caller == []
    sliced = store.get_many_slices([(members[i], None) for i in order])
    assert [data[start:start + length] for data, start, length in sliced] == got
    assert on_caller == []
