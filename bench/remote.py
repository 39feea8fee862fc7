"""Remote comparison: ckpt's push, turn push and fresh-machine restore through a loopback
SeaweedFS against restic on the same corpus and the same server, in one run (issue 25).

Run ``python -m bench.remote --corpus stdlib|linux|DIR [--rounds N] [--scratch DIR]
[--json OUT]``. One SeaweedFS (``weed mini`` on 127.0.0.1, free ports, one access key) serves
the whole run; each round gives each tool a bucket of its own and both tools one ``cp -a`` copy
of the corpus, then measures, tool after tool (who goes first alternates by round):

1. first: ckpt ``create`` then ``push`` (the first checkpoint uploaded as packs) against
   restic's first ``backup``; the remote's size against ckpt's local store;
2. turn: the seeded agent turn (20 edited, 5 new, 5 deleted files; ``ckpt.tuning.workload``),
   then ckpt ``create`` + ``push`` against restic's incremental ``backup``; the bytes the push
   added to the bucket against the zstd (level 3) size of the edited and new files;
   served turn: the store's resident server started and warmed (``remote_tools.CkptServed``,
   not timed), a second seeded turn, then ``create`` + ``push`` through the server against
   restic's next incremental ``backup``: the default ``CKPT_SERVER=auto``, as a harness's
   session runs ckpt turn after turn;
3. fresh machine: an empty store with only the remote configured restores the first
   checkpoint into an empty directory (``restore ID --target DIR``: record pulled, objects
   fetched) against ``restic restore`` with an empty cache. Both results are checked against
   the corpus's content manifest: a wrong restore aborts the run (exit 2).

ckpt runs as users install it (``--install venv``, see bench/compare.py) with ``CKPT_SERVER=off``
but for the served turn. Each round after the first starts with the page cache of the run's own
files dropped (``release_page_cache``), as the first round starts: a fresh machine's restore
does not find its memory filled by earlier rounds' trees.
Owns: the rounds, the ratios against the issue's targets, the table and the JSON. Must not:
import ckpt's library (as bench/compare.py), or modify the corpus.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import zstandard

from bench.compare import (
    BenchFailure,
    Install,
    Measured,
    machine_info,
    prepare_install,
    run_program,
)
from bench.corpus import (
    Corpus,
    CorpusError,
    Manifest,
    changed_paths,
    copy_tree,
    describe,
    diff_manifests,
    find_ignored,
    get_corpus,
    list_captured_files,
    read_manifest,
)
from bench.remote_tools import CkptRemote, Restic, Site, find_restic, missing_tools, seaweed_site
from ckpt.tuning.workload import Turn, apply_turn, measure_tree, plan_turn

#: ratio name -> (title, target: the ratio must be at most this; None: reported only)
RATIOS: dict[str, tuple[str, float | None]] = {
    "first_push": ("first push / restic first backup", 0.5),
    "first_create_push": ("first create+push / restic first backup", None),
    "turn_push": ("turn push / restic incremental", 0.1),
    "turn_create_push": ("turn create+push / restic incremental", 0.1),
    "served_create_push": ("served turn create+push / restic incremental", 0.1),
    "fresh_restore": ("fresh-machine restore / restic restore", 0.5),
    "turn_bytes": ("turn bytes uploaded / zstd of changed files", 1.2),
    "remote_vs_local": ("remote size / local store (first push)", 1.0),
}
STEPS = ("ckpt_first_create", "ckpt_first_push", "restic_first_backup", "ckpt_turn_create",
         "ckpt_turn_push", "restic_turn_backup", "ckpt_served_create", "ckpt_served_push",
         "restic_served_backup", "ckpt_fresh_restore", "restic_fresh_restore")
#: The second turn of a round (through the resident server) is seeded with the round's seed
#: plus this, so that it never repeats a first turn's choices.
SERVED_SEED = 1000
ZSTD_LEVEL = 3


def _cell(m: Measured) -> dict[str, Any]:
    return {"seconds": m.seconds, "max_rss_kib": m.max_rss_kib, "report": m.report}


def compressed_size(root: Path, turn: Turn) -> int:
    """zstd (level 3) bytes of each edited and new file of ``turn``, compressed whole."""
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    paths = [e.path for e in turn.edits] + [a.path for a in turn.adds]
    return sum(len(cctx.compress((root / p).read_bytes())) for p in paths)


def _check(expected: Manifest, actual: Manifest, what: str) -> None:
    diffs = diff_manifests(expected, actual)
    if diffs:
        raise BenchFailure(f"{what}: tree differs in {len(diffs)} paths:\n  "
                           + "\n  ".join(diffs[:20]))


def _files(manifest: Manifest, keep: set[str] | None = None) -> Manifest:
    """The non-directory entries (of ``keep`` only, when given)."""
    return {p: e for p, e in manifest.items()
            if e.kind != "dir" and (keep is None or p in keep)}


def _settle() -> None:
    """Flush what the last step wrote (a restore's 1.3 GB, a store) before the next starts,
    so that its writeback lands in neither tool's timed step: whoever went second in a round
    would otherwise pay for the first."""
    os.sync()


def release_page_cache(top: Path) -> int:
    """Drop the cached pages of every regular file below ``top`` (after a sync, so that all of
    them are clean and go): the bench's own copies, stores, restores and server volumes. Without
    it, the earlier rounds' files fill the page cache, and on a VM whose host reclaims guest
    memory a later round's restores pay for reclaiming it: the same seconds for both tools,
    which pull the ratio toward 1. Nothing is deleted (on ext4 without a journal, inodes freed
    lately slow every new one's allocation). Returns how many files it went over (0 where the
    platform has no ``posix_fadvise``)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return 0
    os.sync()
    count = 0
    dirs = [top]
    while dirs:
        try:
            listing = list(os.scandir(dirs.pop()))
        except FileNotFoundError:
            continue  # a server's temporary directory, gone meanwhile
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                dirs.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue  # gone meanwhile, or not readable
                try:
                    advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    count += 1
                finally:
                    os.close(fd)
    return count


def run_round(index: int, corpus: Corpus, baseline: Manifest, captured: list[str],
              files: list[str], seed: int, scratch: Path, site: Site, install: Install,
              restic_exe: str) -> dict[str, Any]:
    """One round: both tools through first backup, a turn and a fresh-machine restore."""
    work = scratch / "work"
    scratch.mkdir(parents=True)
    copy_tree(corpus.path, work)
    subprocess.run(["sync"], check=False)  # the copy's writeback must not land in a step
    ckpt_bucket, restic_bucket = f"ckpt-r{index}", f"restic-r{index}"
    site.create_bucket(ckpt_bucket)
    site.create_bucket(restic_bucket)
    ckpt = CkptRemote(install, site, ckpt_bucket, work, scratch / "store")
    restic = Restic(restic_exe, site, restic_bucket, scratch / "restic-cache", scratch)
    ckpt_first = restic_first = ""
    steps: dict[str, dict[str, Any]] = {}
    sizes: dict[str, Any] = {}
    ckpt_goes_first = index % 2 == 0
    steps["ckpt_setup"] = _cell(ckpt.setup())
    steps["restic_init"] = _cell(restic.init())

    def first_ckpt() -> None:
        nonlocal ckpt_first
        m, ckpt_first = ckpt.snapshot("first")
        steps["ckpt_first_create"] = _cell(m)
        sizes["local_store"] = measure_tree(ckpt.store).apparent_bytes
        steps["ckpt_first_push"] = _cell(ckpt.push())
        sizes["remote_after_first"] = site.bucket_size(ckpt_bucket)[0]

    def first_restic() -> None:
        nonlocal restic_first
        m, restic_first = restic.backup(work)
        steps["restic_first_backup"] = _cell(m)
        sizes["restic_after_first"] = site.bucket_size(restic_bucket)[0]

    for step in (first_ckpt, first_restic) if ckpt_goes_first else (first_restic, first_ckpt):
        _settle()
        step()

    turn = plan_turn(files, seed, find_ignored=lambda ps: find_ignored(corpus.path, ps))
    apply_turn(work, turn)
    if changed_paths(baseline, read_manifest(work)) != turn.paths:
        raise BenchFailure("the turn changed other paths than it planned")
    sizes["turn_zstd"] = compressed_size(work, turn)

    def turn_ckpt() -> None:
        m, _ = ckpt.snapshot("after-turn")
        steps["ckpt_turn_create"] = _cell(m)
        steps["ckpt_turn_push"] = _cell(ckpt.push())
        sizes["remote_after_turn"] = site.bucket_size(ckpt_bucket)[0]

    def turn_restic() -> None:
        m, _ = restic.backup(work)
        steps["restic_turn_backup"] = _cell(m)
        sizes["restic_after_turn"] = site.bucket_size(restic_bucket)[0]

    for step in (turn_ckpt, turn_restic) if ckpt_goes_first else (turn_restic, turn_ckpt):
        _settle()
        step()

    with ckpt.served() as served:
        after_turn = read_manifest(work)
        kept = set(files) - set(turn.deletes)
        turn2 = plan_turn(sorted(kept), seed + SERVED_SEED,
                          find_ignored=lambda ps: find_ignored(corpus.path, ps))
        apply_turn(work, turn2)
        if changed_paths(after_turn, read_manifest(work)) != turn2.paths:
            raise BenchFailure("the second turn changed other paths than it planned")

        def served_ckpt() -> None:
            m, _ = served.snapshot("after-served-turn")
            steps["ckpt_served_create"] = _cell(m)
            steps["ckpt_served_push"] = _cell(served.push())

        def served_restic() -> None:
            m, _ = restic.backup(work)
            steps["restic_served_backup"] = _cell(m)

        for step in ((served_ckpt, served_restic) if ckpt_goes_first
                     else (served_restic, served_ckpt)):
            _settle()
            step()

    expected_ckpt = _files(baseline, set(captured))

    def fresh_ckpt() -> None:
        machine = scratch / "fresh-ckpt"
        machine.mkdir()
        (machine / "root").mkdir()
        fresh = CkptRemote(install, site, ckpt_bucket, machine / "root", machine / "store")
        steps["ckpt_fresh_setup"] = _cell(fresh.setup())
        target = machine / "restored"
        steps["ckpt_fresh_restore"] = _cell(fresh.restore_into(ckpt_first, target))
        _check(expected_ckpt, _files(read_manifest(target)), "ckpt fresh-machine restore")

    def fresh_restic() -> None:
        target, cache = scratch / "fresh-restic", scratch / "fresh-restic-cache"
        steps["restic_fresh_restore"] = _cell(restic.restore_into(restic_first, target, cache))
        restored = target / work.relative_to(work.anchor)
        _check(baseline, read_manifest(restored), "restic fresh-machine restore")

    for step in (fresh_ckpt, fresh_restic) if ckpt_goes_first else (fresh_restic, fresh_ckpt):
        _settle()
        step()
    return {"round": index, "seed": seed, "ckpt_first": ckpt_goes_first, "steps": steps,
            "sizes": sizes, "verified": True,
            "turn": {"edited": len(turn.edits), "added": len(turn.adds),
                     "deleted": len(turn.deletes)}}


def round_ratios(run: dict[str, Any]) -> dict[str, float]:
    s = {k: v["seconds"] for k, v in run["steps"].items()}
    z = run["sizes"]
    return {
        "first_push": s["ckpt_first_push"] / s["restic_first_backup"],
        "first_create_push": (s["ckpt_first_create"] + s["ckpt_first_push"])
        / s["restic_first_backup"],
        "turn_push": s["ckpt_turn_push"] / s["restic_turn_backup"],
        "turn_create_push": (s["ckpt_turn_create"] + s["ckpt_turn_push"])
        / s["restic_turn_backup"],
        "served_create_push": (s["ckpt_served_create"] + s["ckpt_served_push"])
        / s["restic_served_backup"],
        "fresh_restore": s["ckpt_fresh_restore"] / s["restic_fresh_restore"],
        "turn_bytes": (z["remote_after_turn"] - z["remote_after_first"]) / z["turn_zstd"],
        "remote_vs_local": z["remote_after_first"] / z["local_store"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median seconds and peak RSS per step, median bytes per size, paired ratios per round."""
    ratios = [round_ratios(r) for r in runs]
    return {
        "steps": {step: {"median_s": statistics.median(r["steps"][step]["seconds"]
                                                       for r in runs),
                         "peak_rss_kib": max(r["steps"][step]["max_rss_kib"] for r in runs)}
                  for step in STEPS},
        "sizes": {k: statistics.median(r["sizes"][k] for r in runs) for k in runs[0]["sizes"]},
        "ratios": {k: [r[k] for r in ratios] for k in RATIOS},
        "median_ratio": {k: statistics.median(r[k] for r in ratios) for k in RATIOS},
        "met": {k: statistics.median(r[k] for r in ratios) <= t
                for k, (_, t) in RATIOS.items() if t is not None},
    }


def render_table(report: dict[str, Any]) -> str:
    s, c = report["summary"], report["corpus"]
    lines = [f"corpus {c['name']}: {c['captured_files']:,} captured files of {c['files']:,} "
             f"({c['bytes'] / 1e6:,.0f} MB); {report['rounds']} rounds; {report['date']}",
             f"{report['machine']['cpu']} x{report['machine']['nproc']}; ckpt "
             f"{report['ckpt_version']}; {report['restic_version']}; SeaweedFS "
             f"{report['weed_version']} on 127.0.0.1", "",
             f"{'step (median wall s)':<34}{'ckpt':>10}{'restic':>10}"]
    pairs = (("first: create", "ckpt_first_create", None),
             ("first: push / backup", "ckpt_first_push", "restic_first_backup"),
             ("turn: create", "ckpt_turn_create", None),
             ("turn: push / backup", "ckpt_turn_push", "restic_turn_backup"),
             ("served turn: create", "ckpt_served_create", None),
             ("served turn: push / backup", "ckpt_served_push", "restic_served_backup"),
             ("fresh-machine restore", "ckpt_fresh_restore", "restic_fresh_restore"))
    for title, ck, rs in pairs:
        lines.append(f"{title:<34}{s['steps'][ck]['median_s']:>10.3f}"
                     + (f"{s['steps'][rs]['median_s']:>10.3f}" if rs else f"{'':>10}"))
    lines += ["", f"{'ratio (median; per round)':<48}{'median':>8}{'target':>8}"]
    for key, (title, target) in RATIOS.items():
        verdict = "" if target is None else ("  met" if s["met"][key] else "  NOT MET")
        lines.append(f"{title:<48}{s['median_ratio'][key]:>8.3f}"
                     + (f"{'<= ' + format(target, 'g'):>8}" if target is not None
                        else f"{'':>8}")
                     + "  " + " ".join(f"{r:.3f}" for r in s["ratios"][key]) + verdict)
    z = s["sizes"]
    lines += ["", "sizes (median MB): local store " + f"{z['local_store'] / 1e6:,.1f}, remote "
              f"after first push {z['remote_after_first'] / 1e6:,.1f}, restic repo after first "
              f"backup {z['restic_after_first'] / 1e6:,.1f}",
              f"turn: {(z['remote_after_turn'] - z['remote_after_first']) / 1e3:,.1f} kB "
              f"uploaded by ckpt, {(z['restic_after_turn'] - z['restic_after_first']) / 1e3:,.1f}"
              f" kB by restic; changed files {z['turn_zstd'] / 1e3:,.1f} kB at zstd -3"]
    return "\n".join(lines)


def _version(cmd: Sequence[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return (done.stdout.strip() or done.stderr.strip()).splitlines()[0] if done.stdout or \
        done.stderr else "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.remote",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="stdlib, linux, or a directory")
    ap.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--seed", type=int, default=1, help="seed of round 0's turn (round i: +i)")
    ap.add_argument("--json", type=Path, help="write the full report with raw numbers here")
    ap.add_argument("--scratch", type=Path, help="where copies go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--install", choices=("venv", "current"), default="venv",
                    help="the ckpt to measure (as bench.compare: venv pip-installs this checkout)")
    ap.add_argument("--restic", help="the restic binary (default: restic on PATH)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    restic_exe = find_restic(args.restic)
    try:
        corpus = get_corpus(args.corpus)
        missing = missing_tools(restic_exe)
    except (CorpusError, BenchFailure) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if missing:
        print(f"error: {'; '.join(missing)}", file=sys.stderr)
        return 1
    assert restic_exe is not None
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-remote-", dir=args.scratch))
    print(f"corpus {corpus.name} at {corpus.path}; scratch {scratch}", file=sys.stderr)
    runs: list[dict[str, Any]] = []
    try:
        print(f"installing ckpt ({args.install}) ...", file=sys.stderr, flush=True)
        install = prepare_install(args.install, scratch)
        captured = list_captured_files(corpus.path)
        files = [f for f in captured if not (corpus.path / f).is_symlink()]
        baseline = read_manifest(corpus.path)
        with seaweed_site(scratch / "seaweed") as site:
            weed_version = _version([site.server.weed, "version"])
            for i in range(args.rounds):
                print(f"round {i} ...", file=sys.stderr, flush=True)
                if i:
                    release_page_cache(scratch)
                runs.append(run_round(i, corpus, baseline, captured, files, args.seed + i,
                                      scratch / f"r{i}", site, install, restic_exe))
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    report: dict[str, Any] = {
        "corpus": describe(corpus, baseline, captured),
        "machine": machine_info(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "ckpt_version": install.info["version"], "install": install.info,
        "restic_version": _version([restic_exe, "version"]), "weed_version": weed_version,
        "rounds": args.rounds, "seed": args.seed, "zstd_level": ZSTD_LEVEL, "runs": runs,
        "summary": summarize(runs)}
    print(render_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_program(main)
