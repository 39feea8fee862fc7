"""Which checkpoints go where: push, pull, a remote's history, fetching what a hollow checkpoint
needs, and fsck, gc and prune of a remote.

The bytes on S3 (packs, indexes, records, heads, locks) are `ckpt.objstore.remote`'s, imported
here only when a remote is used, so that local commands never load it nor the S3 client. The
order of durable steps:

    push(records):
        with the remote's shared lock:
            todo  = records whose ids the remote's records/ lacks, oldest first
            upload(what their trees hold that no checkpoint on the remote holds: a tree
                   diff, remote/push.py)          # packs PUT, verified, indexed
            put_record(each of todo)          # If-None-Match: only once all it needs is indexed
            update_head(each session)         # If-Match loop: two pushers merge, none is lost
    pull:
        with the remote's shared lock: fetch the records this store lacks (decoded, checked)
        mark them hollow (remote/config.py origins), then adopt them under the root's write
        lock (a pending record file + its row per checkpoint, as a create writes one)
    hydrate(record):                          # before a restore, diff or show of a hollow one
        fetch the missing trees level by level, then the missing blobs; mark it local

A record names only objects already indexed on the remote, and a checkpoint adopted locally
is hollow until its objects are here: neither side ever points at what it cannot read.
Must not touch the working tree (restore/restorer.py does, after `hydrate`) nor print.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from ckpt.checkpoints.errors import AmbiguousCheckpoint
from ckpt.checkpoints.history.records import BadRecord, decode_record, record_name, to_us
from ckpt.checkpoints.model import CheckpointRecord
from ckpt.checkpoints.remote.config import (
    BadRemote,
    Origin,
    Pulled,
    RemoteDataDamaged,
    RemoteInfo,
    cache_dir,
    choose_remote,
    mark_pushed,
    read_origins,
    read_remotes,
    update_origins,
)
from ckpt.objstore import EntryKind
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.codec import pack_data, unpack_data

if TYPE_CHECKING:
    from ckpt.checkpoints.history.records import Row
    from ckpt.checkpoints.remote.reports import PullReport, PushReport, RemoteCheck, RemoteGc
    from ckpt.checkpoints.restore.staging import BlobFetch
    from ckpt.checkpoints.workspace import Workspace
    from ckpt.objstore import ObjectId, ObjectStore
    from ckpt.objstore.remote.repo import Arrived, RemoteRepo

RECORD_CACHE = "record-files"  # beside the object layer's own cache files


# A pulled record before adoption: (row, tracked paths, record).
Fetched = tuple["Row", tuple[bytes, ...], CheckpointRecord]


def check_url(url: str, endpoint: str | None, region: str | None) -> None:
    """Refuse a URL the object layer cannot use (BadRemote), before it goes in remotes.toml."""
    from ckpt.objstore.remote.url import parse_remote_url  # noqa: PLC0415 (remote code on use)

    for value in (url, endpoint, region):
        if value is not None and not value.isprintable():
            raise BadRemote(url, "holds a character that cannot be written (a control "
                            "character, or bytes that are not UTF-8)")
    try:
        parse_remote_url(url, endpoint=endpoint, region=region)
    except ValueError as exc:
        raise BadRemote(url, str(exc)) from None


class Remote:
    """One configured remote of the store a `Workspace` is in, connected on first use."""

    def __init__(self, ws: Workspace, info: RemoteInfo) -> None:
        self.ws = ws
        self.info = info
        self._repo: RemoteRepo | None = None

    @classmethod
    def choose(cls, ws: Workspace, name: str | None) -> Remote:
        return cls(ws, choose_remote(ws.store_dir, name))

    def repo(self, *, create: bool = False) -> RemoteRepo:
        if self._repo is None:
            from ckpt.objstore.remote.repo import RemoteRepo  # noqa: PLC0415 (see the module)
            from ckpt.objstore.remote.url import parse_remote_url  # noqa: PLC0415

            try:
                spec = parse_remote_url(self.info.url, endpoint=self.info.endpoint,
                                        region=self.info.region)
            except ValueError as exc:
                raise BadRemote(self.info.url, str(exc)) from None
            self._repo = RemoteRepo.connect(spec, cache_dir(self.ws.store_dir, self.info.name),
                                            create=create)
        return self._repo

    def close(self) -> None:
        repo, self._repo = self._repo, None
        if repo is not None:
            repo.close()

    @contextmanager
    def locked(self, kind: Literal["shared", "exclusive"], *,
               create: bool = False) -> Iterator[RemoteRepo]:
        repo = self.repo(create=create)
        with repo.lock(kind):
            yield repo

    # -- records on the remote ------------------------------------------------------------

    def _cached_record(self, repo: RemoteRepo, name: str) -> Fetched:
        """The remote's record `name`, decoded (a copy is kept: same id, same bytes)."""
        key = f"records/{name}"
        if "/" in name or name.startswith(".") or not name:  # a key that names no record file
            raise RemoteDataDamaged(self.info.url, key, "not a checkpoint record's name")
        folder = os.path.join(cache_dir(self.ws.store_dir, self.info.name), RECORD_CACHE)
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as stream:
                return decode_record(stream.read())
        except (FileNotFoundError, BadRecord):
            pass
        data = repo.get_record(name)
        try:
            fetched = decode_record(data)
        except BadRecord as exc:
            raise RemoteDataDamaged(self.info.url, key, exc.args[0]) from None
        if record_name(fetched[2].id) != name:  # a record must not pass for another id
            raise RemoteDataDamaged(self.info.url, key,
                                    f"holds checkpoint {fetched[2].id}, not {name}")
        os.makedirs(folder, exist_ok=True)
        write_atomically(path, data, fsync_file=False, fsync_dir=False, temp_prefix=".tmp-")
        return fetched

    def records(self, repo: RemoteRepo, *, session: str | None = None,
                names: Iterable[str] | None = None) -> list[Fetched]:
        """The remote's records (of `session`), oldest first."""
        found = [self._cached_record(repo, name)
                 for name in (repo.list_records() if names is None else names)]
        found = [f for f in found if session is None or f[2].session == session]
        found.sort(key=lambda f: (f[2].created_at, f[2].id))
        return found

    def history(self, *, session: str | None) -> list[CheckpointRecord]:
        with self.locked("shared") as repo:
            return [f[2] for f in self.records(repo, session=session)]

    def find(self, ref: str) -> Fetched | None:
        """The remote's record whose id is `ref` or starts with it (None: none has it)."""
        with self.locked("shared") as repo:
            names = repo.list_records()
            exact = record_name(ref)
            if exact in names:
                return self._cached_record(repo, exact)
            matches = sorted(n for n in names if n.startswith(ref))
            if len(matches) > 1:
                raise AmbiguousCheckpoint(ref, matches[:10])
            return self._cached_record(repo, matches[0]) if matches else None

    # -- push -----------------------------------------------------------------------------

    def push(self, records: Sequence[CheckpointRecord],
             progress: Callable[[int, int], None] | None = None) -> PushReport:
        from ckpt.checkpoints.remote.push import plan_push  # noqa: PLC0415
        from ckpt.checkpoints.remote.reports import PushReport  # noqa: PLC0415 (lazy: see reports)

        ws = self.ws
        hollow = {i for i, p in read_origins(ws.store_dir).items() if p.state is Origin.HOLLOW}
        wanted = sorted(records, key=lambda r: (r.created_at, r.id))
        with self.locked("shared", create=True) as repo:
            known = set(repo.list_records())
            present = tuple(r.id for r in wanted if record_name(r.id) in known)
            # A hollow checkpoint's objects are not here: it can go only where it came from.
            lacking = [r for r in wanted if record_name(r.id) not in known]
            skipped = tuple(r.id for r in lacking if r.id in hollow)
            todo = [r for r in lacking if r.id not in hollow]
            objects = packs = sent = 0
            if todo:
                bases = self._bases(todo, known, hollow)
                upload = repo.upload(ws.objects, plan_push(ws.objects, todo, bases).oids,
                                     progress=progress)
                objects, packs, sent = upload.objects, upload.packs, upload.bytes_uploaded
            for record in todo:  # only now: every object they need is indexed
                with open(ws.catalog.records.file(record.id), "rb") as stream:
                    repo.put_record(record_name(record.id), stream.read())
            for session in sorted({r.session for r in todo}):
                mine = [r for r in todo if r.session == session]
                repo.update_head(session, lambda old, mine=mine: _merge_head(old, mine))  # type: ignore[misc]
        mark_pushed(ws.store_dir, self.info.name)
        return PushReport(self.info.name, tuple(r.id for r in todo), present, objects, packs,
                          sent, skipped)

    def _bases(self, todo: Sequence[CheckpointRecord], known: set[str], hollow: set[str]
               ) -> list[CheckpointRecord]:
        """The local checkpoints of `todo`'s sessions whose records are on the remote (so are
        all their objects) and whose objects are all here (not hollow): what a push diffs
        against."""
        found: list[CheckpointRecord] = []
        for session in sorted({r.session for r in todo}):
            found += [r for r in self.ws.catalog.history(session=session)
                      if r.id not in hollow and record_name(r.id) in known]
        return found

    # -- pull -----------------------------------------------------------------------------

    def fetch_records(self, *, session: str | None, ids: Iterable[str] | None = None
                      ) -> tuple[list[Fetched], int]:
        """The remote's records this store lacks (of `session`, or these ids), oldest first,
        and how many it already has."""
        local = self.ws.catalog.records.names()
        with self.locked("shared") as repo:
            names = repo.list_records() if ids is None else [record_name(i) for i in ids]
            missing = [n for n in names if n not in local]
            fetched = self.records(repo, session=session, names=missing)
        present = len(names) - len(missing)
        return fetched, present

    def adopt(self, fetched: Sequence[Fetched]) -> PullReport:
        """Add pulled records to the catalog as hollow checkpoints. The caller holds the
        root's write lock: each record file is written pending inside the transaction that
        inserts its row (as `Catalog.add_checkpoint` does), so an open in between never
        sees a record file the catalog lacks."""
        from ckpt.checkpoints.remote.reports import PullReport  # noqa: PLC0415 (lazy: see reports)

        catalog = self.ws.catalog
        update_origins(self.ws.store_dir, {f[2].id: Pulled(self.info.name, Origin.HOLLOW)
                                           for f in fetched})
        names: list[str] = []
        added: list[str] = []
        with catalog.transaction() as conn:
            for row, tracked, record in fetched:
                if conn.execute("SELECT 1 FROM checkpoints WHERE id = ?",
                                (record.id,)).fetchone():
                    continue
                names.append(catalog.records.write_pending(row, tracked))
                catalog.insert_row(conn, row)
                added.append(record.id)
        for name in names:
            catalog.records.publish(name)
        return PullReport(self.info.name, tuple(added), len(fetched) - len(added))

    # -- objects a checkpoint needs ---------------------------------------------------------

    def hydrate(self, record: CheckpointRecord) -> int:
        """Fetch every object of `record`'s tree that the local store lacks, then mark it
        local (`hydrating`, with nothing done while its blobs arrive). Returns how many
        objects were fetched."""
        with self.hydrating(record) as fetch_blobs:
            return fetch_blobs(None)

    @contextmanager
    def hydrating(self, record: CheckpointRecord) -> Iterator[BlobFetch]:
        """Within: `record`'s trees are in the local store (fetched level by level, each
        verified by its hash as it is read), and the remote's shared lock is held. The value
        fetches the blobs of the tree that the store lacks, by ranged GETs of the remote's
        packs (never the whole remote), calling its argument with each blob's id (and the
        envelope it stored) once the store can read it (see `RemoteRepo.fetch`), and returns
        how many objects it fetched.
        Once it has returned, leaving marks `record` local."""
        store = self.ws.objects
        repo = self.repo()
        fetched = 0
        complete = False
        with repo.lock("shared"):
            _trees, blobs, fetched = walk_fetching(repo, store, [record.tree])

            def fetch_blobs(ready: Callable[[list[Arrived]], object] | None) -> int:
                nonlocal complete, fetched
                # sync=False: the one sync below publishes trees and blobs together.
                fetched += repo.fetch(store, blobs, sync=False, ready=ready).objects
                complete = True
                return fetched

            yield fetch_blobs
        store.sync()
        if complete:
            update_origins(self.ws.store_dir, {record.id: Pulled(self.info.name, Origin.LOCAL)})

    # -- maintenance of the remote ----------------------------------------------------------

    def check(self, *, full: bool) -> RemoteCheck:
        from ckpt.checkpoints.remote.reports import RemoteCheck  # noqa: PLC0415 (lazy: see reports)

        with self.locked("shared") as repo:
            found = repo.check(full=full)
            problems = list(found.problems)
            for name in repo.list_records():
                try:
                    self._cached_record(repo, name)
                except RemoteDataDamaged as exc:
                    problems.append(f"{exc.key}: {exc.reason}")
        return RemoteCheck(self.info.name, full, found.packs, found.objects, found.records,
                           tuple(dict.fromkeys(problems)))

    def gc(self, *, grace_seconds: float, remove: Callable[[list[Fetched]], list[Fetched]]
           | None = None) -> RemoteGc:
        """Under the exclusive lock: delete the records `remove` picks (prune --remote), then
        every pack no kept record needs, past the grace period (the object layer's rules)."""
        from ckpt.checkpoints.remote.reports import RemoteGc  # noqa: PLC0415 (lazy: see reports)

        with self.locked("exclusive") as repo:
            records = self.records(repo)
            victims = remove(records) if remove is not None else []
            gone = {f[2].id for f in victims}
            for _, _, record in victims:
                repo.delete_record(record_name(record.id))
            kept = [f[2].tree for f in records if f[2].id not in gone]
            trees, blobs, _ = walk_fetching(repo, self.ws.objects, kept)
            found = repo.gc(trees | blobs, grace_seconds=grace_seconds)
        return RemoteGc(self.info.name, found.packs_deleted, found.packs_rewritten,
                        found.bytes_freed, found.held_back, tuple(sorted(gone)))


