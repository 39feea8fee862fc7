"""Zstd dictionaries for small objects (codec 2): which dictionary new puts use, training one
from the store's own content, the list of every dictionary the store holds (gc roots), and the
counters that say what dictionaries saved.

A dictionary is an ordinary object (stored plain, never with a dictionary) whose id is kept
in the store file `dictionaries`, written atomically under a lock; the last one listed is the
one new puts use. A dictionary is never unlisted, so gc keeps every one an object may name.

Training happens inside a `put_files` call that puts many new small objects (a first
snapshot, a large import), never elsewhere:
- while the store has no dictionary, its first `TRAIN_SAMPLES` new small objects are the
  samples; the objects after them are compressed with the new dictionary, those before stay
  plain (re-encoding them would cost a second compression for a fraction of a percent of the
  store);
- drift: every `WINDOW` new small objects of the call, a candidate is trained on every
  `WINDOW // TRAIN_SAMPLES`-th of them (the content just put, which predicts the content
  about to be put: a tree is walked directory by directory) and held-out samples are
  compressed with the current dictionary and with the candidate. The content has drifted
  when the candidate saves more than `DRIFT_MARGIN` of the held-out plain size over the
  current one: the candidate is stored and becomes current.
A training costs a few hundredths of a second (fastCOVER with fixed parameters on a few
hundred samples). Measured on the Linux 6.1 first snapshot at level 1: one dictionary (trained
on the first directories, Documentation/) saves 2 MB of 268; checking drift every 8,000 small
objects (7 dictionaries adopted) saves 9 MB; every 4,000 no more.

Checks: one in `CHECK_EVERY` objects compressed with the dictionary is also compressed
without it; the sums of both sizes give the estimated savings (`saved`, for `ckpt stats`),
kept in the store file `dictionaries.counters` (statistics: written at each sync that wrote
objects with a dictionary, without fsync, never read by anything but stats).

What must not live here: envelope bytes and zstd calls (codec.py), reading files (putfiles.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ckpt.objstore import codec
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.errors import CorruptObject, ObjstoreError
from ckpt.objstore.ids import ObjectId, hash_bytes, parse_oid

DICTIONARIES_FILE = "dictionaries"
COUNTERS_FILE = "dictionaries.counters"
_LOCK_FILE = "dictionaries.lock"
_FILE_FORMAT = 1
DICTIONARY_SIZE = 64 << 10
# Content up to this size is compressed with the dictionary: the gain per object falls with
# its size, its cost does not (on Linux, 64-256 KiB files gain 0.2% for a tenth more CPU).
SMALL_BOUND = 64 << 10
TRAIN_SAMPLES = 500
_HELD_OUT = 10  # one sample in this many measures the gain instead of training
CHECK_EVERY = 64
WINDOW = 16 * TRAIN_SAMPLES  # new small objects between two drift checks
DRIFT_MARGIN = 0.01


@dataclass(frozen=True, slots=True)
class DictionaryInfo:
    oid: ObjectId
    gain: float  # 1 - (stored with it) / (stored without it), on held-out samples at training


@dataclass(slots=True)
class _Pending:
    """Counters of this process not yet in the book."""

    stored: int = 0  # envelopes written with the current dictionary
    checked_plain: int = 0
    checked_dict: int = 0
    checks: int = 0


@dataclass(frozen=True, slots=True)
class DictionaryBook:
    """The content of the `dictionaries` file: every dictionary of the store, the gc roots."""

    dictionaries: tuple[DictionaryInfo, ...] = ()  # oldest first; the last is current

    @property
    def current(self) -> DictionaryInfo | None:
        return self.dictionaries[-1] if self.dictionaries else None

    def encode(self) -> bytes:
        return json.dumps({
            "format": _FILE_FORMAT,
            "dictionaries": [{"id": d.oid.hex(), "gain": d.gain} for d in self.dictionaries],
        }, indent=1).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, where: str) -> DictionaryBook:
        try:
            raw = json.loads(data)
            if raw["format"] != _FILE_FORMAT:
                raise ValueError(f"unknown format {raw['format']!r}")
            return cls(tuple(DictionaryInfo(parse_oid(d["id"]), float(d["gain"]))
                             for d in raw["dictionaries"]))
        except (ValueError, KeyError, TypeError) as exc:
            # Unreadable, the list of gc roots is unknown: nothing may be collected.
            raise CorruptObject(None, f"dictionary list {where}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Counters:
    """The content of the `dictionaries.counters` file: only statistics, written without
    fsync at each sync that wrote objects with a dictionary (unreadable: all zero)."""

    saved: int = 0  # estimated bytes saved by every dictionary-compressed put so far
    checked_plain: int = 0  # the checks' sizes without a dictionary
    checked_dict: int = 0  # and with one
    checks: int = 0  # how many checks those sums add up

    def encode(self) -> bytes:
        return json.dumps({"saved": self.saved, "checked_plain": self.checked_plain,
                           "checked_dict": self.checked_dict, "checks": self.checks}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Counters:
        try:
            raw = json.loads(data)
            return cls(int(raw["saved"]), int(raw["checked_plain"]), int(raw["checked_dict"]),
                       int(raw["checks"]))
        except (ValueError, KeyError, TypeError):
            return cls()

    def add(self, pending: _Pending, gain: float) -> Counters:
        """With this process's `pending` counts; `gain` (the current dictionary's at its
        training) stands in for the checks' ratio until there are checks."""
        plain = self.checked_plain + pending.checked_plain
        with_dictionary = self.checked_dict + pending.checked_dict
        if plain and with_dictionary:
            ratio = plain / with_dictionary
        else:
            ratio = 1 / (1 - gain) if gain < 1 else 1
        saved = max(0, round(pending.stored * ratio) - pending.stored)
        return Counters(self.saved + saved, plain, with_dictionary,
                        self.checks + pending.checks)


