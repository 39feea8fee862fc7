"""A hypothesis state machine over a real workspace: after every restore the tree is exactly
the one the checkpoint saw.

Rules edit, create, delete, swap types (file, directory, symlink), flip exec bits, take
checkpoints and restore them (with and without the pre-restore save, sometimes discarding
later ones). The model of each checkpoint is the filesystem itself, read when the checkpoint
was taken: path -> ("dir",) | ("file", content, exec) | ("link", target).
Bounded by default; `CKPT_SOAK=1` runs a long soak.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule
from soak import scale

from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.errors import UnknownCheckpoint
from ckpt.checkpoints.service import Checkpoints

NAMES = ("a", "b", "c")
rel_paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
contents = st.sampled_from([b"", b"x", b"y", b"xy", b"hello\n", b"\x00\xff binary", b"z" * 300])
# Inside the root (to a file or a directory, possibly itself), dangling, outside, absolute.
link_targets = st.sampled_from([b"a", b"b/c", b"../c", b".", b"missing", b"../../outside", b"/etc"])
picks = st.integers(min_value=0, max_value=1000)  # an index into the paths that exist now
operations = st.one_of(
    st.tuples(st.just("write"), rel_paths, contents, st.booleans()),
    st.tuples(st.just("edit"), picks, contents),
    st.tuples(st.just("mkdir"), rel_paths),
    st.tuples(st.just("symlink"), rel_paths, link_targets),
    st.tuples(st.just("delete"), picks),
    st.tuples(st.just("chmod"), picks),
)


class WorkspaceRestores(RuleBasedStateMachine):
    checkpoints = Bundle("checkpoints")

    def __init__(self) -> None:
        super().__init__()
        self.base = tempfile.mkdtemp(prefix="ckpt-sm-")
        self.root = os.path.realpath(os.path.join(self.base, "ws"))
        os.mkdir(self.root)
        self.cp = Checkpoints.init(self.root)
        self.models: dict[str, dict[str, tuple[object, ...]]] = {}

    def teardown(self) -> None:
        self.cp.close()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- filesystem edits (never through a symlink: the model must stay exact) -------------

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def _clear(self, rel: str) -> None:
        path = self._path(rel)
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)

    def _make_parents(self, rel: str) -> None:
        parts = rel.split("/")[:-1]
        for index in range(1, len(parts) + 1):
            ancestor = "/".join(parts[:index])
            path = self._path(ancestor)
            if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
                os.unlink(path)
            if not os.path.lexists(path):
                os.mkdir(path)

    def _existing(self, pick: int, *, files_only: bool = False) -> str | None:
        state = h.tree_state(self.root)
        found = sorted(p for p, node in state.items() if not files_only or node[0] == "file")
        return found[pick % len(found)] if found else None

    def _apply(self, op: tuple[object, ...]) -> None:
        kind = op[0]
        if kind == "write":  # create or replace (a directory or symlink becomes a file)
            _, rel, data, executable = op
            self._make_parents(rel)
            self._clear(rel)
            h.write_file(self.root, rel, data, executable=executable)
        elif kind == "edit":  # same inode, maybe the same size
            rel = self._existing(op[1], files_only=True)
            if rel is not None:
                with open(self._path(rel), "r+b") as out:
                    out.write(op[2])
                    out.truncate(len(op[2]))
        elif kind == "mkdir":
            rel = op[1]
            self._make_parents(rel)
            path = self._path(rel)
            if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
                os.unlink(path)
            os.makedirs(path, exist_ok=True)
        elif kind == "symlink":
            rel = op[1]
            self._make_parents(rel)
            self._clear(rel)
            os.symlink(op[2], os.fsencode(self._path(rel)))
        elif kind == "delete":
            rel = self._existing(op[1])
            if rel is not None:
                self._clear(rel)
        elif kind == "chmod":
            rel = self._existing(op[1], files_only=True)
            if rel is not None:
                os.chmod(self._path(rel), os.stat(self._path(rel)).st_mode ^ 0o111)

    @initialize(target=checkpoints, ops=st.lists(operations, min_size=3, max_size=12))
    def populate(self, ops: list[tuple[object, ...]]) -> str:
        for op in ops:
            self._apply(op)
        return self.checkpoint()

    @rule(ops=st.lists(operations, min_size=1, max_size=6))
    def change(self, ops: list[tuple[object, ...]]) -> None:
        for op in ops:
            self._apply(op)

    # -- checkpoints and restores ----------------------------------------------------------

    @rule(target=checkpoints)
    def take_checkpoint(self) -> str:
        return self.checkpoint()

    def checkpoint(self) -> str:
        model = h.tree_state(self.root)
        record = self.cp.create(label="step")
        self.models[record.id] = model
        return record.id

    @rule(target=checkpoints, ref=checkpoints, save=st.booleans(),
          discard_later=st.sampled_from([False, False, False, True]))
    def restore(self, ref: str, save: bool, discard_later: bool) -> object:
        if ref not in self.models:  # discarded by an earlier restore
            try:
                self.cp.restore(ref)
            except UnknownCheckpoint:
                return multiple()
            raise AssertionError(f"{ref} was discarded but still restores")
        before = h.tree_state(self.root)
        report = self.cp.restore(ref, RestoreOptions(save=save, discard_later=discard_later))
        assert h.tree_state(self.root) == self.models[ref]
        assert self.cp.diff(ref) == []  # the next scan (stat cache included) agrees
        for gone in report.discarded:
            del self.models[gone]
        if report.pre_restore is None:
            assert not save
            return multiple()
        self.models[report.pre_restore] = before
        return multiple(report.pre_restore)

    @rule(target=checkpoints, ops=st.lists(operations, min_size=1, max_size=4), save=st.booleans())
    def undo_a_turn(self, ops: list[tuple[object, ...]], save: bool) -> object:
        """A turn goes wrong and is undone: few differences, so single chmods and swaps show."""
        for op in ops:
            self._apply(op)
        newest = self.cp.latest()
        assert newest is not None
        return self.restore(newest.id, save, False)

    @rule(ref=checkpoints)
    def dry_run_changes_nothing(self, ref: str) -> None:
        if ref not in self.models:
            return
        before = h.tree_state(self.root)
        report = self.cp.restore(ref, RestoreOptions(dry_run=True))
        assert h.tree_state(self.root) == before
        assert report.plan.is_empty == (before == self.models[ref])
        if report.plan.is_empty:  # every leaf counted as unchanged, none loaded to count it
            assert report.unchanged == sum(1 for node in before.values() if node[0] != "dir")

    @invariant()
    def no_restore_left_pending(self) -> None:
        assert glob.glob(os.path.join(self.cp.store_dir, "roots", "*", "journal")) == []
        assert self.cp.catalog.restore_journals() == []


WorkspaceRestores.TestCase.settings = settings(
    max_examples=scale(25, 500),
    stateful_step_count=scale(20, 40),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestWorkspaceRestores = WorkspaceRestores.TestCase
