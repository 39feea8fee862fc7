"""`undo`: the last restore of the root undone, redo by restoring the undo's save, repeated
undos walking back, nothing to undo, and a restore of some paths undone for those paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.checkpoints import (
    Checkpoints,
    NothingMatched,
    NothingToUndo,
    RestoreOptions,
    RestoreReport,
)


def _a_then_b(cp: Checkpoints, ws: Path, options: RestoreOptions | None = None) -> RestoreReport:
    """f is "a" at a checkpoint, then "b"; the restore of that checkpoint (`options`)."""
    (ws / "f").write_text("a")
    first = cp.create()
    (ws / "f").write_text("b")
    return cp.restore(first.id, options)


def _state(ws: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(ws.iterdir()) if p.is_file()}


def test_undo_puts_back_what_the_restore_replaced_and_its_save_redoes(
        cp: Checkpoints, ws: Path) -> None:
    (ws / "f").write_text("one")
    first = cp.create()
    (ws / "f").write_text("two")
    (ws / "g").write_text("new")
    cp.create()
    (ws / "f").write_text("unsaved")
    restored = cp.restore(first.id)
    assert _state(ws) == {"f": "one"}
    undone = cp.undo()
    assert undone.undid == restored.pre_restore
    assert undone.id == restored.pre_restore
    assert _state(ws) == {"f": "unsaved", "g": "new"}
    save = cp.get(undone.pre_restore or "")
    assert save.reason == "pre-restore"
    assert save.metadata["undo_of"] == restored.pre_restore
    redo = cp.restore(save.id)  # the redo
    assert _state(ws) == {"f": "one"}
    assert cp.undo().undid == redo.pre_restore  # a redo is a restore: undoable
    assert _state(ws) == {"f": "unsaved", "g": "new"}


def test_repeated_undos_walk_back_then_nothing_is_left(cp: Checkpoints, ws: Path) -> None:
    states = []
    for text in ("a", "b", "c"):
        (ws / "f").write_text(text)
        states.append(cp.create())
    cp.restore(states[1].id)  # c -> b
    cp.restore(states[0].id)  # b -> a
    assert (ws / "f").read_text() == "a"
    cp.undo()
    assert (ws / "f").read_text() == "b"
    cp.undo()
    assert (ws / "f").read_text() == "c"
    with pytest.raises(NothingToUndo) as caught:
        cp.undo()
    assert isinstance(caught.value, NothingMatched)  # exit 3 in the CLI
    assert (ws / "f").read_text() == "c"


def test_nothing_to_undo_without_a_restore(cp: Checkpoints, ws: Path) -> None:
    (ws / "f").write_text("a")
    cp.create()
    with pytest.raises(NothingToUndo, match="nothing to undo"):
        cp.undo()


def test_a_no_save_restore_is_not_undoable(cp: Checkpoints, ws: Path) -> None:
    _a_then_b(cp, ws, RestoreOptions(save=False))
    with pytest.raises(NothingToUndo):
        cp.undo()


def test_undo_dry_run_changes_nothing(cp: Checkpoints, ws: Path) -> None:
    restored = _a_then_b(cp, ws)
    count = len(cp.list())
    report = cp.undo(dry_run=True)
    assert report.dry_run and report.undid == restored.pre_restore
    assert report.written == 1
    assert (ws / "f").read_text() == "a"
    assert len(cp.list()) == count
    assert cp.undo().undid == restored.pre_restore  # still there to undo


def test_undo_after_a_restore_of_some_paths_touches_only_those(
        cp: Checkpoints, ws: Path) -> None:
    (ws / "f").write_text("f1")
    (ws / "g").write_text("g1")
    first = cp.create()
    (ws / "f").write_text("f2")
    (ws / "g").write_text("g2")
    cp.create()
    restored = cp.restore(first.id, RestoreOptions(paths=["f"]))
    assert _state(ws) == {"f": "f1", "g": "g2"}
    assert cp.get(restored.pre_restore or "").metadata["restore_paths"] == ("f",)
    (ws / "g").write_text("g3")  # made after the restore: not the restore's to undo
    cp.undo()
    assert _state(ws) == {"f": "f2", "g": "g3"}


def test_undo_reaches_a_restore_made_in_another_session(ws: Path) -> None:
    cp = Checkpoints.init(ws)
    other = Checkpoints.open(ws, session="agent")
    try:
        (ws / "f").write_text("a")
        first = other.create()
        (ws / "f").write_text("b")
        other.restore(first.id)
        assert cp.undo().undid is not None
        assert (ws / "f").read_text() == "b"
    finally:
        other.close()
        cp.close()


def test_undo_event_names_what_it_undid(cp: Checkpoints, ws: Path) -> None:
    restored = _a_then_b(cp, ws)
    cp.undo()
    events = cp.events(type="checkpoint:restore")
    assert [e.data["undid"] for e in events] == [None, restored.pre_restore]
    assert [e.data["target"] for e in events] == [None, None]
