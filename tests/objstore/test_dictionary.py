"""Zstd dictionaries for small objects (codec 2): round trips, training inside put_files, the
dictionary list across re-opens, gc keeping dictionaries, fsck naming every dependent of a
damaged dictionary, format 1 raised to 2, and the pure-Python (CKPT_NATIVE=0) path."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.objstore import CorruptObject, ObjectStore, StoreOptions, Tree, TreeEntry, codec
from ckpt.objstore.dictionary import (
    COUNTERS_FILE,
    DICTIONARIES_FILE,
    DRIFT_MARGIN,
    SMALL_BOUND,
    TRAIN_SAMPLES,
    WINDOW,
    Counters,
    DictionaryBook,
    DictionaryInfo,
    train,
)
from ckpt.objstore.fsck import check_store
from ckpt.objstore.gc import collect_garbage
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.memory import MemoryBackend
from ckpt.objstore.objects import EntryKind
from ckpt.objstore.store import FORMAT_FILE, FORMAT_VERSION

_WORDS = [b"static", b"int", b"struct", b"return", b"void", b"const", b"unsigned", b"if",
          b"else", b"for", b"while", b"#include", b"<linux/kernel.h>", b"device", b"driver",
          b"(", b")", b"{", b"}", b";", b"->", b"=", b"NULL", b"0x", b"u32", b"dev", b"err"]


def source_like(rng: random.Random, size: int) -> bytes:
    """Text that shares its vocabulary with every other call's: what a dictionary learns."""
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + b"\n"
    return bytes(out[:size])


def samples(seed: int, count: int = 400) -> list[bytes]:
    rng = random.Random(seed)
    return [source_like(rng, rng.randint(200, 4000)) for _ in range(count)]


def codec_of(store: ObjectStore, oid: ObjectId) -> int:
    return store.backend.get(oid)[4]


def trained_store(path: Path, **options: object) -> ObjectStore:
    store = ObjectStore.init(str(path), StoreOptions(**options))  # type: ignore[arg-type]
    store.train_dictionary(samples(1))
    return store


def write_files(directory: Path, contents: list[bytes]) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, data in enumerate(contents):
        path = directory / f"f{index:05}.c"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


# -- round trips ------------------------------------------------------------------------------


def test_small_objects_round_trip_through_the_dictionary(tmp_path: Path) -> None:
    store = trained_store(tmp_path / "store")
    dictionary = store.current_dictionary
    assert dictionary is not None
    rng = random.Random(2)
    small = source_like(rng, 3000)
    oid = store.put_bytes(small)
    stored = store.backend.get(oid)
    assert stored[4] == codec.CODEC_DICT
    assert codec.envelope_refs(stored) == (dictionary,)
    assert store.get_bytes(oid) == small
    # The dictionary pays: smaller than the same content without it.
    assert len(stored) < len(codec.encode_object(small, store.options.compression_level))
    large = source_like(rng, SMALL_BOUND + 1)
    large_oid = store.put_bytes(large)
    assert codec_of(store, large_oid) == codec.CODEC_ZSTD
    assert store.get_bytes(large_oid) == large
    tree = Tree((TreeEntry(b"a.c", EntryKind.FILE, oid, None, len(small)),))
    tree_oid = store.put_tree(tree)
    store.forget_cached()
    assert store.get_tree(tree_oid) == tree
    assert store.verify(oid) == len(small)
    store.close()


def test_a_dictionary_object_needs_its_store_to_decode(tmp_path: Path) -> None:
    store = trained_store(tmp_path / "store")
    oid = store.put_bytes(samples(3, 1)[0])
    with pytest.raises(CorruptObject, match="needs its dictionary"):
        codec.decode_object(store.backend.get(oid), oid)
    store.close()


def test_a_dictionary_that_names_a_dictionary_is_corrupt_not_a_recursion() -> None:
    store = ObjectStore(MemoryBackend(), StoreOptions())
    real = store.train_dictionary(samples(23))
    data = samples(24, 1)[0]
    fake = hash_bytes(data)
    looped = bytearray(codec.encode_with_dictionary(
        data, 1, (real, codec.load_dictionary(store.get_bytes(real)))))
    looped[codec.HEADER_SIZE:codec.HEADER_SIZE + 32] = fake  # names itself
    store.backend.put(fake, bytes(looped))
    with pytest.raises(CorruptObject, match="needs its dictionary"):
        store.dictionary(fake)
    with pytest.raises(CorruptObject) as raised:
        store.get_bytes(fake)
    assert raised.value.oid == fake


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(st.binary(min_size=0, max_size=3000)
                         | st.builds(source_like, st.randoms(use_true_random=False),
                                     st.integers(0, 5000)), min_size=1, max_size=8))
