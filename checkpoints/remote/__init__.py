"""Remotes: which checkpoints go where, and what a store remembers of them.

Lives here: the service's remote calls (`calls.py`, the `RemoteCalls` mixin of
`Checkpoints`), the work behind them (`remote.py`: push, pull, a remote's history, fetching a
hollow checkpoint's blobs, fsck, gc and prune of a remote), what a push uploads
(`push.py`), the store's `remotes.toml` and `origins` files (`config.py`, read without the
S3 client) and the records the remote calls return (`reports.py`).

Must not live here: the bytes on S3 (packs, indexes, heads, locks: `ckpt.objstore.remote`,
imported only when a remote is used, so that local commands never load it nor the S3
client). This package sits above `restore/` (a restore from a remote is a restore with
options this package sets) and below the facade (tests/test_layers.py).
"""