class Dictionaries:
    """A store's dictionaries: the book (read once, written at training and at `flush`), the
    loaded dictionaries (each verified once, by `load`), and this process's counters."""

    def __init__(self, store_path: str | None, *, enabled: bool) -> None:
        self.enabled = enabled
        self._path = None if store_path is None else os.path.join(store_path, DICTIONARIES_FILE)
        self._lock_path = None if store_path is None else os.path.join(store_path, _LOCK_FILE)
        self._counters_path = (None if store_path is None
                               else os.path.join(store_path, COUNTERS_FILE))
        self._book: DictionaryBook | None = None if store_path is not None else DictionaryBook()
        self._counters = Counters()  # an in-memory store's
        self._loaded: dict[ObjectId, codec.DictionaryData] = {}
        self._unreadable: set[ObjectId] = set()  # current ones that failed to load
        self._pending = _Pending()
        self._mutex = threading.Lock()

    # -- the book ------------------------------------------------------------------------

    @property
    def book(self) -> DictionaryBook:
        if self._book is None:
            self._book = self._read()
        return self._book

    def _read(self) -> DictionaryBook:
        assert self._path is not None
        try:
            with open(self._path, "rb") as stream:
                return DictionaryBook.decode(stream.read(), self._path)
        except FileNotFoundError:
            return DictionaryBook()

    def _update(self, change: Callable[[DictionaryBook], DictionaryBook]) -> None:
        """Apply `change` to the book as it is on disk now (another process may have written
        it), under the lock, and write it back atomically and durably: it lists gc roots."""
        if self._path is None:
            self._book = change(self.book)
            return
        with self._locked():
            book = change(self._read())
            write_atomically(self._path, book.encode(), fsync_file=True, fsync_dir=True,
                             mode=0o666)
            self._book = book

    @contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._lock_path is not None
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def counters(self) -> Counters:
        """The counters as they are on disk now (with every process's flushed counts)."""
        if self._counters_path is None:
            return self._counters
        try:
            with open(self._counters_path, "rb") as stream:
                return Counters.decode(stream.read())
        except FileNotFoundError:
            return Counters()

    def ids(self) -> tuple[ObjectId, ...]:
        """Every listed dictionary: gc roots. Read afresh (another process may have trained)."""
        if self._path is not None:
            self._book = self._read()
        return tuple(info.oid for info in self.book.dictionaries)

    def add(self, oid: ObjectId, gain: float) -> None:
        """List the stored dictionary `oid` as the current one."""
        def change(book: DictionaryBook) -> DictionaryBook:
            kept = tuple(d for d in book.dictionaries if d.oid != oid)
            return replace(book, dictionaries=(*kept, DictionaryInfo(oid, gain)))
        self._update(change)

    # -- use -----------------------------------------------------------------------------

    def current(self, load: Callable[[ObjectId], bytes]) -> codec.Dictionary | None:
        """The dictionary new puts use (None: none, dictionaries are off, or it cannot be
        read: new objects are not made with a damaged dictionary, and fsck reports it)."""
        info = self.book.current
        if not self.enabled or info is None or info.oid in self._unreadable:
            return None
        try:
            return info.oid, self.get(info.oid, load)
        except ObjstoreError:
            self._unreadable.add(info.oid)
            return None

    def get(self, oid: ObjectId, load: Callable[[ObjectId], bytes]
            ) -> codec.DictionaryData:
        """Dictionary `oid`, read with `load` (which verifies it) the first time."""
        dictionary = self._loaded.get(oid)
        if dictionary is None:
            dictionary = self._loaded[oid] = codec.load_dictionary(load(oid))
        return dictionary

    def forget_loaded(self) -> None:
        self._loaded.clear()
        self._unreadable.clear()

    def note(self, stored: int, check: tuple[int, int] | None = None) -> None:
        """Count an envelope of `stored` bytes written with the current dictionary and, for
        one in `CHECK_EVERY`, `check`: its size (without, with) the dictionary."""
        with self._mutex:
            pending = self._pending
            pending.stored += stored
            if check is not None:
                pending.checked_plain += check[0]
                pending.checked_dict += check[1]
                pending.checks += 1

    def flush(self) -> None:
        """Add this process's counts to the counters file (at `sync`)."""
        with self._mutex:
            pending, self._pending = self._pending, _Pending()
        if not pending.stored:
            return
        current = self.book.current
        gain = current.gain if current is not None else 0.0
        if self._counters_path is None:
            self._counters = self._counters.add(pending, gain)
            return
        with self._locked():
            counters = self.counters().add(pending, gain)
            # Statistics only: no fsync (a crash may lose the latest counts, never objects).
            write_atomically(self._counters_path, counters.encode(), fsync_file=False,
                             fsync_dir=False, mode=0o666)