def test_random_small_contents_round_trip(contents: list[bytes]) -> None:
    store = ObjectStore(MemoryBackend(), StoreOptions(compression_level=3))
    store.train_dictionary(samples(4, 200))
    for data in contents:
        oid = store.put_bytes(data)
        assert oid == hash_bytes(data)
        assert store.get_bytes(oid) == data
        assert codec_of(store, oid) in (codec.CODEC_RAW, codec.CODEC_DICT)


# -- training inside put_files ----------------------------------------------------------------


def test_put_files_trains_on_a_large_first_put_and_a_reopened_store_reads(
    tmp_path: Path
) -> None:
    rng = random.Random(5)
    contents = [source_like(rng, rng.randint(100, 3000)) + b"%d" % i
                for i in range(TRAIN_SAMPLES + 600)]
    paths = write_files(tmp_path / "tree", contents)
    # Blocks off: the small files are objects of their own, compressed with the dictionary.
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=0))
    results = list(store.put_files(paths, threads=2))
    store.sync()
    dictionary = store.current_dictionary
    assert dictionary is not None
    codecs = [codec_of(store, r.oid) for r in results]  # type: ignore[union-attr]
    # Those put before the training stay plain; the ones after use the dictionary.
    assert codec.CODEC_DICT not in codecs[:TRAIN_SAMPLES - 1]
    assert codecs[-500:].count(codec.CODEC_DICT) >= 450
    assert store.dictionary_ids() == (dictionary,)  # one kind of content: no drift
    assert store.dictionary_savings() > 0
    store.close()
    with open(tmp_path / "store" / FORMAT_FILE, "rb") as stream:
        assert stream.read() == b"ckpt-objstore %d\n" % FORMAT_VERSION
    reopened = ObjectStore.open(str(tmp_path / "store"))
    assert reopened.current_dictionary == dictionary
    assert reopened.dictionary_ids() == (dictionary,)
    for path, result in zip(paths, results):
        assert reopened.get_bytes(result.oid) == Path(path).read_bytes()  # type: ignore[union-attr]
    reopened.close()
    # Turned off: new puts leave the dictionary alone, and what it made still reads.
    off = ObjectStore.open(str(tmp_path / "store"), StoreOptions(dictionaries=False))
    assert off.current_dictionary is None
    new = off.put_bytes(source_like(rng, 2000))
    assert codec_of(off, new) == codec.CODEC_ZSTD
    assert off.get_bytes(results[-1].oid) == contents[-1]  # type: ignore[union-attr]
    off.close()


def test_a_small_put_files_call_trains_nothing(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "tree", samples(6, 50))
    store = ObjectStore.init(str(tmp_path / "store"))
    list(store.put_files(paths))
    store.sync()
    assert store.current_dictionary is None
    assert not (tmp_path / "store" / DICTIONARIES_FILE).exists()
    store.close()


def test_the_native_less_path_trains_and_reads(tmp_path: Path) -> None:
    rng = random.Random(7)
    paths = write_files(tmp_path / "tree", [source_like(rng, rng.randint(100, 2000)) + b"%d" % i
                                            for i in range(TRAIN_SAMPLES + 100)])
    script = tmp_path / "put.py"
    script.write_text(
        "import sys\n"
        "from ckpt.objstore import ObjectStore, codec\n"
        "from ckpt.objstore import putfiles\n"
        "assert putfiles._native_read_files is None\n"
        "from ckpt.objstore import StoreOptions\n"
        "store = ObjectStore.init(sys.argv[1], StoreOptions(block_size=0))\n"
        "paths = open(sys.argv[2]).read().split('\\n')\n"
        "results = list(store.put_files(paths))\n"
        "store.sync()\n"
        "assert store.current_dictionary is not None\n"
        "assert store.backend.get(results[-1].oid)[4] == codec.CODEC_DICT\n"
        "for path, r in zip(paths, results):\n"
        "    assert store.get_bytes(r.oid) == open(path, 'rb').read()\n"
        "print('ok')\n"
    )
    listed = tmp_path / "paths"
    listed.write_text("\n".join(paths))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(listed)],
                          env=h.env({"CKPT_NATIVE": "0"}), capture_output=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.strip() == b"ok"


