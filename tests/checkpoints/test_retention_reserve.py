"""The store's space reserve (reserve.py): made at init, given back only when the disk is
low, made again only with room to spare, never written through a planted symlink, and
`make_room` touches nothing outside a store.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.checkpoints import make_room, reserve
from ckpt.checkpoints.service import Checkpoints


def low_disk(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(reserve, "free_bytes", lambda _store: free)


def test_init_makes_the_reserve_and_only_a_low_disk_gives_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Checkpoints.init(tmp_path).close()
    store = tmp_path / ".ckpt"
    path = store / reserve.RESERVE_NAME
    assert path.stat().st_blocks * 512 >= reserve.RESERVE_BYTES
    assert make_room(store) == 0 and path.exists()  # room enough: kept
    low_disk(monkeypatch, reserve.LOW_WATER - 1)
    assert make_room(store) >= reserve.RESERVE_BYTES and not path.exists()
    assert not reserve.replenish(str(store))  # no room to spare: not made again
    monkeypatch.undo()
    assert reserve.replenish(str(store)) and path.exists()


def test_prune_and_gc_give_the_reserve_back_first_on_a_low_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Checkpoints.init(tmp_path) as cp:
        for index in range(2):
            (tmp_path / "f.txt").write_text(f"{index}\n")
            cp.create()
        path = tmp_path / ".ckpt" / reserve.RESERVE_NAME
        low_disk(monkeypatch, 0)
        assert cp.prune(keep_latest=1, collect=False).removed
        assert not path.exists()
        monkeypatch.undo()
        assert reserve.replenish(cp.store_dir)
        low_disk(monkeypatch, 0)
        cp.gc()
        assert not path.exists()


def test_a_symlink_planted_as_the_reserve_is_never_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    Checkpoints.init(tmp_path / "ws").close()
    store = tmp_path / "ws" / ".ckpt"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (store / reserve.RESERVE_NAME).unlink()
    os.symlink(victim, store / reserve.RESERVE_NAME)
    assert not reserve.replenish(str(store))
    low_disk(monkeypatch, 0)
    assert make_room(store) == 0  # the link is removed, nothing is counted as freed
    assert not os.path.lexists(store / reserve.RESERVE_NAME)
    assert victim.read_text() == "keep me\n"


def test_make_room_touches_nothing_outside_a_store(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / reserve.RESERVE_NAME).write_text("someone's file\n")
    low_disk(monkeypatch, 0)
    assert make_room(tmp_path) == 0
    assert (tmp_path / reserve.RESERVE_NAME).read_text() == "someone's file\n"