@dataclass(slots=True)
class Sampler:
    """Samples kept for a training: one in `every` contents offered."""

    every: int = 1
    samples: list[bytes] = field(default_factory=list)
    offered: int = 0

    def offer(self, data: bytes) -> bool:
        """Offer a new small content; whether there are enough samples now to train."""
        self.offered += 1
        if self.offered % self.every == 0:
            self.samples.append(data)
        return len(self.samples) >= TRAIN_SAMPLES


@dataclass(frozen=True, slots=True)
class Trained:
    data: bytes  # the dictionary
    gain: float  # 1 - (held-out stored with it) / (held-out stored without one)
    gain_of_current: float  # the same for the dictionary in use (0.0: none)

    @property
    def drifted(self) -> bool:
        """Whether the content has drifted from the dictionary in use (see module doc)."""
        return self.gain - self.gain_of_current > DRIFT_MARGIN


def train(samples: Sequence[bytes], level: int,
          current: codec.Dictionary | None = None) -> Trained:
    """A dictionary trained on `samples` but one in `_HELD_OUT`, which measure it (and
    `current`) against no dictionary."""
    held_out = samples[::_HELD_OUT]
    training = [s for index, s in enumerate(samples) if index % _HELD_OUT]
    data = codec.train_dictionary(training, DICTIONARY_SIZE, level)
    plain = sum(len(codec.encode_object(s, level)) for s in held_out) or 1

    def gain(dictionary: codec.Dictionary | None) -> float:
        if dictionary is None:
            return 0.0
        return 1 - sum(len(codec.encode_with_dictionary(s, level, dictionary))
                       for s in held_out) / plain
    return Trained(data, gain((hash_bytes(data), codec.load_dictionary(data))), gain(current))


class PutDictionary:
    """The dictionary side of one `put_files` call: which dictionary its new batches use,
    the samples it keeps for a first training or a drift check, and the counters of what it
    wrote with a dictionary. Made by `ObjectStore.put_files` with the store's own steps."""

    __slots__ = ("_active", "_dictionaries", "_level", "_load", "_sampler", "_store",
                 "_written")

    def __init__(self, dictionaries: Dictionaries, *, level: int,
                 load: Callable[[ObjectId], bytes],
                 store: Callable[[Trained], ObjectId]) -> None:
        self._dictionaries = dictionaries
        self._level = level
        self._load = load
        self._store = store
        self._active = dictionaries.current(load)
        self._sampler = Sampler(1 if self._active is None else WINDOW // TRAIN_SAMPLES)
        self._written = 0

    @property
    def active(self) -> codec.Dictionary | None:
        """The dictionary a batch started now uses for its small objects."""
        return self._active

    def offer(self, data: bytes) -> None:
        """A new small object's content (`len(data) <= SMALL_BOUND`): maybe a sample; with
        enough, a training (the first, or a drift check, see module doc)."""
        if len(data) <= 64 or not self._sampler.offer(data):
            return
        samples = self._sampler.samples
        trained = train(samples, self._level, self._active)
        if trained.drifted:
            self._store(trained)
            self._active = self._dictionaries.current(self._load)
        # Windowed from now on, adopted or not: content a dictionary does not help (media,
        # random bytes) costs one training per window, not one per `TRAIN_SAMPLES`.
        self._sampler = Sampler(WINDOW // TRAIN_SAMPLES)

    def written(self, data: bytes, stored: bytes) -> None:
        """Count an envelope made with the active dictionary; check one in `CHECK_EVERY`."""
        self._written += 1
        check = None
        if self._written % CHECK_EVERY == 0:
            check = len(codec.encode_object(data, self._level)), len(stored)
        self._dictionaries.note(len(stored), check)
