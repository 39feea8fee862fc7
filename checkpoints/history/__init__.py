"""A store's history: checkpoint records, how they are found, and which of them go.

Lives here: the SQLite catalog (`catalog.py`) and the record files it indexes
(`records.py`), checking and repairing the one against the other (`reindex.py`), refs
(`refs.py`: `latest`, ids, prefixes, `X~N`), pure prune decisions (`retention.py`) and the
history of one path (`pathlog.py`, `ckpt log PATH`).

Must not live here: walking or writing the workspace (`snapshot/`, `restore/`), remotes.
This package imports only the base modules at the top and objstore (tests/test_layers.py):
it never imports `snapshot/`, `restore/` or `remote/`.
"""
