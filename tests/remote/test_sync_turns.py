"""A push after each agent turn sends what the turn changed and reads only the subtrees it
changed: the push diffs the new tree against one the remote already has
(checkpoints/remote/push.py). Against a real SeaweedFS; a fresh machine restores every pushed
checkpoint exactly."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from remote.sync_helpers import agent_turn, make_tree, read_tree
from seaweed import Bucket

import ckpt.checkpoints.remote.push as remote_push
from ckpt.checkpoints import Checkpoints
from ckpt.checkpoints.config import read_config, write_config
from ckpt.objstore import ObjectId, codec
from ckpt.objstore.gc import find_reachable
from ckpt.objstore.remote.repo import RemoteRepo

DIRS, SUBDIRS, FILES = 12, 4, 6  # 288 files in 60 directories


def _deep_tree(root: Path, rng: random.Random) -> None:
    for d in range(DIRS):
        for s in range(SUBDIRS):
            folder = root / f"d{d:02}" / f"s{s}"
            folder.mkdir(parents=True)
            for f in range(FILES):
                (folder / f"f{f}.txt").write_bytes(rng.randbytes(rng.randint(20, 600)))


class Spy:
    """What the pushes of a test handed to the upload and what their diffs read (the real
    functions run; these only note their arguments and results)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.uploaded: list[list[ObjectId]] = []
        self.trees_read: list[int] = []
        upload, plan = RemoteRepo.upload, remote_push.plan_push

        def spy_upload(repo: RemoteRepo, store: Any, oids: Any, *args: Any, **kw: Any) -> Any:
            given = list(oids)
            self.uploaded.append(given)
            return upload(repo, store, given, *args, **kw)

        def spy_plan(*args: Any, **kw: Any) -> remote_push.PushPlan:
            found = plan(*args, **kw)
            self.trees_read.append(found.trees_read)
            return found

        monkeypatch.setattr(RemoteRepo, "upload", spy_upload)
        monkeypatch.setattr(remote_push, "plan_push", spy_plan)


def test_a_turn_push_reads_and_sends_only_the_changed_subtrees(
        tmp_path: Path, s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    rng = random.Random(41)
    root = tmp_path / "a"
    _deep_tree(root, rng)
    expected: dict[str, dict[str, Any]] = {}
    with Checkpoints.init(root, session="turns") as a:
        a.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        first = a.create(label="first")
        expected[first.id] = read_tree(root)
        assert a.push().pushed == (first.id,)
        # root + 12 dirs + 48 subdirs + 288 files; distinct blobs only
        assert len(spy.uploaded[-1]) >= 1 + DIRS + DIRS * SUBDIRS + 200

        # A turn edits one file three levels down: root, d03, d03/s2 and the new blob.
        (root / "d03" / "s2" / "f4.txt").write_bytes(b"edited by the turn\n")
        second = a.create(label="edit one")
        expected[second.id] = read_tree(root)
        report = a.push()
        assert report.pushed == (second.id,) and report.objects == 4
        assert len(spy.uploaded[-1]) == 4
        assert spy.trees_read[-1] <= 2 * 3  # the three changed trees and their old versions

        # Two turns pushed at once: a new directory, then a deleted one and an edit; the later
        # checkpoint is diffed against the earlier one, sent in the same push.
        (root / "new").mkdir()
        (root / "new" / "n.txt").write_bytes(b"new file\n")
        third = a.create(label="add")
        expected[third.id] = read_tree(root)
        shutil.rmtree(root / "d07")
        (root / "d10" / "s0" / "f1.txt").write_bytes(b"edited again\n")
        fourth = a.create(label="delete and edit")
        expected[fourth.id] = read_tree(root)
        report = a.push()
        assert report.pushed == (third.id, fourth.id)
        # third: root, new/, new/n.txt; fourth: root, d10, d10/s0, its blob
        assert len(spy.uploaded[-1]) == 3 + 4
        assert spy.trees_read[-1] <= 2 * (2 + 3)
        assert a.push().pushed == ()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with Checkpoints.init(fresh, session="other") as b:
        b.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        assert set(b.pull().pulled) == set(expected)
        for checkpoint_id, tree in expected.items():
            b.restore(checkpoint_id)
            assert read_tree(fresh) == tree, checkpoint_id


def test_a_push_plan_holds_every_object_no_base_has(tmp_path: Path) -> None:
    """Seeded turns (edits, new files, deletions, renamed directories): the plan of each push
    is within what its checkpoints reach and holds everything their bases do not reach."""
    rng = random.Random(43)
    root = tmp_path / "w"
    make_tree(root, rng, files=60)
    with Checkpoints.init(root, session="s") as cp:
        made = [cp.create()]
        for turn in range(8):
            agent_turn(root, rng, edits=rng.randint(0, 6), new=rng.randint(0, 3),
                       deleted=rng.randint(0, 2))
            if turn % 3 == 1:
                (root / f"d{turn % 5}").rename(root / f"moved{turn}")
            made.append(cp.create())
        store = cp.objects
        for cut in range(1, len(made)):
            bases, todo = made[:cut][-rng.randint(1, cut):], made[cut:cut + rng.randint(1, 3)]
            plan = set(remote_push.plan_push(store, todo, bases).oids)
            reach = find_reachable(store, {r.tree for r in todo})
            assert plan <= reach
            assert reach - find_reachable(store, {r.tree for r in bases}) <= plan, cut
            assert set(remote_push.plan_push(store, todo, []).oids) == reach


def test_a_push_sends_each_blocks_members_in_one_run(tmp_path: Path) -> None:
    """Small blocks over 288 small files in 60 directories, so that each block straddles
    directories: the plan lists each block's members together, in the order the snapshot put
    them, so that a fresh machine reading the packs in order decompresses each block once."""
    rng = random.Random(47)
    root = tmp_path / "w"
    _deep_tree(root, rng)
    store = tmp_path / "store"
    Checkpoints.init(root, store=store).close()
    write_config(str(store), dataclasses.replace(read_config(str(store)), block_size=16 << 10))
    with Checkpoints.open(root, store=store) as cp:
        record = cp.create()
        runs: list[ObjectId] = []  # the block of each run of members, in plan order
        members = 0
        for oid in remote_push.plan_push(cp.objects, [record], []).oids:
            stored = cp.objects.backend.get(oid)
            if stored[4] != codec.CODEC_BLOCK:
                continue
            members += 1
            block = codec.member_header(stored, oid)[0]
            if not runs or runs[-1] != block:
                runs.append(block)
    assert members >= 200 and len(set(runs)) >= 3, (members, len(set(runs)))
    assert len(runs) == len(set(runs))