# -- format ------------------------------------------------------------------------------------


def test_a_format_1_store_is_raised_to_2_by_its_first_dictionary(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ObjectStore.init(str(root)).close()
    (root / FORMAT_FILE).write_bytes(b"ckpt-objstore 1\n")
    store = ObjectStore.open(str(root))
    plain = store.put_bytes(samples(8, 1)[0])
    assert (root / FORMAT_FILE).read_bytes() == b"ckpt-objstore 1\n"
    store.train_dictionary(samples(9))
    assert (root / FORMAT_FILE).read_bytes() == b"ckpt-objstore 2\n"
    small = store.put_bytes(samples(10, 1)[0])
    assert codec_of(store, small) == codec.CODEC_DICT
    assert store.get_bytes(plain) == samples(8, 1)[0]
    store.close()


# -- gc and fsck --------------------------------------------------------------------------------


def test_gc_keeps_every_listed_dictionary(tmp_path: Path) -> None:
    store = trained_store(tmp_path / "store")
    first = store.current_dictionary
    assert first is not None
    second = store.train_dictionary(samples(11))
    assert second != first and store.dictionary_ids() == (first, second)
    blob = store.put_bytes(samples(12, 1)[0])
    tree = store.put_tree(Tree((TreeEntry(b"a", EntryKind.FILE, blob, None, 1),)))
    garbage = store.put_bytes(samples(13, 1)[0])
    store.sync()
    report = collect_garbage(store, [tree], grace_seconds=0, now=2**40)
    assert report.objects_removed == 1
    assert not store.has(garbage)
    assert store.has(first) and store.has(second)
    store.forget_cached()
    assert store.get_bytes(blob) == samples(12, 1)[0]
    store.close()


def _damaged_dictionary_store(tmp_path: Path) -> tuple[Path, ObjectId, list[ObjectId], ObjectId]:
    """A loose store whose dictionary is damaged on disk: (store, dictionary, the blobs that
    name it, the tree of them)."""
    path = tmp_path / "store"
    store = trained_store(path, layout="loose")
    dictionary = store.current_dictionary
    assert dictionary is not None
    blobs = [store.put_bytes(data) for data in samples(14, 5)]
    assert all(codec_of(store, oid) == codec.CODEC_DICT for oid in blobs)
    tree = store.put_tree(Tree(tuple(TreeEntry(b"f%d" % i, EntryKind.FILE, oid, None, 1)
                                     for i, oid in enumerate(blobs))))
    store.sync()
    store.close()
    where, offset, length = h.object_file(str(path), dictionary)
    h.flip_byte(where, offset + length // 2)
    return path, dictionary, blobs, tree


def test_fsck_reports_every_dependent_of_a_damaged_dictionary(tmp_path: Path) -> None:
    path, dictionary, blobs, tree = _damaged_dictionary_store(tmp_path)
    store = ObjectStore.open(str(path))
    full = check_store(store, [tree], full=True)
    named = {damage.oid for damage in full.problems}
    assert dictionary in named
    assert set(blobs) <= named
    for damage in full.problems:
        if damage.oid in blobs:
            assert dictionary.hex() in damage.reason
    assert full.damaged_roots == {tree}
    structural = check_store(store, [tree], full=False)
    assert dictionary in {damage.oid for damage in structural.problems}
    with pytest.raises(CorruptObject) as raised:
        store.get_bytes(blobs[0])
    assert raised.value.oid == blobs[0]
    # New puts go on without the damaged dictionary (and a large put trains a new one).
    fresh = samples(25, 1)[0]
    assert codec_of(store, store.put_bytes(fresh)) == codec.CODEC_ZSTD
    assert store.get_bytes(hash_bytes(fresh)) == fresh
    store.close()


def test_the_cli_exits_5_for_a_damaged_dictionary(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    store_dir = str(tmp_path / "store")
    write_files(root / "src", samples(15, 20))
    assert h.ckpt(str(root), "init", store=store_dir).code == 0
    assert h.ckpt(str(root), "config", "set", "block_size", "0", store=store_dir).code == 0
    set_up = ObjectStore.open(store_dir)
    dictionary = set_up.train_dictionary(samples(16))
    set_up.close()
    created = h.ckpt(str(root), "create", store=store_dir)
    assert created.code == 0, created
    stats = h.ckpt(str(root), "stats", "--json", store=store_dir).json()
    assert stats["saved_by_dictionaries"] > 0
    where, offset, length = h.object_file(store_dir, dictionary)
    h.flip_byte(where, offset + length // 2)
    checked = h.ckpt(str(root), "fsck", "--full", "--json", store=store_dir)
    assert checked.code == 5, checked
    damaged = {p["oid"] for p in checked.json()["problems"]}
    assert dictionary.hex() in damaged
    assert len(damaged) >= 1 + 20  # the dictionary and every file compressed with it


# -- the list and drift ----------------------------------------------------------------------------


def test_the_dictionary_list_file_is_refused_when_damaged(tmp_path: Path) -> None:
    store = trained_store(tmp_path / "store")
    store.close()
    (tmp_path / "store" / DICTIONARIES_FILE).write_bytes(b"{not json")
    reopened = ObjectStore.open(str(tmp_path / "store"))
    with pytest.raises(CorruptObject, match="dictionary list"):
        collect_garbage(reopened, [], grace_seconds=0, now=2**40)
    reopened.close()


def test_the_list_file_round_trips() -> None:
    book = DictionaryBook((DictionaryInfo(hash_bytes(b"d"), 0.2),))
    assert DictionaryBook.decode(book.encode(), "here") == book
    counters = Counters(10, 30, 20, 2)
    assert Counters.decode(counters.encode()) == counters
    assert Counters.decode(b"torn") == Counters()


def test_a_candidate_that_gains_more_than_the_margin_is_drift() -> None:
    # Content of one kind, then of another: the dictionary of the first barely helps the
    # second, a dictionary trained on the second does.
    rng = random.Random(19)
    first = train(samples(20, 300), 3)
    assert first.drifted and first.gain_of_current == 0.0
    current = (hash_bytes(first.data), codec.load_dictionary(first.data))
    other_words = [bytes(rng.randbytes(6).hex(), "ascii") for _ in range(40)]
    other = [b" ".join(rng.choice(other_words) for _ in range(rng.randint(50, 600)))
             for _ in range(300)]
    moved = train(other, 3, current)
    assert moved.drifted and moved.gain > moved.gain_of_current + DRIFT_MARGIN
    same = train(samples(21, 300), 3, current)
    assert not same.drifted


def test_put_files_trains_again_when_the_content_drifts(tmp_path: Path) -> None:
    rng = random.Random(22)
    words = [bytes(rng.randbytes(5).hex(), "ascii") for _ in range(60)]
    kinds = [source_like(rng, rng.randint(300, 1500)) + b"%d" % i
             for i in range(TRAIN_SAMPLES + 100)]
    kinds += [b" ".join(rng.choice(words) for _ in range(rng.randint(60, 250))) + b"%d" % i
              for i in range(WINDOW + 1200)]
    paths = write_files(tmp_path / "tree", kinds)
    # Blocks off: the small files are objects of their own, compressed with the dictionary.
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(block_size=0))
    results = list(store.put_files(paths))
    store.sync()
    first, second = store.dictionary_ids()
    named = [codec.envelope_refs(store.backend.get(r.oid))  # type: ignore[union-attr]
             for r in results]
    assert named[TRAIN_SAMPLES + 600] == (first,)
    assert set(named[-100:]) == {(second,)}
    assert store.get_bytes(results[TRAIN_SAMPLES + 50].oid) == kinds[TRAIN_SAMPLES + 50]  # type: ignore[union-attr]
    store.close()


def test_counters_from_two_processes_add_up(tmp_path: Path) -> None:
    path = tmp_path / "store"
    trained_store(path).close()
    one = ObjectStore.open(str(path))
    two = ObjectStore.open(str(path))
    for store, seed in ((one, 17), (two, 18)):
        for data in samples(seed, 30):
            store.put_bytes(data)
    one._dictionaries.note(1000, (1500, 1000))  # what put_files counts, without 64 puts
    two._dictionaries.note(1000, (1500, 1000))
    one.sync()
    two.sync()
    counters = Counters.decode((path / COUNTERS_FILE).read_bytes())
    assert counters.checks == 2 and counters.checked_plain == 3000
    assert counters.saved > 1000  # half of what was noted, and half of what the puts wrote
    one.close()
    two.close()

