"""Trees: canonical encoding both ways, validated names, and refusal of anything non-canonical."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ckpt.objstore import CorruptObject, EntryKind, InvalidTree, Tree, TreeEntry, codec, hash_bytes
from ckpt.objstore.codec import decode_tree, encode_tree
from ckpt.objstore.objects import entry_mode

OID_A = hash_bytes(b"a")
OID_B = hash_bytes(b"b")

# -- strategies -----------------------------------------------------------------------------

# Arbitrary bytes (mostly not UTF-8) made into one valid path component.
raw_names = (
    st.binary(min_size=1, max_size=24)
    .map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"~"))
    .filter(lambda b: b not in (b".", b".."))
)
names = st.one_of(
    raw_names,
    st.text(min_size=1, max_size=12)
    .map(str.encode)
    .filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")),
    st.sampled_from([b"\xff", b"\x80abc", b"caf\xe9", b"...", b".hidden", b"\xc3\x28", b" "]),
)
oids = st.binary(min_size=32, max_size=32)
sizes = st.integers(min_value=0, max_value=(1 << 64) - 1)
targets = st.binary(min_size=1, max_size=64).map(lambda b: b.replace(b"\0", b"/"))


@st.composite
def entries(draw: st.DrawFn) -> TreeEntry:
    name = draw(names)
    kind = draw(st.sampled_from(EntryKind))
    if kind is EntryKind.SYMLINK:
        return TreeEntry(name, kind, None, draw(targets), 0)
    if kind is EntryKind.TOMBSTONE:
        return TreeEntry(name, kind)
    mode = None
    if kind.is_blob:  # any rwx bits whose owner x fits the kind, the default as None
        bits = draw(st.integers(0, 0o777)) & ~0o100 | (0o100 if kind is EntryKind.EXECUTABLE else 0)
        mode = entry_mode(kind, bits)
    return TreeEntry(name, kind, draw(oids), None, draw(sizes), mode)


trees = st.lists(entries(), unique_by=lambda entry: entry.name, max_size=16).map(Tree.build)


def mutate(data: bytes, how: str, index: int, extra: bytes) -> bytes:
    if not data:
        return extra
    index %= len(data)
    if how == "flip":  # extra[0] is never 0, so the byte really changes
        return data[:index] + bytes([data[index] ^ extra[0]]) + data[index + 1 :]
    if how == "truncate":
        return data[:index]
    if how == "extend":
        return data + extra
    if how == "insert":
        return data[:index] + extra + data[index:]
    raise ValueError(how)


mutations = st.tuples(
    st.sampled_from(["flip", "truncate", "extend", "insert"]),
    st.integers(min_value=0, max_value=1 << 16),
    st.binary(min_size=1, max_size=8).filter(lambda b: b[0] != 0),
)


# -- properties -----------------------------------------------------------------------------


@settings(deadline=None)  # timing varies on loaded CI machines
@given(trees)
@example(Tree(()))
@example(Tree.build([TreeEntry(b"\xff\xfe", EntryKind.FILE, OID_A, None, (1 << 64) - 1)]))
def test_decode_of_encode_is_identity(tree: Tree) -> None:
    assert decode_tree(encode_tree(tree)) == tree


@settings(deadline=None)  # timing varies on loaded CI machines
@given(trees)
def test_encode_of_decode_is_identity_on_canonical_bytes(tree: Tree) -> None:
    data = encode_tree(tree)
    assert encode_tree(decode_tree(data)) == data


@settings(deadline=None)  # timing varies on loaded CI machines
@given(trees)
def test_equal_trees_built_in_any_order_encode_identically(tree: Tree) -> None:
    shuffled = Tree.build(reversed(tree.entries))
    assert encode_tree(shuffled) == encode_tree(tree)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
@example(b"")
@example(b"\x92\x01\x90")  # [1, []] but as a fixarray: the canonical empty tree is this one
@example(b"\xdc\x00\x02\x01\x90")  # same, array16 header: non-canonical
@example(b"\x92\x01\x91\x94\xa1a\x01\xc4\x20" + bytes(32) + b"\x00")  # name as str type
@example(b"\x92\x01\x91\x94\xc4\x01a\x01\xc4\x20" + bytes(32) + b"\xcf" + bytes(8))  # wide int
@example(b"\xc1")
@example(b"\xd6\xff\x00")
@example(b"\x81\x92\x01\x02\x01")
def test_arbitrary_bytes_decode_as_a_tree_or_raise_corrupt_object(data: bytes) -> None:
    try:
        tree = decode_tree(data)
    except CorruptObject:
        return
    assert encode_tree(tree) == data  # whatever decodes is canonical


@settings(deadline=None, max_examples=250, suppress_health_check=[HealthCheck.too_slow])
@given(trees, mutations)
def test_mutated_tree_encodings_decode_canonically_or_raise_corrupt_object(
    tree: Tree, mutation: tuple[str, int, bytes]
) -> None:
    data = mutate(encode_tree(tree), *mutation)
    try:
        decoded = decode_tree(data, hash_bytes(data))
    except CorruptObject as exc:
        assert exc.oid == hash_bytes(data)  # the error names the object
        return
    assert encode_tree(decoded) == data


loose_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.binary(max_size=40),
    st.text(max_size=5),
    st.floats(allow_nan=False),
)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.just(1), loose_values),
    st.lists(
        st.one_of(
            st.lists(loose_values, min_size=4, max_size=4),
            st.lists(loose_values, max_size=6),
            loose_values,
        ),
        max_size=6,
    ),
)
def test_tree_shaped_msgpack_with_loose_values_decodes_or_raises_invalid_tree(
    version: object, rows: list[object]
) -> None:
    data = msgpack.packb([version, rows], use_bin_type=True)
    try:
        tree = decode_tree(data)
    except InvalidTree:
        return
    assert encode_tree(tree) == data


# -- bad input: crafted bytes ----------------------------------------------------------------


def crafted(rows: list[list[object]], version: object = 1) -> bytes:
    """Tree bytes written by hand (not by encode_tree, which would refuse the same rows)."""
    return msgpack.packb([version, rows], use_bin_type=True)


def file_row(name: bytes, oid: bytes = OID_A, size: int = 1) -> list[object]:
    return [name, int(EntryKind.FILE), oid, size]


@pytest.mark.parametrize(
    "name",
    [b"..", b".", b"a/b", b"/", b"/etc", b"a/", b"", b"a\0b", b"../../etc/passwd"],
    ids=[
        "dotdot",
        "dot",
        "slash-inside",
        "slash-only",
        "leading-slash",
        "trailing-slash",
        "empty",
        "nul",
        "traversal",
    ],
)
@pytest.mark.parametrize("kind", [EntryKind.FILE, EntryKind.TREE, EntryKind.TOMBSTONE])
def test_decode_rejects_entry_with_unsafe_name(name: bytes, kind: EntryKind) -> None:
    ref = None if kind is EntryKind.TOMBSTONE else OID_A
    data = crafted([file_row(b"a", OID_B), [name, int(kind), ref, 0]])
    oid = hash_bytes(data)
    with pytest.raises(InvalidTree) as caught:
        decode_tree(data, oid)
    assert caught.value.oid == oid
    assert oid.hex() in str(caught.value)


def test_decode_rejects_name_given_as_msgpack_str() -> None:
    data = msgpack.packb([1, [["a.txt", 1, OID_A, 1]]], use_bin_type=True)
    with pytest.raises(InvalidTree):
        decode_tree(data)


def test_decode_rejects_unsorted_entries() -> None:
    with pytest.raises(InvalidTree, match="order"):
        decode_tree(crafted([file_row(b"b"), file_row(b"a")]))


def test_decode_rejects_duplicate_entries() -> None:
    with pytest.raises(InvalidTree, match="duplicate"):
        decode_tree(crafted([file_row(b"a"), file_row(b"a", OID_B)]))


def test_decode_orders_names_by_bytes_not_by_text() -> None:
    # b"Z" < b"a" < b"\xff": byte order, which is what the encoder produces.
    ok = crafted([file_row(b"Z"), file_row(b"a"), file_row(b"\xff")])
    assert decode_tree(ok).names() == [b"Z", b"a", b"\xff"]
    with pytest.raises(InvalidTree):
        decode_tree(crafted([file_row(b"a"), file_row(b"Z")]))


@pytest.mark.parametrize(
    "row",
    [
        [b"f", 1, None, 1],  # file without an id
        [b"f", 1, b"short", 1],  # id of the wrong length
        [b"f", 1, OID_A, -1],  # negative size
        [b"f", 9, OID_A, 1],  # unknown kind
        [b"f", True, OID_A, 1],  # bool is not a kind
        [b"l", 3, None, 0],  # symlink without a target
        [b"l", 3, b"", 0],  # empty target
        [b"l", 3, b"a\0b", 0],  # NUL in target
        [b"t", 5, OID_A, 0],  # tombstone carrying an id
        [b"t", 5, None, 3],  # tombstone carrying a size
        [b"f", 1, OID_A],  # three fields
        [b"f", 1, OID_A, 1, 0o644],  # a mode that is the kind's default
        [b"x", 2, OID_A, 1, 0o755],  # a mode that is the kind's default
        [b"f", 1, OID_A, 1, 0o700],  # an owner-executable mode on a file
        [b"x", 2, OID_A, 1, 0o600],  # a mode without the owner's x on an executable
        [b"f", 1, OID_A, 1, 0o4600],  # set-uid: never recorded
        [b"f", 1, OID_A, 1, None],  # a nil mode
        [b"f", 1, OID_A, 1, True],  # bool is not a mode
        [b"d", 4, OID_A, 1, 0o700],  # a tree with a mode
        [b"l", 3, b"t", 0, 0o600],  # a symlink with a mode
        [b"f", 1, OID_A, 1, 0o600, 0],  # six fields
    ],
)
def test_decode_rejects_malformed_entries(row: list[object]) -> None:
    with pytest.raises(InvalidTree):
        decode_tree(crafted([row]))


@pytest.mark.parametrize("version", [0, 2, b"1", None])
def test_decode_rejects_unknown_tree_format(version: object) -> None:
    with pytest.raises(InvalidTree):
        decode_tree(crafted([file_row(b"a")], version=version))


def test_decode_rejects_non_minimal_integer_encoding() -> None:
    good = crafted([file_row(b"a", size=5)])
    wide = good[:-1] + b"\xcf" + (5).to_bytes(8, "big")  # size 5 as uint64
    assert decode_tree(good).entries[0].size == 5
    with pytest.raises(InvalidTree, match="non-canonical"):
        decode_tree(wide)


def test_decode_rejects_trailing_bytes() -> None:
    with pytest.raises(InvalidTree):
        decode_tree(crafted([file_row(b"a")]) + b"\x00")


# -- bad input: building trees ---------------------------------------------------------------


def test_tree_constructor_refuses_unsorted_entries() -> None:
    with pytest.raises(InvalidTree, match="order"):
        Tree(
            (
                TreeEntry(b"b", EntryKind.FILE, OID_A, None, 1),
                TreeEntry(b"a", EntryKind.FILE, OID_A, None, 1),
            )
        )


def test_tree_build_sorts_but_refuses_duplicates() -> None:
    built = Tree.build(
        [TreeEntry(b"b", EntryKind.FILE, OID_A), TreeEntry(b"a", EntryKind.TOMBSTONE)]
    )
    assert built.names() == [b"a", b"b"]
    with pytest.raises(InvalidTree, match="duplicate"):
        Tree.build([TreeEntry(b"a", EntryKind.FILE, OID_A), TreeEntry(b"a", EntryKind.FILE, OID_B)])


@pytest.mark.parametrize("name", [b"..", b".", b"a/b", b"", b"x\0"])
def test_tree_entry_refuses_unsafe_name(name: bytes) -> None:
    with pytest.raises(InvalidTree):
        TreeEntry(name, EntryKind.FILE, OID_A)


def test_tree_entry_refuses_size_that_cannot_be_encoded() -> None:
    with pytest.raises(InvalidTree):
        TreeEntry(b"huge", EntryKind.FILE, OID_A, None, 1 << 64)


def test_find_returns_entry_by_exact_name_or_none() -> None:
    tree = Tree.build([TreeEntry(n, EntryKind.FILE, OID_A) for n in (b"a", b"b\xff", b"c")])
    found = tree.find(b"b\xff")
    assert found is not None and found.name == b"b\xff"
    assert tree.find(b"b") is None
    assert tree.find(b"zz") is None


@given(
    st.one_of(names, st.sampled_from([b"", b".", b"..", b"a/b", b"a\0b"]), st.just("text")),
    st.sampled_from(EntryKind),
    st.one_of(st.none(), oids, st.binary(max_size=40)),
    st.one_of(st.none(), targets),
    st.one_of(sizes, st.integers(min_value=-3, max_value=-1), st.just(1 << 64)),
)
@settings(max_examples=300)
def test_make_entry_accepts_and_rejects_exactly_what_the_constructor_does(
        name: object, kind: EntryKind, oid: object, target: object, size: object) -> None:
    from ckpt.objstore import make_entry

    try:
        expected = TreeEntry(name, kind, oid, target, size)  # type: ignore[arg-type]
    except InvalidTree:
        with pytest.raises(InvalidTree):
            make_entry(name, kind, oid, target, size)  # type: ignore[arg-type]
        return
    made = make_entry(name, kind, oid, target, size)  # type: ignore[arg-type]
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)


# -- the native decoder (objstore/_trees.c) against the Python loop ---------------------------

native_decoder = pytest.mark.skipif(codec._native_decode is None,
                                    reason="objstore._trees is not built (or CKPT_NATIVE=0)")


def python_decode(data: bytes) -> Tree | InvalidTree:
    """What the Python loop alone makes of `data`: its tree, or the error it raises."""
    native, codec._native_decode = codec._native_decode, None
    try:
        return decode_tree(data)
    except InvalidTree as exc:
        return exc
    finally:
        codec._native_decode = native


def assert_native_agrees(data: bytes) -> Tree | None:
    """The native decoder gives the Python loop's tree for `data`, or None (the loop decides):
    never a tree where the loop raises, nor another tree. Returns what it gave."""
    assert codec._native_decode is not None
    expected = python_decode(data)
    got = codec._native_decode(data)
    if got is not None:
        assert not isinstance(expected, InvalidTree), expected
        assert got == expected
        assert [repr(e) for e in got.entries] == [repr(e) for e in expected.entries]
    return got


common_entries = st.builds(
    lambda name, kind, oid, size, bits: TreeEntry(
        name, kind, oid, None, size,
        entry_mode(kind, bits & ~0o100 | (0o100 if kind is EntryKind.EXECUTABLE else 0))),
    names, st.sampled_from([EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.TREE]), oids, sizes,
    st.integers(0, 0o777))
common_trees = st.lists(common_entries, unique_by=lambda entry: entry.name,
                        max_size=40).map(Tree.build)


@native_decoder
@settings(deadline=None, max_examples=200)
@given(common_trees)
def test_native_decoder_decodes_every_tree_of_common_entries(tree: Tree) -> None:
    assert assert_native_agrees(encode_tree(tree)) == tree


@native_decoder
@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(trees, common_trees), mutations)
def test_native_decoder_agrees_with_python_on_mutated_trees(
        tree: Tree, mutation: tuple[str, int, bytes]) -> None:
    assert_native_agrees(encode_tree(tree))  # symlinks and tombstones: None
    assert_native_agrees(mutate(encode_tree(tree), *mutation))


@native_decoder
@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=256), st.lists(loose_values, max_size=6))
def test_native_decoder_agrees_with_python_on_arbitrary_bytes(data: bytes,
                                                             row: list[object]) -> None:
    assert_native_agrees(data)
    assert_native_agrees(crafted([row]))
    assert_native_agrees(crafted([file_row(b"a"), row]))


@native_decoder
def test_native_decoder_takes_every_width_of_msgpack_header() -> None:
    # array16 and array32 rows, bin8/bin16 names, each width of integer, and a mode.
    sizes_of_every_width = [0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32,
                            (1 << 64) - 1]
    rows = [TreeEntry(b"n%06d" % i, EntryKind.FILE, OID_A, None,
                      sizes_of_every_width[i % len(sizes_of_every_width)])
            for i in range(70_000)]
    rows.append(TreeEntry(b"z" * 300, EntryKind.EXECUTABLE, OID_B, None, 1, 0o750))
    for tree in (Tree.build(rows[:20]), Tree.build(rows)):
        assert assert_native_agrees(encode_tree(tree)) == tree
    # The same values in a wider encoding than msgpack's shortest are left to Python.
    wide = b"\x92\x01\x91\x94\xc4\x01a\x01\xc4\x20" + bytes(32) + b"\xcd\x00\x05"
    assert assert_native_agrees(wide) is None
    assert isinstance(python_decode(wide), InvalidTree)
