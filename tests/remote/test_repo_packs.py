"""Pure parts of the remote layer, property-tested without a server: remote packs are local
packs (the local scanner reads them back), ranged-read plans cover every record once, session
names encode to distinct safe keys, config and lock files round-trip."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from soak import scale

from ckpt.objstore import CorruptObject, codec, hash_bytes
from ckpt.objstore.packfile import (
    RECORD,
    decode_index,
    encode_index,
    open_pack,
    record_crc,
    scan_pack,
)
from ckpt.objstore.remote import layout, packs
from ckpt.objstore.remote import repo as repo_module
from ckpt.objstore.remote.locks import decode_lock, encode_lock
from ckpt.objstore.remote.packs import PackBuilder, iter_records, plan_spans
from ckpt.objstore.remote.repo import head_name

EXAMPLES = scale(60, 600)
contents = st.lists(st.binary(max_size=3000), min_size=1, max_size=40, unique=True)


@seed(25)
@settings(max_examples=EXAMPLES, deadline=None)
@given(contents)
def test_a_remote_pack_is_a_local_pack_its_index_names_every_record(
        tmp_path_factory: pytest.TempPathFactory, items: list[bytes]) -> None:
    builder = PackBuilder()
    for item in items:
        builder.append(hash_bytes(item), item, ())
    packid, data = builder.finish()
    assert packid == hash_bytes(data).hex()
    assert builder.size == 0 and len(builder) == len(items)  # its buffer let go, entries kept
    path = os.path.join(str(tmp_path_factory.mktemp("pack")), "p.pack")
    Path(path).write_bytes(data)
    fd = open_pack(path)
    try:
        scanned, end = scan_pack(fd)
    finally:
        os.close(fd)
    assert (sorted(scanned), end) == (sorted(builder.entries), len(data))
    oids, _locations, size = decode_index(encode_index(builder.entries, len(data)))
    assert size == len(data) and len(oids) == 32 * len(items)


@seed(25)
@settings(max_examples=EXAMPLES, deadline=None)
@given(contents, st.integers(0, 5000), st.integers(1, 20000), st.data())
def test_planned_ranges_cover_each_wanted_record_once(items: list[bytes], gap: int,
                                                      max_range: int, data: st.DataObject
                                                      ) -> None:
    builder = PackBuilder()
    for item in items:
        builder.append(hash_bytes(item), item, ())
    _, pack = builder.finish()
    wanted = data.draw(st.lists(st.sampled_from(builder.entries), unique=True, min_size=1))
    spans = plan_spans(wanted, gap=gap, max_range=max_range)
    records = [record for span in spans
               for record in iter_records("k", span, pack[span.start:span.start + span.length])]
    assert sorted((oid, stored) for oid, stored, _ in records) == sorted(
        (oid, pack[off:off + n]) for oid, off, n in wanted)
    assert all(crc == record_crc(oid, stored) for oid, stored, crc in records)
    starts = [s.start for s in spans]
    assert starts == sorted(starts)
    for a, b in itertools.pairwise(spans):
        assert a.start + a.length <= b.start  # disjoint
    for span in spans:
        assert all(span.start <= off - RECORD.size and off + n <= span.start + span.length
                   for _, off, n in span.entries)


def _envelope(codec_id: int, body: bytes, ref: bytes) -> bytes:
    named = ref if codec_id >= codec.CODEC_DICT else b""
    return codec._HEADER.pack(codec.MAGIC, codec.FORMAT, codec_id, len(body)) + named + body


envelopes = st.lists(st.builds(_envelope, st.integers(0, 4), st.binary(max_size=300),
                               st.binary(min_size=32, max_size=32)),
                     min_size=1, max_size=30, unique=True)


@pytest.mark.skipif(packs._native_scan is None, reason="objstore._records is not built")
@seed(25)
@settings(max_examples=EXAMPLES, deadline=None)
@given(envelopes, st.data())
def test_the_native_scan_agrees_with_the_python_checks(items: list[bytes],
                                                       data: st.DataObject) -> None:
    """On intact spans and on spans with a byte changed, cut short or an envelope header made
    foreign, the native scan gives what the Python loop gives, or the index of the record
    that the Python loop refuses first."""
    builder = PackBuilder()
    for item in items:
        builder.append(hash_bytes(item), item, ())
    _, pack = builder.finish()
    wanted = data.draw(st.lists(st.sampled_from(builder.entries), unique=True, min_size=1))
    span = plan_spans(wanted)[0]
    part = bytearray(pack[span.start:span.start + span.length])
    damage = data.draw(st.sampled_from(["none", "flip", "cut", "codec", "magic"]))
    if damage == "flip":
        part[data.draw(st.integers(0, len(part) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del part[data.draw(st.integers(0, len(part) - 1)):]
    elif damage in ("codec", "magic"):
        _, offset, _ = data.draw(st.sampled_from(span.entries))
        at = offset - span.start
        if damage == "codec":
            part[at + 4] = data.draw(st.integers(5, 255))
        else:
            part[at] ^= 0x20
    native = packs._native_scan(bytes(part), span.start, span.entries)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packs, "_native_scan", None)
        try:
            expected: list[packs.Record] | CorruptObject = packs.checked_records(
                "k", span, bytes(part))
        except CorruptObject as exc:
            expected = exc
    if isinstance(expected, CorruptObject):
        assert isinstance(native, int) and expected.oid == span.entries[native][0]
    else:
        assert native == expected
    if damage in ("codec", "magic"):
        assert isinstance(expected, CorruptObject)


@seed(25)
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=2, max_size=20, unique=True))
def test_session_names_encode_to_distinct_safe_keys(names: list[str]) -> None:
    encoded = []
    for name in names:
        try:
            encoded.append(head_name(name))
        except ValueError:
            continue  # too long once encoded: refused, never truncated into a clash
    assert len(set(encoded)) == len(encoded)
    assert all(layout.check_name(e, "head") == e for e in encoded)


def test_config_and_lock_files_round_trip_and_foreign_ones_are_refused() -> None:
    assert layout.decode_config(layout.encode_config("ab" * 8, 123)) == ("ab" * 8, 123)
    assert layout.decode_config(b"ckpt-remote 2\n") is None
    assert layout.decode_config(layout.CONFIG_MAGIC + b"\xc1") is None
    lock = decode_lock("locks/x", encode_lock("shared", "host", 7, 5.5))
    assert lock is not None and (lock.kind, lock.host, lock.pid, lock.time) == (
        "shared", "host", 7, 5.5)
    assert decode_lock("locks/y", b"junk") is None


@seed(26)
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=60), st.integers(1, 5000),
       st.integers(1, 5000), st.randoms(use_true_random=False))
def test_a_fetch_cuts_a_pack_into_parts_of_its_sizes_in_pack_order(
        lengths: list[int], first: int, size: int, rng: random.Random) -> None:
    """Every entry once, in offset order; a part ends with the entry that takes it to its
    size (`first` for the first part, FETCH_PART after it) and not before."""
    offsets = list(itertools.accumulate([8, *lengths]))[:-1]
    entries = [(bytes([n % 256]) * 32, offset, length)
               for n, (offset, length) in enumerate(zip(offsets, lengths))]
    rng.shuffle(entries)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(repo_module, "FETCH_PART", size)
        parts = repo_module._parts(entries, first)
    assert [e for part in parts for e in part] == sorted(entries, key=lambda e: e[1])
    for number, part in enumerate(parts):
        bound = first if number == 0 else size
        sizes = [length for _, _, length in part]
        assert all(sum(sizes[:k]) < bound for k in range(1, len(sizes)))
        if number < len(parts) - 1:
            assert sum(sizes) >= bound
