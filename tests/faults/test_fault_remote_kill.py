"""kill -9 in the middle of `ckpt push`: of the SeaweedFS serving the remote, and of the push.

Each push runs as a real `ckpt` process against a real `weed mini` on 127.0.0.1. The kill lands
at a seeded stage of the push, seen on the server itself: as soon as a new key appears under
`packs/` (a pack PUT, its index not yet), `index/` (a pack indexed, its records not yet) or
`records/` (some records up, others not). A push that had already ended when the key showed
does not count as a landed kill; the next attempt draws again. After each kill:
- a killed server: the push exits 1 with one line on stderr (unreachable), the server is
  restarted on the same directory and ports, and the next push completes (exit 0);
- a killed push: a `gc --remote` (grace 0) of another store on the same host takes the dead
  push's lock for stale at once (its pid is gone) and removes what the killed push left,
  and the next push completes, uploading that again;
- a killed resident server running the push (`push` is served): the client exits 6 (server
  lost) with one line, the dead server's remote lock is stale at once (its pid is gone), and
  the next push, through a new server, completes; a SeaweedFS killed under a served push (at
  its first pack) is exit 1 from the server, which lives on and serves the next push;
- at the end, `fsck --remote --full` is clean, each checkpoint is under `records/` exactly once
  and listed once, and a fresh machine (an empty store with only the remote) restores every
  pushed checkpoint into an empty directory exactly.
Landed kills: 3 of each by default, 12 with CKPT_SOAK=1.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import fault_remote_helpers as r
import servers
from seaweed import Bucket, SeaweedServer, new_bucket_name, s3_bucket, s3_env, seaweed, seaweed_own

__all__ = ["s3_bucket", "s3_env", "seaweed", "seaweed_own"]  # the fixtures these tests use

POINTS = h.scale(3, 12)
# A kill lands only if the push is still running when the watcher sees its key: on a busy
# machine a small push often ends first. Each run stops as soon as POINTS kills landed.
ATTEMPTS = 8 * POINTS
FILES = 300
SERVER_LOST = 6


def _workspace(m: r.Machine, rng: random.Random) -> None:
    h.build_tree(m.root, rng, files=FILES, max_size=40_000)


def test_seaweedfs_killed_mid_push_then_the_next_push_completes(
        base: str, seaweed_own: SeaweedServer) -> None:
    rng = random.Random(h.seed_for("remote-kill-server"))
    bucket = Bucket(seaweed_own, new_bucket_name())
    seaweed_own.raw.create_bucket(bucket.name)
    m = r.machine(base, "a", bucket)
    _workspace(m, rng)
    landed = 0
    for stage in r.kill_stages(m, rng, ATTEMPTS):
        run, acted = r.push_until(m, bucket, stage, lambda child: seaweed_own.kill())
        if acted:
            r.restart(seaweed_own)
        if acted and run.code != h.OK:
            landed += 1
            h.tally(f"remote: weed kill -9 at {stage}", injected=1)
            assert run.code == h.USER_ERROR, run
            assert len(run.err.strip().splitlines()) == 1, f"one line, no traceback: {run}"
        else:
            assert run.code == h.OK, run
        again = m.ok("push", r.REMOTE, "--json").json()
        assert set(again["pushed"]) | set(again["present"]) == set(m.models), again
        h.tally("remote: weed kill -9 mid-push", passed=1)
        if landed >= POINTS:
            break
    assert landed >= POINTS, f"only {landed} of {POINTS} kills landed in {ATTEMPTS} pushes"
    r.check_remote(m.models, m, bucket, base, "fresh")


def test_push_killed_mid_upload_is_completed_by_the_next_push(
        base: str, s3_bucket: Bucket) -> None:
    """After each kill another machine collects the remote (grace 0) before the next push, so
    what the killed push left (a pack with no index, packs indexed for no record) is deleted
    under the pusher's feet: its next push must upload those objects again, not trust them."""
    rng = random.Random(h.seed_for("remote-kill-push"))
    m = r.machine(base, "a", s3_bucket)
    collector = r.machine(base, "collector", s3_bucket)
    collector.ok("config", "set", "gc_grace_seconds", "0")
    _workspace(m, rng)
    landed = 0
    for stage in r.kill_stages(m, rng, ATTEMPTS):

        def kill(child: subprocess.Popen[bytes]) -> None:
            child.kill()

        run, _ = r.push_until(m, s3_bucket, stage, kill)
        if run.killed:
            landed += 1
            h.tally(f"remote: push kill -9 at {stage}", injected=1)
        else:
            assert run.code == h.OK, run
        # The killed push's lock names this host and a pid that is gone: it holds nothing.
        gc = collector.run("gc", "--remote", r.REMOTE)
        assert gc.code == h.OK, gc
        m.ok("push", r.REMOTE)  # uploads again whatever the gc took
        h.tally("remote: push kill -9", passed=1)
        if landed >= POINTS:
            break
    assert landed >= POINTS, f"only {landed} of {POINTS} kills landed in {ATTEMPTS} pushes"
    r.check_remote(m.models, m, s3_bucket, base, "fresh")


