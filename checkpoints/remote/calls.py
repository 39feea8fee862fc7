"""The remote calls of `Checkpoints` (a mixin of service.py): remotes configured, push, pull,
a remote's history, fsck, gc and prune of a remote, and the hooks that make a hollow
checkpoint (pulled, objects on the remote) local before a restore, diff, show or cat reads it.

The work is remote/remote.py's; this module only composes it with the service's locks. Every
import of the remote side happens inside a call, so `import ckpt.checkpoints.service` loads
none of it and a store without remotes pays one `stat` per hook.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from ckpt.checkpoints.model import CheckpointRecord

if TYPE_CHECKING:
    from ckpt.checkpoints.config import StoreConfig
    from ckpt.checkpoints.history.catalog import Catalog
    from ckpt.checkpoints.remote.config import RemoteInfo
    from ckpt.checkpoints.remote.remote import Remote
    from ckpt.checkpoints.remote.reports import PullReport, PushReport, RemoteCheck, RemoteGc
    from ckpt.checkpoints.restore.restorer import RestoreOptions
    from ckpt.checkpoints.restore.staging import BlobFetch
    from ckpt.checkpoints.snapshot.scan import ProgressFn
    from ckpt.checkpoints.workspace import Workspace
    from ckpt.checkpoints.writing import LockedRoot


class RemoteCalls:
    """What `Checkpoints` adds for remotes. The names declared below are `Checkpoints'`."""

    _ws: Workspace

    if TYPE_CHECKING:
        @property
        def store_dir(self) -> str: raise NotImplementedError

        @property
        def root(self) -> str: raise NotImplementedError

        @property
        def session(self) -> str: raise NotImplementedError

        @property
        def config(self) -> StoreConfig: raise NotImplementedError

        @property
        def catalog(self) -> Catalog: raise NotImplementedError

        def settle(self) -> None: raise NotImplementedError

        def resolve(self, ref: str) -> CheckpointRecord: raise NotImplementedError

        def _writing(self, purpose: str) -> AbstractContextManager[LockedRoot]:
            raise NotImplementedError

    def remote_add(self, name: str, url: str, *, endpoint: str | None = None,
                   region: str | None = None) -> RemoteInfo:
        """Configure remote `name` at `url` (`s3://bucket/prefix`) in `<store>/remotes.toml`;
        nothing is sent. Credentials are never stored: the S3 client reads the standard AWS
        environment variables and files. RemoteExists / BadRemote."""
        from ckpt.checkpoints.remote import config as rc  # noqa: PLC0415 (remotes on use)
        from ckpt.checkpoints.remote.remote import check_url  # noqa: PLC0415

        rc.parse_remote_name(name)
        check_url(url, endpoint, region)
        remotes = rc.read_remotes(self.store_dir)
        if name in remotes:
            raise rc.RemoteExists(name)
        info = rc.RemoteInfo(name, url, endpoint, region)
        rc.write_remotes(self.store_dir, {**remotes, name: info})
        return info

    def remote_list(self) -> builtins.list[RemoteInfo]:
        from ckpt.checkpoints.remote.config import read_remotes  # noqa: PLC0415

        return [info for _, info in sorted(read_remotes(self.store_dir).items())]

    def remote_remove(self, name: str) -> None:
        """Forget remote `name` and its local cache (the remote itself is left as it is)."""
        import shutil  # noqa: PLC0415

        from ckpt.checkpoints.remote import config as rc  # noqa: PLC0415

        remotes = rc.read_remotes(self.store_dir)
        if name not in remotes:
            raise rc.UnknownRemote(name, sorted(remotes))
        del remotes[name]
        rc.write_remotes(self.store_dir, remotes)
        shutil.rmtree(os.path.join(self.store_dir, rc.REMOTES_DIR, name), ignore_errors=True)

    @contextmanager
    def _remote(self, name: str | None) -> Iterator[Remote]:
        from ckpt.checkpoints.remote.remote import Remote  # noqa: PLC0415

        self.settle()
        remote = Remote.choose(self._ws, name)
        try:
            yield remote
        finally:
            remote.close()

    def push(self, remote: str | None = None, *, session: str | None = None,
             ids: Sequence[str] = (), progress: ProgressFn | None = None) -> PushReport:
        """Send checkpoints to `remote` (None: the only one): the named `ids`, else the
        checkpoints of `session`, else of every session, on this root, that the remote lacks.
        Their objects go first, as packs; each record only once all it needs is indexed.
        `progress("upload", done, total)` follows the upload."""
        if ids:
            records = [self.resolve(ref) for ref in ids]
        else:
            records = self.catalog.history(session=session, root=self.root)

        def uploaded(done: int, total: int) -> None:
            if progress is not None:
                progress("upload", done, total)
        with self._remote(remote) as link:
            return link.push(records, uploaded if progress is not None else None)

    def pull(self, remote: str | None = None, *, session: str | None = None) -> PullReport:
        """Adopt the remote's checkpoints (of `session`) that this store lacks. Their objects
        stay on the remote ("hollow") until a restore, diff or show needs them."""
        with self._remote(remote) as link:
            fetched, _present = link.fetch_records(session=session)
            with self._writing("pull"):
                return link.adopt(fetched)

    def remote_history(self, remote: str | None = None, *,
                       session: str | None = None) -> builtins.list[CheckpointRecord]:
        """The checkpoints on `remote` (of `session`; None: every one), oldest first."""
        with self._remote(remote) as link:
            return link.history(session=session)

    def fsck_remote(self, remote: str | None = None, *, full: bool = False) -> RemoteCheck:
        with self._remote(remote) as link:
            return link.check(full=full)

    def gc_remote(self, remote: str | None = None, *,
                  grace_seconds: float | None = None) -> RemoteGc:
        """Delete the remote's packs that no record there needs, past the grace period
        (default: the store's gc_grace_seconds), under the remote's exclusive lock."""
        grace = self.config.gc_grace_seconds if grace_seconds is None else grace_seconds
        with self._remote(remote) as link:
            return link.gc(grace_seconds=grace)

    def prune_remote(self, remote: str | None = None, *, reason: str | None = None,
                     turn_id: str | None = None, keep_latest: int | None = None,
                     older_than: timedelta | None = None, dry_run: bool = False,
                     grace_seconds: float | None = None) -> RemoteGc:
        """Delete this session's records on the remote (every root) that match every
        filter, under its exclusive lock, then gc the remote. Local checkpoints stay."""
        from ckpt.checkpoints.remote.remote import prune_filter  # noqa: PLC0415
        from ckpt.checkpoints.remote.reports import RemoteGc  # noqa: PLC0415

        pick = prune_filter(now=self._ws.clock(), session=self.session, reason=reason,
                            turn_id=turn_id, keep_latest=keep_latest, older_than=older_than)
        grace = self.config.gc_grace_seconds if grace_seconds is None else grace_seconds
        with self._remote(remote) as link:
            if dry_run:
                with link.locked("shared") as repo:
                    chosen = pick(link.records(repo, session=self.session))
                return RemoteGc(link.info.name, 0, 0, 0, 0,
                                tuple(sorted(f[2].id for f in chosen)), dry_run=True)
            return link.gc(grace_seconds=grace, remove=pick)

    def _hollow(self) -> set[str]:
        """Ids of the checkpoints whose objects are on a remote only (one stat without)."""
        from ckpt.checkpoints.remote.config import hollow_ids  # noqa: PLC0415

        return hollow_ids(self.store_dir)

    def _local(self, record: CheckpointRecord) -> CheckpointRecord:
        """`record`, its objects fetched first if it is hollow (pulled, not yet here)."""
        with self._hydrating(record) as fetch_blobs:
            if fetch_blobs is not None:
                fetch_blobs(None)
        return record

    @contextmanager
    def _hydrating(self, record: CheckpointRecord) -> Iterator[BlobFetch | None]:
        """Within: `record`'s trees are here and the value fetches its missing blobs
        (`Remote.hydrating`), if it is hollow; None if its objects are here already."""
        from ckpt.checkpoints.remote.config import (  # noqa: PLC0415
            Origin,
            read_origins,
            read_remotes,
        )

        origin = read_origins(self.store_dir).get(record.id)
        if origin is None or origin.state is not Origin.HOLLOW:
            yield None
            return
        # The remote it came from, or the only one if that was removed since.
        name = origin.remote if origin.remote in read_remotes(self.store_dir) else None
        with self._remote(name) as link, link.hydrating(record) as fetch_blobs:
            yield fetch_blobs

    def _from_remote(self, ref: str, options: RestoreOptions) -> RestoreOptions:
        """Before a restore: a checkpoint only a remote has is pulled, and a hollow one's
        objects fetched (before any planning: damaged remote data leaves the workspace as it
        is), except for a restore into a new directory, which fetches them as it writes them
        (`_hydrating`; damaged data leaves that directory as it was). A checkpoint that came
        from a remote may have been taken at another path: the user asked for it by id, so it
        is restored here (no ForeignCheckpoint)."""
        from ckpt.checkpoints.remote.config import has_remotes, read_origins  # noqa: PLC0415

        if not has_remotes(self.store_dir):
            return options
        from ckpt.checkpoints.errors import UnknownCheckpoint  # noqa: PLC0415
        from ckpt.checkpoints.remote.remote import remotes_holding  # noqa: PLC0415

        try:
            record = self.resolve(ref)
        except UnknownCheckpoint:
            found = remotes_holding(self._ws, ref)
            if found is None:
                raise
            link, fetched = found
            try:
                with self._writing("pull"):
                    link.adopt([fetched])
            finally:
                link.close()
            record = fetched[2]
        if options.target is None:  # a restore into a new directory fetches as it writes
            self._local(record)
        if record.id in read_origins(self.store_dir):
            options = dataclasses.replace(options, from_other_root=True)
        return options
