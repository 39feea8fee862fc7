"""The ckpt commands, one module per group: setup (init, track, untrack, config), snapshot
(create, list, latest, show, diff, cat), restore (restore, recover) and maintenance (prune, gc,
fsck, stats, events). Each module exports `COMMANDS`, which `cli/main.py` registers."""
