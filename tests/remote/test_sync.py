"""Push and pull through the `Checkpoints` API against a real SeaweedFS (tests/seaweed.py): a
fresh machine (another root, an empty store, only the remote added) lists, pulls and restores
the exact tree; dedup across pushes; two pushers of one session; hollow checkpoints through
gc and fsck; a restore fetches only what its tree needs."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from remote.sync_helpers import agent_turn, make_tree, pack_keys, read_tree
from seaweed import Bucket

from ckpt.checkpoints import Checkpoints, UnknownCheckpoint, UnknownRemote


def machine(tmp_path: Path, name: str, bucket: Bucket, *, session: str = "default",
            tree: int | None = None) -> tuple[Path, Checkpoints]:
    """A root with a store of its own and `origin` added; `tree`: a seeded tree in it."""
    root = tmp_path / name
    root.mkdir()
    if tree is not None:
        make_tree(root, random.Random(tree))
    cp = Checkpoints.init(root, session=session)
    cp.remote_add("origin", bucket.url, endpoint=bucket.endpoint)
    return root, cp


def test_push_then_a_fresh_machine_lists_pulls_and_restores_the_exact_tree(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    root_a, a = machine(tmp_path, "a", s3_bucket, tree=1)
    with a:
        first = a.create(label="first")
        pushed = a.push()
        assert pushed.pushed == (first.id,) and pushed.packs >= 1 and pushed.objects > 40
    expected = read_tree(root_a)

    root_b, b = machine(tmp_path, "b", s3_bucket)
    with b:
        assert [r.id for r in b.remote_history(session=None)] == [first.id]
        assert b.pull().pulled == (first.id,)
        assert b.pull().pulled == ()  # idempotent
        check = b.fsck()
        assert check.ok and check.remote_only == (first.id,) and not check.damaged_checkpoints
        gc = b.gc(grace_seconds=0)  # the hollow checkpoint's objects are absent: no failure
        assert gc.objects_removed == 0
        report = b.restore(first.id)
        assert report.written > 40
        assert b.fsck().remote_only == ()
    assert read_tree(root_b) == expected


def test_restore_of_an_id_only_the_remote_has_fetches_only_its_tree(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    root_a, a = machine(tmp_path, "a", s3_bucket, tree=2)
    with a:
        first = a.create()
        expected = read_tree(root_a)
        (root_a / "only-in-second.bin").write_bytes(random.Random(3).randbytes(5000))
        second = a.create()
        a.push()
        second_blob = next(f.oid for f in a.files(second.id)
                           if f.path == b"only-in-second.bin")
    root_b, b = machine(tmp_path, "b", s3_bucket)
    with b:
        with pytest.raises(UnknownCheckpoint):
            b.get(first.id)
        b.restore(first.id[:-2])  # a unique prefix of a remote id is enough
        pulled = {r.id for r in b.history(all_sessions=True, all_roots=True)}
        assert first.id in pulled and second.id not in pulled
        assert second_blob is not None and not b.objects.has(second_blob)
    assert read_tree(root_b) == expected


def test_a_second_push_of_an_unchanged_tree_uploads_no_pack(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    _, a = machine(tmp_path, "a", s3_bucket, tree=4)
    with a:
        a.create()
        a.push()
        packs = pack_keys(s3_bucket)
        again = a.create()
        report = a.push()
        assert report.pushed == (again.id,)
        assert (report.objects, report.packs, report.bytes_uploaded) == (0, 0, 0)
        assert pack_keys(s3_bucket) == packs
        assert a.push().pushed == ()  # nothing left to send


def test_a_turn_pushes_only_its_new_objects(tmp_path: Path, s3_bucket: Bucket) -> None:
    root, a = machine(tmp_path, "a", s3_bucket, tree=5)
    with a:
        base = a.create()
        first = a.push()
        agent_turn(root, random.Random(6), edits=8, new=3, deleted=2)
        turn = a.create()
        changes = a.diff(base.id, turn.id)
        report = a.push()
        new_files = sum(1 for c in changes if c.change in ("A", "M"))
        assert report.pushed == (turn.id,) and report.packs == 1
        # the 11 new blobs and the trees above them, nothing of the unchanged 30 files
        assert new_files <= report.objects <= new_files + 10
        assert report.bytes_uploaded < first.bytes_uploaded / 2
    _, b = machine(tmp_path, "b", s3_bucket)
    with b:
        b.pull()
        b.restore(turn.id)
        b.restore(base.id)


def test_two_pushers_of_one_session_keep_both_histories(tmp_path: Path,
                                                         s3_bucket: Bucket) -> None:
    _, a = machine(tmp_path, "a", s3_bucket, session="shared", tree=7)
    _, c = machine(tmp_path, "c", s3_bucket, session="shared", tree=8)
    with a, c:
        ids = [a.create().id, c.create().id, a.create().id, c.create().id]
        assert len(a.push().pushed) == 2
        assert len(c.push().pushed) == 2
    _, b = machine(tmp_path, "b", s3_bucket, session="shared")
    with b:
        assert [r.id for r in b.remote_history(session="shared")] == ids
        assert b.pull(session="shared").pulled == tuple(ids)
        listed = b.history(all_roots=True)
        assert [r.id for r in listed] == ids  # both machines' checkpoints, ordered by time


def test_push_by_session_and_by_id(tmp_path: Path, s3_bucket: Bucket) -> None:
    root, a = machine(tmp_path, "a", s3_bucket, tree=9)
    with a:
        one = a.create()
        with Checkpoints.open(root, session="other") as other:
            two = other.create()
        assert a.push(session="other").pushed == (two.id,)
        assert a.push(ids=[one.id]).pushed == (one.id,)
        assert set(a.push().present) == {one.id, two.id}


def test_pull_of_one_session_only(tmp_path: Path, s3_bucket: Bucket) -> None:
    root, a = machine(tmp_path, "a", s3_bucket, tree=10)
    with a:
        a.create()
        with Checkpoints.open(root, session="agent-2") as other:
            wanted = other.create()
        a.push()
    _, b = machine(tmp_path, "b", s3_bucket)
    with b:
        assert b.pull(session="agent-2").pulled == (wanted.id,)


def test_remote_config_add_list_remove(tmp_path: Path, s3_bucket: Bucket) -> None:
    root, a = machine(tmp_path, "a", s3_bucket)
    with a:
        assert [r.name for r in a.remote_list()] == ["origin"]
        text = (root / ".ckpt" / "remotes.toml").read_text()
        assert "SECRET" not in text.upper() and "ckpt-test" not in text
        a.remote_add("second", "s3://other-bucket/p", endpoint=s3_bucket.endpoint)
        with pytest.raises(UnknownRemote):
            a.push()  # two remotes: which one is not guessed
        a.remote_remove("second")
        with pytest.raises(UnknownRemote):
            a.remote_remove("second")
        assert [r.name for r in a.remote_list()] == ["origin"]


def test_prune_remote_then_gc_frees_the_packs_only_it_needed(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    root, a = machine(tmp_path, "a", s3_bucket, tree=11)
    with a:
        first = a.create(reason="pre-tool")
        a.push()
        for f in (root / "d1").iterdir():
            f.write_bytes(random.Random(f.name).randbytes(3000))
        second = a.create()
        a.push()
        dry = a.prune_remote(reason="pre-tool", dry_run=True)
        assert dry.removed == (first.id,) and dry.dry_run
        done = a.prune_remote(reason="pre-tool", grace_seconds=0)
        assert done.removed == (first.id,)
        assert [r.id for r in a.remote_history()] == [second.id]
        assert a.fsck_remote(full=True).ok
        assert [r.id for r in a.history()] == [first.id, second.id]  # local ones stay
    root_b, b = machine(tmp_path, "b", s3_bucket)
    with b:
        b.restore(second.id)
    assert read_tree(root_b) == read_tree(root)


def test_a_fresh_container_at_the_same_path_gets_the_timeline_back(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    """A sandbox at one mount point pushes, is thrown away, and a new one at the same path
    pulls: the checkpoints are in its timeline (hollow until restored), `list` counts no
    change for them instead of failing, `show` and `diff` fetch what they need."""
    root, a = machine(tmp_path, "w", s3_bucket, tree=12)
    with a:
        first = a.create()
        shown = a.files(first.id)
        agent_turn(root, random.Random(13))
        second = a.create()
        a.push()
    expected = read_tree(root)
    shutil.rmtree(root)
    root.mkdir()
    with Checkpoints.init(root) as b:
        b.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        assert b.pull().pulled == (first.id, second.id)
        assert [r.id for r in b.history()] == [first.id, second.id]
        assert [b.changed(r) for r in b.history()] == [first.stats.files, None]
        assert b.fsck().remote_only == (first.id, second.id)
        again = b.push()  # hollow, but already there: present, not skipped
        assert again.present == (first.id, second.id) and again.skipped_hollow == ()
        assert b.files(first.id) == shown  # its trees fetched for `show`
        assert b.diff(first.id, second.id)
        b.restore("latest")
        assert b.fsck().remote_only == ()
        assert b.gc(grace_seconds=0).objects_kept > 0
    assert read_tree(root) == expected