def walk_fetching(repo: RemoteRepo, store: ObjectStore, roots: Iterable[ObjectId]
                  ) -> tuple[set[ObjectId], AbstractSet[ObjectId], int]:
    """(trees, blobs, objects fetched): the trees below `roots`, read from the local store,
    each level's missing trees fetched from `repo` in one batch first. The blobs come in the
    order the walk meets them, which is close to the order a push laid them out in its packs
    (and a block's members in a row): a fetch of them then groups and reads them in long
    runs."""
    trees: set[ObjectId] = set()
    blobs: dict[ObjectId, None] = {}
    fetched = 0
    level = list(dict.fromkeys(roots))
    while level:
        arrived: dict[ObjectId, bytes | None] = {}
        # only what the store lacks; the envelopes it fetches are decoded as they came
        fetched += repo.fetch(store, level, sync=False, ready=arrived.update).objects
        trees.update(level)
        below: dict[ObjectId, None] = {}
        for oid in level:
            for entry in store.get_tree(oid, arrived.get(oid)).entries:
                if entry.oid is None:
                    continue
                if entry.kind is EntryKind.TREE:
                    if entry.oid not in trees:
                        below[entry.oid] = None
                else:
                    blobs[entry.oid] = None
        level = list(below)
    if fetched:
        store.sync()  # once for every level
    return trees, blobs.keys(), fetched


