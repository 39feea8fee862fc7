"""`ckpt bench`: measure ckpt's settings on the user's own tree, and recommend one.

API (what `cli/` calls; keep it stable)::

    run_tuning(root, *, store=None, levels=(1, 3, 6), threads=(1, 0), dictionaries=None,
               deltas=None, delta_chains=None, block_sizes=None, max_files=20_000, max_bytes=2 << 30,
               time_budget=300.0, on_too_large="sample", repeats=1, seed=1,
               scratch_dir=None, progress=None, clock=time.perf_counter) -> TuningResult
    render_table(result: TuningResult) -> str      # the human-readable table, no trailing newline
    result.to_json() -> dict                       # plain JSON data (the `--json` output)

    raises TuningError (a CheckpointError and ValueError, so the CLI exits 1 with its one-line
    message): root missing, nothing to capture, tree over the limits with on_too_large="refuse",
    scratch directory inside the root, or a restore that did not reproduce the tree.

- ``progress``: called with one-line status messages (the CLI shows them on a terminal);
  ``clock``: seconds, monotonic (injected for tests).
- ``root``: the user's tree. ``store``: their store (default ``<root>/.ckpt``); only its
  ``config.toml`` is read, for the ignore settings and ``max_file_size``. Neither is written.
- What is copied: exactly what a snapshot would capture (the ignore files, ``.ckptignore``,
  ``extra_ignore``, ``use_gitignore``, the store/``.git`` exclusions and ``max_file_size`` of
  their config): ignored build output would only make the copy slower without changing what a
  checkpoint costs. Copies keep modes, mtimes and symlinks (``shutil.copy2``).
- Bounds: when the captured tree has more than ``max_files`` files or ``max_bytes`` bytes, it
  is sampled (a seeded subset of files, ignore files always kept; the result says so and its
  times are for the sample) or, with ``on_too_large="refuse"``, refused. ``time_budget`` (s,
  copy included) stops the grid early: rows not run are reported with ``skipped`` set; the
  first row always runs.
- The grid: compression level x threads (threads 0 = one per CPU) at the store's storage
  settings (``dictionaries``, ``deltas``, ``delta_chain`` of its config, or the defaults), then
  one row per other value of a storage setting, that setting alone changed, at the default
  level and threads (or the grid's first): ``dictionaries``/``deltas`` (each a sequence of
  bools; None: the configured value, then the other), ``delta_chains`` (None: the
  configured one only; a chain matters only over many turns of the same files) and
  ``block_sizes`` (None: the configured one, then blocks off, or on at the default size when
  they are off: blocks shrink a first snapshot and cost a revert a little).
- Per grid row, in a fresh temporary store outside the copy: the first snapshot, a no-change
  snapshot, then a seeded small turn (up to 20 files edited, 5 added, 5 deleted; the same turn
  for every row), its snapshot, and a default restore to the first snapshot (its pre-restore
  save included), checked to reproduce the tree; plus the store size after the first snapshot
  and what the turn's snapshot added to it. ``repeats`` > 1 takes medians over fresh stores.
- Recommendation: among rows whose session store (allocated bytes after the first snapshot
  plus ``SESSION_TURNS`` times what the turn added) is within 10% of the smallest, the one with
  the lowest snapshot + no-change + turn + restore time; the defaults (StoreConfig's settings)
  when they are within 5% of that, since smaller differences are noise on a shared machine.

Must not: write anywhere but its own scratch directory (removed at the end), print, or exit;
or use more of the library than the public API of ``ckpt.checkpoints``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import blake3

from ckpt.checkpoints import (
    CONFIG_KEYS,
    STORE_NAME,
    CheckpointError,
    Checkpoints,
    DirRules,
    IgnoreRules,
    StoreConfig,
    read_config,
    write_config,
)
from ckpt.tuning.workload import PROTECTED_NAMES, Turn, apply_turn, measure_tree, plan_turn

DEFAULT_LEVELS = (1, 3, 6)
DEFAULT_THREADS = (1, 0)
DEFAULT_SETTING = (StoreConfig().compression_level, StoreConfig().threads)
# The storage settings the grid varies one at a time, where this ckpt has them.
STORAGE_KEYS = tuple(k for k in ("dictionaries", "deltas", "delta_chain", "block_size")
                     if k in CONFIG_KEYS)
SESSION_TURNS = 100  # the session a store size is judged by: the first snapshot + N such turns
STORE_SLACK = 1.10  # "within 10% of the smallest store"
DEFAULT_SLACK = 1.05  # keep the defaults when they are this close to the fastest
RACY_PAUSE_S = 0.03  # > checkpoints.snapshot.statcache.RACY_WINDOW_NS: a real turn takes seconds
IGNORE_FILES = frozenset({".gitignore", ".ckptignore"})

Progress = Callable[[str], None]


class TuningError(CheckpointError, ValueError):
    """`ckpt bench` cannot measure this tree; the message says why and what to do."""


# -- results ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Storage:
    """The storage settings of a row: None where this ckpt has no such setting."""

    dictionaries: bool | None = None
    deltas: bool | None = None
    delta_chain: int | None = None
    block_size: int | None = None

    @classmethod
    def of(cls, config: StoreConfig) -> Storage:
        return cls(**{key: getattr(config, key) for key in STORAGE_KEYS})

    def settings(self) -> dict[str, bool | int]:
        return {key: value for key in STORAGE_KEYS
                if (value := getattr(self, key)) is not None}


@dataclass(frozen=True, slots=True)
class TuningRow:
    """One setting's measurements (seconds, bytes); all None with `skipped` set if not run."""

    compression_level: int
    threads: int  # as it would be configured; 0 = one per CPU
    threads_effective: int
    dictionaries: bool | None = None  # the storage settings (None: not a setting of this ckpt)
    deltas: bool | None = None
    delta_chain: int | None = None
    block_size: int | None = None
    snapshot_s: float | None = None
    no_change_s: float | None = None
    turn_s: float | None = None  # the snapshot after the turn
    restore_s: float | None = None
    store_bytes: int | None = None  # apparent size of the store after the first snapshot
    store_allocated_bytes: int | None = None  # disk blocks used (what `du` shows)
    store_files: int | None = None
    turn_store_bytes: int | None = None  # what the turn's snapshot added (apparent bytes)
    session_store_bytes: int | None = None  # allocated + SESSION_TURNS x turn_store_bytes
    skipped: str | None = None

    @property
    def measured(self) -> bool:
        return self.skipped is None

    @property
    def storage(self) -> Storage:
        return Storage(self.dictionaries, self.deltas, self.delta_chain, self.block_size)

    @property
    def setting(self) -> tuple[int, int, Storage]:
        return (self.compression_level, self.threads, self.storage)

    @property
    def total_s(self) -> float:
        assert self.snapshot_s is not None and self.no_change_s is not None
        assert self.restore_s is not None
        return self.snapshot_s + self.no_change_s + (self.turn_s or 0.0) + self.restore_s

    @property
    def session_bytes(self) -> int:
        """What the recommendation compares: the session store, or the first one's."""
        if self.session_store_bytes is not None:
            return self.session_store_bytes
        return self.store_allocated_bytes or 0


