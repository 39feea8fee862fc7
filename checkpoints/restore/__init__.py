"""Restoring a checkpoint: from a plan on paper to a workspace that matches it.

Lives here, in the order a restore runs: `restorer.py` (`RestoreOptions`, `Restorer`: the
order of a restore's durable steps, and completing a killed one), `plan.py` (pure: current
and target manifests -> `RestorePlan`), `tracked_revert.py` (what a tracked-scope restore
covers beyond its paths), `journal.py` (the intent a killed restore is completed from),
`staging.py` (every file read, verified and written aside before the workspace changes),
`apply.py` (the only code that mutates the working tree), `statcache_update.py` (what a
restore teaches the stat cache), `abandon.py` (`ckpt recover --abandon`), `restore_into.py`
(a restore into another directory) and `reports.py` (the records a restore returns).

Must not live here: scanning (`snapshot/`), the catalog and refs (`history/`), remotes: a
hollow checkpoint's blobs reach a restore as a `BlobFetch` callable the service passes in.
This package may import the base modules, `diff/`, `snapshot/`, `history/` and the
workspace (identity, writing, workspace); never `remote/` or the facade (tests/test_layers.py).
"""