def _merge_head(old: bytes | None, records: Sequence[CheckpointRecord]) -> bytes:
    """A session's head on the remote: every id pushed to it with its time (us), by time.
    What another pusher wrote meanwhile is kept (the object layer retries on a lost race);
    a head that does not decode is rebuilt from these (records/ stays the truth)."""
    entries: dict[str, int] = {}
    if old is not None:
        try:
            value: Any = unpack_data(old, what="session head")
            entries = {str(i): int(t) for i, t in zip(value["ids"], value["created"], strict=True)}
        except Exception:  # noqa: BLE001 - a damaged head is only a summary: rebuilt
            entries = {}
    entries.update({r.id: to_us(r.created_at) for r in records})
    ordered = sorted(entries.items(), key=lambda item: (item[1], item[0]))
    return pack_data({"ids": [i for i, _ in ordered], "created": [t for _, t in ordered]})


def remotes_holding(ws: Workspace, ref: str) -> tuple[Remote, Fetched] | None:
    """The first configured remote (by name) that has checkpoint `ref` (id or prefix)."""
    for name in sorted(read_remotes(ws.store_dir)):
        remote = Remote(ws, read_remotes(ws.store_dir)[name])
        found = remote.find(ref)
        if found is not None:
            return remote, found
        remote.close()
    return None


def prune_filter(*, now: Any, session: str, reason: str | None, turn_id: str | None,
                 keep_latest: int | None, older_than: timedelta | None
                 ) -> Callable[[list[Fetched]], list[Fetched]]:
    """What `prune --remote` removes: the session's records on the remote (every root: a
    remote has no "this root") that match every filter, as a local prune selects."""
    from ckpt.checkpoints.history.retention import select_prunable  # noqa: PLC0415

    def pick(records: list[Fetched]) -> list[Fetched]:
        mine = [f for f in records if f[2].session == session]
        chosen = {r.id for r in select_prunable([f[2] for f in mine], now=now, reason=reason,
                                                turn_id=turn_id, keep_latest=keep_latest,
                                                older_than=older_than)}
        return [f for f in mine if f[2].id in chosen]
    return pick