@dataclass(frozen=True, slots=True)
class Recommendation:
    compression_level: int
    threads: int
    reason: str  # one line
    dictionaries: bool | None = None
    deltas: bool | None = None
    delta_chain: int | None = None
    block_size: int | None = None

    @property
    def commands(self) -> list[str]:
        settings: dict[str, object] = {"compression_level": self.compression_level,
                                       "threads": self.threads}
        settings.update(Storage(self.dictionaries, self.deltas, self.delta_chain,
                                self.block_size).settings())
        return [f"ckpt config set {key} {_config_text(value)}" for key, value in settings.items()]


def _config_text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class TuningResult:
    root: str
    captured_files: int  # what a snapshot of the whole tree captures
    captured_bytes: int
    files: int  # what was measured (fewer when sampled)
    bytes: int
    sampled: bool
    note: str | None  # how the tree was sampled, or None
    turn: dict[str, int]  # {"edited", "added", "deleted", "seed"}
    repeats: int
    rows: tuple[TuningRow, ...]
    recommendation: Recommendation
    duration_s: float
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["recommendation"]["commands"] = self.recommendation.commands
        return data


# -- what a snapshot would capture ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Item:
    rel: str
    kind: Literal["file", "symlink"]
    size: int


def _user_config(store_dir: str) -> StoreConfig:
    return read_config(store_dir) if os.path.isdir(store_dir) else StoreConfig()


