"""Tree deltas: a big directory's new tree stored as a delta (codec 3) on its previous tree,
read back exactly through a fresh store, kept by gc, checked by fsck."""

from __future__ import annotations

import os
import random
import time

from ckpt.objstore import EntryKind, ObjectId, ObjectStore, StoreOptions, Tree, TreeEntry, codec
from ckpt.objstore.delta import read_chain
from ckpt.objstore.fsck import check_store
from ckpt.objstore.gc import collect_garbage
from ckpt.objstore.ids import hash_bytes


def _big_tree(rng: random.Random, files: int) -> list[TreeEntry]:
    return [TreeEntry(f"file_{i:05}.c".encode(), EntryKind.FILE,
                      hash_bytes(rng.randbytes(16)), None, rng.randrange(1, 1 << 20))
            for i in range(files)]


def _edited(entries: list[TreeEntry], rng: random.Random) -> list[TreeEntry]:
    at = rng.randrange(len(entries))
    entries = list(entries)
    old = entries[at]
    entries[at] = TreeEntry(old.name, old.kind, hash_bytes(rng.randbytes(16)), None, old.size + 1)
    return entries


def test_a_big_trees_one_entry_edit_is_stored_as_a_small_delta(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "s")
    store = ObjectStore.init(path)
    rng = random.Random(29)
    entries = _big_tree(rng, 2000)
    first = store.put_tree(Tree.build(entries))
    plain_size = len(store.backend.get(first))
    new = Tree.build(_edited(entries, rng))
    oid, written = store.store_tree(new, base=first)
    stored = store.backend.get(oid)
    assert stored[4] == codec.CODEC_DELTA
    assert written == len(stored) < plain_size // 20, (written, plain_size)
    store.close()
    fresh = ObjectStore.open(path)
    assert fresh.get_tree(oid) == new  # decoded from its base, not from a cache
    fresh.close()


def test_no_hint_or_deltas_off_store_the_tree_plain(tmp_path: str) -> None:
    rng = random.Random(3)
    entries = _big_tree(rng, 500)
    for options, hinted in ((StoreOptions(), False), (StoreOptions(deltas=False), True)):
        store = ObjectStore.init(os.path.join(tmp_path, f"s{hinted}"), options=options)
        first = store.put_tree(Tree.build(entries))
        oid = store.put_tree(Tree.build(_edited(entries, rng)), base=first if hinted else None)
        assert store.backend.get(oid)[4] != codec.CODEC_DELTA
        store.close()


def test_tree_chains_stay_bounded_survive_gc_and_check_clean(tmp_path: str) -> None:
    store = ObjectStore.init(os.path.join(tmp_path, "s"))
    rng = random.Random(5)
    entries = _big_tree(rng, 1500)
    trees: list[tuple[ObjectId, Tree]] = []
    previous: ObjectId | None = None
    for _ in range(12):
        entries = _edited(entries, rng)
        tree = Tree.build(entries)
        previous = store.put_tree(tree, base=previous)
        trees.append((previous, tree))
    assert max(len(read_chain(store.backend, oid)) for oid, _ in trees) \
        <= store.options.delta_chain + 1
    assert sum(store.backend.get(oid)[4] == codec.CODEC_DELTA for oid, _ in trees) >= 9
    kept = [oid for oid, _ in trees[-3:]]
    collect_garbage(store, kept, grace_seconds=0, now=time.time() + 3600)
    store.forget_cached()
    for oid, tree in trees[-3:]:
        assert store.get_tree(oid) == tree
    report = check_store(store, kept, full=True)
    # The entries name blobs this test never stored: those are all fsck may report.
    assert report.trees_checked == 3 and report.problems
    assert {d.problem for d in report.problems} == {"missing"}
    assert not {d.oid for d in report.problems} & {oid for oid, _ in trees}
    store.close()
