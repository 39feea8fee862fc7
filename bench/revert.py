"""What blocks cost an agent's revert: a restore of a checkpoint that differs from the working
tree in a few small files, from a store with blocks and from one without, paired.

``python -m bench.revert [--corpus stdlib|linux|DIR] [--files 20] [--reps 15]
[--block-size 1M] [--json OUT]``: the corpus is copied into two workspaces, each snapshotted
into its own store (``block_size`` as given, and 0); then, in each repetition, the same
``--files`` small files (seeded choice, <= 64 KiB) are edited in both workspaces and each is
restored to its checkpoint (no pre-restore save, no event: the restore alone), in alternating
order, timed around the call, with the store's caches dropped first so that every restore
reads its blocks from disk as a new process would. Reported: median seconds of each and the
median of the paired ratios (blocks / none); the files restored are checked byte for byte.
Runs the ckpt this interpreter imports.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.corpus import copy_tree, get_corpus
from ckpt.checkpoints import Checkpoints, RestoreOptions
from ckpt.checkpoints.config import _parse_size

SMALL = 64 << 10


def _small_files(root: Path, count: int, seed: int) -> list[Path]:
    found = sorted(p for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink() and 64 < p.stat().st_size <= SMALL)
    return random.Random(seed).sample(found, count)


def revert_case(source: Path, scratch: Path, *, block_size: int, files: int, reps: int,
                seed: int, say: Any) -> dict[str, Any]:
    sides: dict[str, dict[str, Any]] = {}
    for name, size in (("blocks", block_size), ("none", 0)):
        work, store = scratch / name / "work", scratch / name / "store"
        work.parent.mkdir(parents=True)
        copy_tree(source, work)
        Checkpoints.init(work, store).close()
        (store / "config.toml").write_text(f"block_size = {size}\n", encoding="utf-8")
        cp = Checkpoints.open(work, store=store)
        say(f"{name}: first snapshot ...")
        checkpoint = cp.create().id
        chosen = _small_files(work, files, seed)
        sides[name] = {"cp": cp, "id": checkpoint, "files": chosen,
                       "originals": [p.read_bytes() for p in chosen], "seconds": []}
    options = RestoreOptions(save=False, record_event=False)
    try:
        for rep in range(reps + 1):  # the first round untimed: imports, first-call costs
            order = ("blocks", "none") if rep % 2 == 0 else ("none", "blocks")
            for name in order:
                side = sides[name]
                for path in side["files"]:
                    path.write_bytes(path.read_bytes() + b"\n/* edited %d */\n" % rep)
                side["cp"].objects.forget_cached()
                start = time.perf_counter()
                side["cp"].restore(side["id"], options)
                seconds = time.perf_counter() - start
                if [p.read_bytes() for p in side["files"]] != side["originals"]:
                    raise SystemExit(f"{name}: the files did not restore byte for byte")
                if rep:
                    side["seconds"].append(seconds)
    finally:
        for side in sides.values():
            side["cp"].close()
    on, off = sides["blocks"]["seconds"], sides["none"]["seconds"]
    return {"block_size": block_size, "files": files, "reps": reps,
            "blocks_median_s": statistics.median(on), "none_median_s": statistics.median(off),
            "paired_ratio": statistics.median(a / b for a, b in zip(on, off)),
            "blocks_s": on, "none_s": off}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.revert",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="stdlib", help="stdlib, linux or a directory")
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--block-size", default="1M")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-revert-"))

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = revert_case(get_corpus(args.corpus).path, scratch,
                         block_size=int(_parse_size(args.block_size)), files=args.files,
                         reps=args.reps, seed=args.seed, say=say)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"revert of {result['files']} small files, block_size {result['block_size']}: "
          f"blocks {result['blocks_median_s'] * 1000:.1f} ms, none "
          f"{result['none_median_s'] * 1000:.1f} ms, paired ratio "
          f"{result['paired_ratio']:.2f} ({result['reps']} reps)")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