def list_capture(root: str, store_dir: str, config: StoreConfig) -> tuple[list[_Item], list[str]]:
    """Files and symlinks a snapshot of ``root`` would capture, and every directory (rel paths).

    Uses ckpt's own ignore rules with the user's settings; reads directories and ignore files
    only. Special files, unreadable directories and files over ``max_file_size`` are left out,
    as a snapshot skips them.
    """
    root_b = os.fsencode(root)
    rel_store = os.path.relpath(store_dir, root)
    excluded = [] if rel_store.startswith("..") or rel_store == "." else [os.fsencode(rel_store)]
    rules = IgnoreRules.load(root_b, use_gitignore=config.use_gitignore,
                             extra_patterns=config.extra_ignore, excluded=excluded)
    items: list[_Item] = []
    dirs: list[str] = []
    stack: list[tuple[bytes, bytes, DirRules]] = [(b"", root_b, rules.root_context())]
    while stack:
        rel_dir, abs_dir, dir_rules = stack.pop()
        try:
            entries = list(os.scandir(abs_dir))
        except OSError:
            continue
        for entry in entries:
            name: bytes = entry.name
            rel = rel_dir + b"/" + name if rel_dir else name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if dir_rules.is_ignored(name, is_dir=is_dir):
                    continue
                if is_dir:
                    dirs.append(os.fsdecode(rel))
                    stack.append((rel, entry.path, dir_rules.enter(name)))
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_symlink():
                items.append(_Item(os.fsdecode(rel), "symlink", 0))
            elif entry.is_file(follow_symlinks=False):
                if config.max_file_size and st.st_size > config.max_file_size:
                    continue
                items.append(_Item(os.fsdecode(rel), "file", st.st_size))
    items.sort(key=lambda i: i.rel)
    return items, sorted(dirs)


def choose_sample(items: list[_Item], *, max_files: int, max_bytes: int,
                  seed: int) -> list[_Item]:
    """A seeded subset within both limits; ignore files are always kept (they decide capture)."""
    keep = [i for i in items if os.path.basename(i.rel) in IGNORE_FILES]
    rest = [i for i in items if os.path.basename(i.rel) not in IGNORE_FILES]
    random.Random(seed).shuffle(rest)
    chosen, total = list(keep), sum(i.size for i in keep)
    for item in rest:
        if len(chosen) >= max_files:
            break
        if total + item.size > max_bytes:
            continue
        chosen.append(item)
        total += item.size
    return sorted(chosen, key=lambda i: i.rel)