def test_resident_server_killed_mid_push_then_the_next_push_completes(
        base: str, seaweed_own: SeaweedServer) -> None:
    rng = random.Random(h.seed_for("remote-kill-served"))
    bucket = Bucket(seaweed_own, new_bucket_name())
    seaweed_own.raw.create_bucket(bucket.name)
    m = r.machine(base, "a", bucket)
    _workspace(m, rng)
    m.create("base")
    m.ok("push", r.REMOTE)  # the store's first push runs in the client; the next are served
    server_kills = weed_kills = 0
    try:
        for stage in r.kill_stages(m, rng, ATTEMPTS):
            kill_weed = weed_kills < server_kills  # alternate, the resident server's first
            with servers.running_server(m.store, h.env(), cwd=m.root) as server:
                m.served = True
                assert m.run("list").code == h.OK  # warm: the root opened by the server
                pid = server.pid

                def act(child: subprocess.Popen[bytes], pid: int = pid,
                        kill_weed: bool = kill_weed) -> None:
                    if kill_weed:
                        seaweed_own.kill()
                    else:
                        os.kill(pid, signal.SIGKILL)

                # SeaweedFS is killed when the first pack lands: past that point a served push
                # (no client start-up) has so little left that the kill mostly comes after it.
                # The client's push covers the later stages (the first test).
                run, acted = r.push_until(m, bucket, "packs/" if kill_weed else stage, act)
                if acted and kill_weed:
                    r.restart(seaweed_own)
                if acted and run.code != h.OK:
                    assert len(run.err.strip().splitlines()) == 1, f"one line: {run}"
                    if kill_weed:
                        weed_kills += 1
                        h.tally("remote: weed kill -9 under a served push at packs/",
                                injected=1)
                        assert run.code == h.USER_ERROR, run
                        assert servers.alive(pid), "the server lives on"
                        assert servers.request_count(server.status() or {}) == 2  # list, push
                    else:
                        server_kills += 1
                        h.tally(f"remote: server kill -9 mid-push at {stage}", injected=1)
                        assert run.code == SERVER_LOST, run
                else:
                    assert run.code == h.OK, run
            with servers.running_server(m.store, h.env(), cwd=m.root) as server:
                again = m.ok("push", r.REMOTE, "--json").json()
                assert servers.request_count(server.status() or {}) == 1, "served"
            m.served = False
            assert set(again["pushed"]) | set(again["present"]) == set(m.models), again
            h.tally("remote: kill -9 under a served push", passed=1)
            if min(server_kills, weed_kills) >= POINTS:
                break
    finally:
        m.served = False
        servers.reap_servers_under(base)
    assert min(server_kills, weed_kills) >= POINTS, (
        f"only {server_kills} server and {weed_kills} SeaweedFS kills of {POINTS} each landed")
    r.check_remote(m.models, m, bucket, base, "fresh")
