"""Taking a snapshot: walking a workspace and turning what changed into trees.

Lives here: the walk (`scan.py`: list, hash what changed, build the Merkle tree bottom-up),
directory listings (`dirlisting.py`, with its native twin `_dirscan.c` one level up), the
per-root stat cache and its on-disk rows (`statcache.py`, `statcache_rows.py`), the ignore
rules (`ignore.py`, git's exclude files outside the tree in `gitexclude.py`), the inotify
watcher that tells a scan which directories may have changed (`watch.py`), and recognising a
ckpt store by its marker files wherever it lies (`storemarks.py`).

Must not live here: anything that writes the workspace (a restore is `restore/`'s), the
catalog or records (`history/`), remotes. This package imports only the base modules at the
top (errors, paths, model, config, lock, ...) and objstore; `restore/` and the workspace
import it, never the other way (tests/test_layers.py).
"""