def copy_capture(root: Path, dest: Path, items: Sequence[_Item],
                 dirs: Sequence[str]) -> list[_Item]:
    """Copy ``items`` from ``root`` into the new directory ``dest``, keeping modes and mtimes.

    Returns the items copied: one that cannot be read (or vanished) is left out, as a snapshot
    would skip it.
    """
    dest.mkdir()
    for rel in dirs:
        (dest / rel).mkdir(parents=True, exist_ok=True)
    copied = []
    for item in items:
        target = dest / item.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        source = root / item.rel
        try:
            if item.kind == "symlink":
                os.symlink(os.readlink(source), target)
            else:
                shutil.copy2(source, target, follow_symlinks=False)
        except OSError:
            target.unlink(missing_ok=True)
            continue
        copied.append(item)
    for rel in sorted(dirs, reverse=True):  # directory mtimes last: creating children moved them
        try:
            st = os.stat(root / rel, follow_symlinks=False)
            os.utime(dest / rel, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        except OSError:
            pass
    return copied


# -- measuring --------------------------------------------------------------------------------

def _hash(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return blake3.blake3(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def _plan_small_turn(copy: Path, items: Sequence[_Item], seed: int, config: StoreConfig) -> Turn:
    pool = [i.rel for i in items
            if i.kind == "file" and os.path.basename(i.rel) not in PROTECTED_NAMES]
    if not pool:
        raise TuningError(f"nothing to measure in {copy}: no regular files a snapshot captures")
    edits = min(20, max(1, len(pool) // 2))
    deletes = min(5, len(pool) - edits)
    rules = IgnoreRules.load(os.fsencode(copy), use_gitignore=config.use_gitignore,
                             extra_patterns=config.extra_ignore)

    def hidden(paths: Sequence[str]) -> set[str]:
        return {p for p in paths if rules.is_ignored_path(os.fsencode(p), is_dir=False)}

    return plan_turn(pool, seed, edits=edits, adds=5, deletes=deletes, find_ignored=hidden)


def _measure_row(copy: Path, store: Path, config: StoreConfig, turn: Turn,
                 clock: Callable[[], float]) -> dict[str, Any]:
    Checkpoints.init(copy, store=store).close()
    write_config(str(store), config)
    before = {p: _hash(copy / p) for p in turn.paths}
    with Checkpoints.open(copy, store=store) as cp:
        started = clock()
        first = cp.create(label="ckpt bench: first")
        snapshot_s = clock() - started
        cp.settle()  # each step times the call alone; its bookkeeping must not run into the next
        size = measure_tree(store)
        started = clock()
        again = cp.create(label="ckpt bench: no change")
        no_change_s = clock() - started
        cp.settle()
        if again.tree != first.tree:
            raise TuningError(f"{copy} changed during the measurement (is something writing to "
                              "the scratch directory?)")
        apply_turn(copy, turn)
        time.sleep(RACY_PAUSE_S)
        before_turn = measure_tree(store)
        started = clock()
        cp.create(label="ckpt bench: turn")
        turn_s = clock() - started
        cp.settle()
        turn_bytes = measure_tree(store).apparent_bytes - before_turn.apparent_bytes
        started = clock()
        cp.restore(first.id)
        restore_s = clock() - started
    after = {p: _hash(copy / p) for p in turn.paths}
    if after != before:
        wrong = sorted(p for p in turn.paths if after[p] != before[p])
        raise TuningError(f"restore did not reproduce the tree (differs at {wrong[:3]}); "
                          "this is a bug in ckpt, please report it")
    shutil.rmtree(store)
    return {"snapshot_s": snapshot_s, "no_change_s": no_change_s, "turn_s": turn_s,
            "restore_s": restore_s, "store_bytes": size.apparent_bytes,
            "store_allocated_bytes": size.allocated_bytes, "store_files": size.files,
            "turn_store_bytes": max(0, turn_bytes)}


def _median_row(level: int, threads: int, storage: Storage,
                runs: list[dict[str, Any]]) -> TuningRow:
    merged = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    for key in ("snapshot_s", "no_change_s", "turn_s", "restore_s"):
        merged[key] = round(merged[key], 4)
    for key in ("store_bytes", "store_allocated_bytes", "store_files", "turn_store_bytes"):
        merged[key] = int(merged[key])
    merged["session_store_bytes"] = (merged["store_allocated_bytes"]
                                     + SESSION_TURNS * merged["turn_store_bytes"])
    return TuningRow(level, threads, threads or os.cpu_count() or 1,
                     storage.dictionaries, storage.deltas, storage.delta_chain,
                     storage.block_size, **merged)


def default_setting() -> tuple[int, int, Storage]:
    """StoreConfig's own level, threads and storage settings."""
    return (*DEFAULT_SETTING, Storage.of(StoreConfig()))


def recommend(rows: Sequence[TuningRow]) -> Recommendation:
    """The fastest setting whose session store is within 10% of the smallest (defaults if
    close)."""
    measured = [r for r in rows if r.measured]
    if not measured:
        raise TuningError("no setting was measured (time budget too small?)")
    smallest = min(r.session_bytes for r in measured)
    candidates = [r for r in measured if r.session_bytes <= smallest * STORE_SLACK]
    best = min(candidates, key=lambda r: (r.total_s, r.compression_level, r.threads))
    default = next((r for r in candidates if r.setting == default_setting()), None)
    size = (f"the store after the first snapshot and {SESSION_TURNS} such turns within "
            f"{STORE_SLACK - 1:.0%} of the smallest ({_mb(smallest)})")
    if default is not None and default is not best and default.total_s <= best.total_s * DEFAULT_SLACK:
        return _recommendation(default, (
            f"keep the defaults: within {DEFAULT_SLACK - 1:.0%} of the fastest setting "
            f"({_setting(best)}, {best.total_s:.2f} s vs {default.total_s:.2f} s) and {size}"))
    return _recommendation(best, (
        f"fastest snapshot + no-change + turn + restore ({best.total_s:.2f} s) with {size}"))


def _recommendation(row: TuningRow, reason: str) -> Recommendation:
    return Recommendation(row.compression_level, row.threads, reason, row.dictionaries,
                          row.deltas, row.delta_chain, row.block_size)


def _setting(row: TuningRow) -> str:
    threads = "auto" if row.threads == 0 else str(row.threads)
    storage = "".join(f", {key.replace('_', ' ')} {_config_text(value)}"
                      for key, value in row.storage.settings().items())
    return f"level {row.compression_level}, threads {threads}{storage}"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


@dataclass(frozen=True, slots=True)
class _Capture:
    """What will be copied: the items and directories, and what a whole snapshot captures."""

    items: list[_Item]
    dirs: list[str]
    captured_files: int
    captured_bytes: int
    note: str | None  # how the tree was sampled, or None


def _bounded_capture(root_abs: str, store_abs: str, config: StoreConfig, *, max_files: int,
                     max_bytes: int, on_too_large: Literal["sample", "refuse"],
                     seed: int) -> _Capture:
    """What a snapshot of ``root_abs`` captures, sampled (or refused) when over the limits."""
    items, dirs = list_capture(root_abs, store_abs, config)
    captured_files, captured_bytes = len(items), sum(i.size for i in items)
    note = None
    if captured_files > max_files or captured_bytes > max_bytes:
        over = (f"{root_abs} has {captured_files:,} files / {_mb(captured_bytes)} to capture, "
                f"over the limit of {max_files:,} files / {_mb(max_bytes)}")
        if on_too_large == "refuse":
            raise TuningError(f"{over}; raise --max-files/--max-bytes, or let it sample")
        items = choose_sample(items, max_files=max_files, max_bytes=max_bytes, seed=seed)
        dirs = sorted({os.path.dirname(i.rel) for i in items} - {""})
        note = (f"sampled {len(items):,} of {captured_files:,} files (seed {seed}): times are "
                "for the sample; whole-tree snapshots take about proportionally longer")
    if not any(i.kind == "file" for i in items):
        raise TuningError(f"nothing to measure: a snapshot of {root_abs} captures no files")
    return _Capture(items, dirs, captured_files, captured_bytes, note)


def _scratch_parent(scratch_dir: str | os.PathLike[str] | None, *guarded: str) -> str:
    """Where the scratch directory goes: refused inside the user's tree or store, checked
    before anything is created there."""
    parent = os.path.realpath(os.fspath(scratch_dir) if scratch_dir else tempfile.gettempdir())
    for inside in guarded:
        if os.path.commonpath([inside, parent]) == inside:
            raise TuningError(f"scratch directory {parent} is inside {inside}; "
                              "choose one elsewhere (--scratch or TMPDIR)")
    return parent


def _run_grid(copy: Path, scratch: Path, configs: Sequence[StoreConfig], turn: Turn, *,
              repeats: int, time_budget: float, started: float, clock: Callable[[], float],
              say: Progress) -> list[TuningRow]:
    """One row per setting; once the budget cannot fit another row as slow as the slowest so
    far, the rest are reported as skipped (the first row always runs)."""
    rows: list[TuningRow] = []
    row_seconds: list[float] = []
    for index, config in enumerate(configs):
        level, t, storage = config.compression_level, config.threads, Storage.of(config)
        elapsed = clock() - started
        if rows and elapsed + max(row_seconds) > time_budget:
            rows.append(TuningRow(level, t, t or os.cpu_count() or 1, storage.dictionaries,
                                  storage.deltas, storage.delta_chain, storage.block_size,
                                  skipped=f"time budget of {time_budget:g} s reached"))
            continue
        say(f"[{index + 1}/{len(configs)}] compression level {level}, threads {t or 'auto'}"
            + "".join(f", {k} {_config_text(v)}" for k, v in storage.settings().items()))
        row_started = clock()
        runs = [_measure_row(copy, scratch / f"store-{index}-{r}", config, turn, clock)
                for r in range(repeats)]
        row_seconds.append(clock() - row_started)
        rows.append(_median_row(level, t, storage, runs))
    return rows


def grid_configs(base: StoreConfig, levels: Sequence[int], threads: Sequence[int], *,
                 dictionaries: Sequence[bool] | None = None, deltas: Sequence[bool] | None = None,
                 delta_chains: Sequence[int] | None = None,
                 block_sizes: Sequence[int] | None = None) -> list[StoreConfig]:
    """The settings to measure, in order: levels x threads at ``base``'s storage settings, then
    each other storage value alone at the default level and threads (or the grid's first).

    A storage setting this ckpt does not have is left out whatever is asked for it.
    """
    configs = [dataclasses.replace(base, compression_level=level, threads=t, retention_cap=0)
               for level in levels for t in threads]  # validates the grid
    at = next((c for c in configs if (c.compression_level, c.threads) == DEFAULT_SETTING),
              configs[0])
    asked: dict[str, Sequence[Any] | None] = {
        "dictionaries": dictionaries, "deltas": deltas, "delta_chain": delta_chains,
        "block_size": block_sizes}
    for key in STORAGE_KEYS:
        current = getattr(base, key)
        values = asked[key]
        if values is None:  # the other value of a switch; blocks on or off; a chain only
            if isinstance(current, bool):  # when asked for
                values = [current, not current]
            elif key == "block_size":
                values = [current, 0 if current else StoreConfig().block_size]
            else:
                values = [current]
        changes: list[dict[str, Any]] = [{key: v} for v in dict.fromkeys(values) if v != current]
        configs += [dataclasses.replace(at, **change) for change in changes]
    return configs


def run_tuning(root: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None,
               levels: Sequence[int] = DEFAULT_LEVELS, threads: Sequence[int] = DEFAULT_THREADS,
               dictionaries: Sequence[bool] | None = None, deltas: Sequence[bool] | None = None,
               delta_chains: Sequence[int] | None = None,
               block_sizes: Sequence[int] | None = None, max_files: int = 20_000, max_bytes: int = 2 << 30, time_budget: float = 300.0,
               on_too_large: Literal["sample", "refuse"] = "sample", repeats: int = 1,
               seed: int = 1, scratch_dir: str | os.PathLike[str] | None = None,
               progress: Progress | None = None,
               clock: Callable[[], float] = time.perf_counter) -> TuningResult:
    """Measure the grid of settings on a scratch copy of ``root``; see the module docstring."""
    say = progress or (lambda _msg: None)
    started = clock()
    root_abs = os.path.realpath(os.path.expanduser(os.fspath(root)))
    if not os.path.isdir(root_abs):
        raise TuningError(f"not a directory: {root_abs}")
    if max_files < 1 or max_bytes < 1 or repeats < 1 or time_budget <= 0:
        raise TuningError("max_files, max_bytes, repeats and time_budget must be positive")
    if not levels or not threads:
        raise TuningError("give at least one compression level and one thread count")
    store_abs = os.path.abspath(os.fspath(store)) if store else os.path.join(root_abs, STORE_NAME)
    configs = grid_configs(_user_config(store_abs), levels, threads,
                           dictionaries=dictionaries, deltas=deltas, delta_chains=delta_chains,
                           block_sizes=block_sizes)

    say(f"listing what a snapshot of {root_abs} captures")
    capture = _bounded_capture(root_abs, store_abs, configs[0], max_files=max_files,
                               max_bytes=max_bytes, on_too_large=on_too_large, seed=seed)
    parent = _scratch_parent(scratch_dir, root_abs, store_abs)
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=parent))
    try:
        copy = scratch / "tree"
        say(f"copying {len(capture.items):,} files to {copy}")
        items = copy_capture(Path(root_abs), copy, capture.items, capture.dirs)
        turn = _plan_small_turn(copy, items, seed, configs[0])
        rows = _run_grid(copy, scratch, configs, turn, repeats=repeats,
                         time_budget=time_budget, started=started, clock=clock, say=say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TuningResult(
        root=root_abs, captured_files=capture.captured_files,
        captured_bytes=capture.captured_bytes, files=len(items),
        bytes=sum(i.size for i in items), sampled=capture.note is not None, note=capture.note,
        turn={"edited": len(turn.edits), "added": len(turn.adds), "deleted": len(turn.deletes),
              "seed": seed},
        repeats=repeats, rows=tuple(rows), recommendation=recommend(rows),
        duration_s=round(clock() - started, 3),
        machine={"cpus": os.cpu_count() or 1, "cpu": _cpu_model()})


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


# -- rendering --------------------------------------------------------------------------------

_HEADS = {"dictionaries": ("dict", 5), "deltas": ("deltas", 6), "delta_chain": ("chain", 5),
          "block_size": ("block", 7)}
_STORAGE_HEADS = [_HEADS[key] for key in STORAGE_KEYS]


def _storage_cell(value: bool | int | None) -> str:
    if value is None:
        return "-"
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def render_table(result: TuningResult) -> str:
    """The result as text: what was measured, one row per setting, the recommendation."""
    turn = result.turn
    lines = [
        f"ckpt bench: {result.root}",
        (f"  {result.files:,} files, {_mb(result.bytes)} measured"
         + (f" ({result.note})" if result.note else " (everything a snapshot captures)")),
        (f"  turn before restore: {turn['edited']} edited, {turn['added']} added, "
         f"{turn['deleted']} deleted (seed {turn['seed']}); {result.machine.get('cpus', '?')} "
         f"CPUs; {result.repeats} run(s) per setting, median"),
        "  a scratch copy and temporary stores were used: your tree and store were not touched",
        "",
        (f"{'level':>5} {'threads':>8}" + "".join(f" {h:>{w}}" for h, w in _STORAGE_HEADS)
         + f" {'snapshot s':>11} {'no-change s':>12} {'turn s':>7} {'restore s':>10}"
         f" {'store MB':>9} {'on disk MB':>11} {'files':>8} {'turn KB':>8}"
         f" {f'+{SESSION_TURNS} MB':>9}"),
    ]
    rec = result.recommendation
    chosen = (rec.compression_level, rec.threads,
              Storage(rec.dictionaries, rec.deltas, rec.delta_chain, rec.block_size))
    for row in result.rows:
        mark = " <" if row.setting == chosen else ""
        threads = "auto" if row.threads == 0 else str(row.threads)
        head = f"{row.compression_level:>5} {threads:>8}" + "".join(
            f" {_storage_cell(getattr(row, key)):>{w}}" for key, (_, w) in
            zip(STORAGE_KEYS, _STORAGE_HEADS))
        if not row.measured:
            lines.append(f"{head}  skipped: {row.skipped}")
            continue
        lines.append(
            f"{head} {row.snapshot_s:>11.3f} {row.no_change_s:>12.3f} {row.turn_s or 0:>7.3f}"
            f" {row.restore_s:>10.3f} {(row.store_bytes or 0) / 1e6:>9.1f}"
            f" {(row.store_allocated_bytes or 0) / 1e6:>11.1f} {row.store_files or 0:>8,}"
            f" {(row.turn_store_bytes or 0) / 1e3:>8.1f} {row.session_bytes / 1e6:>9.1f}{mark}")
    auto = " (auto)" if rec.threads == 0 else ""
    storage = "".join(f", {key} {_config_text(value)}" for key, value in chosen[2].settings().items())
    lines += ["", (f"recommended: compression_level {rec.compression_level}, threads "
                   f"{rec.threads}{auto}{storage} - {rec.reason}"),
              "  " + " && ".join(rec.commands)]
    return "\n".join(lines)
