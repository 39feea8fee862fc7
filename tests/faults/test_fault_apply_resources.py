"""A restore that runs out of a resource mid-apply (issues 28.6 and 28.18), in real processes.

- 28.6: inodes run out on a real tmpfs (`nr_inodes`) after the files are staged, while the
  apply creates directories. That is no conflict: the restore fails (exit 1, naming the path)
  with its journal open, and once inodes are free again `ckpt recover` completes it exactly.
- 28.18: a child with a low RLIMIT_NOFILE restores a tree deeper than the descriptors it may
  hold: the apply keeps fewer directories open and completes.

The tmpfs test needs root (mount); skipped elsewhere.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

DIRS = 100


def free_inodes(path: str) -> int:
    return os.statvfs(path).f_ffree


@pytest.mark.skipif(not h.can_mount(), reason="needs root to mount a tmpfs")
def test_out_of_inodes_mid_apply_keeps_the_journal_and_recover_completes(base: str) -> None:
    mount = os.path.join(base, "small")
    os.makedirs(mount)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=1500,mode=0755", "tmpfs",
                    mount], check=True, capture_output=True)
    try:
        root = os.path.join(mount, "ws")
        os.mkdir(root)
        assert h.ckpt(root, "init").code == h.OK
        with open(os.path.join(root, ".ckptignore"), "w") as out:
            out.write("filler/\n")
        for index in range(DIRS):
            h.write_file(os.path.join(root, f"d{index:03}", "f.txt"), b"%d\n" % index, old=True)
        target = h.ckpt(root, "create").out.strip()
        expected = h.tree_state(root, exclude=(b".ckpt", b"filler"))
        for index in range(DIRS):
            os.unlink(os.path.join(root, f"d{index:03}", "f.txt"))
            os.rmdir(os.path.join(root, f"d{index:03}"))
        assert h.ckpt(root, "create").code == h.OK
        # Leave room for the staging (a directory and DIRS files) and the pre-restore
        # checkpoint, and for half of the directories the apply must create.
        filler = os.path.join(root, "filler")
        os.mkdir(filler)
        spare = (DIRS + 1) + 12 + DIRS // 2
        count = 0
        while free_inodes(mount) > spare:
            open(os.path.join(filler, str(count)), "wb").close()
            count += 1
        failed = h.ckpt(root, "restore", target)
        assert failed.code == h.USER_ERROR, failed
        assert "No space left on device" in failed.err and root in failed.err, failed
        assert h.journals(os.path.join(root, ".ckpt")), "the journal must stay open"
        assert h.tree_state(root, exclude=(b".ckpt", b"filler")) != expected  # half applied
        for name in os.listdir(filler):
            os.unlink(os.path.join(filler, name))
        recovered = h.ckpt(root, "recover", "--json")
        assert recovered.code == h.OK, recovered
        assert recovered.json()["recovered"] is True
        assert h.tree_state(root, exclude=(b".ckpt", b"filler")) == expected
        assert h.journals(os.path.join(root, ".ckpt")) == []
        assert h.fsck_clean(root).code == h.OK
        h.tally("apply out of inodes", injected=1, completed=1)
    finally:
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


DEPTH = 90
NOFILE = 48


def _low_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def deep_tree_gone(base: str) -> tuple[str, str, h.Model]:
    """(root, checkpoint id, its tree) of a checkpoint of DEPTH nested directories (a file in
    each), deleted since from the workspace."""
    root = os.path.join(base, "ws")
    os.mkdir(root)
    assert h.ckpt(root, "init").code == h.OK
    deep = root
    for level in range(DEPTH):
        deep = os.path.join(deep, f"l{level}")
        h.write_file(os.path.join(deep, "f.txt"), b"%d\n" % level, old=True)
    target = h.ckpt(root, "create").out.strip()
    expected = h.tree_state(root)
    subprocess.run(["rm", "-rf", os.path.join(root, "l0")], check=True)
    return root, target, expected


def test_a_deep_restore_completes_under_a_low_descriptor_limit(base: str) -> None:
    root, target, expected = deep_tree_gone(base)
    done = subprocess.run(h.argv(root, "restore", target), env=h.env(), cwd=root,
                          capture_output=True, timeout=180, check=False, preexec_fn=_low_nofile)
    assert done.returncode == h.OK, done.stderr.decode(errors="replace")
    assert h.tree_state(root) == expected
    h.tally("apply under RLIMIT_NOFILE", injected=1, completed=1)


# The same restore where the bound is wrong (as if other descriptors were taken after it was
# fitted): every EMFILE closes another directory and the apply still completes.
_UNBOUNDED = """
import resource, sys
from ckpt.checkpoints.restore import apply as restore
from ckpt.checkpoints.service import Checkpoints
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), int(sys.argv[3])))
restore.open_dirs_bound = lambda: 10_000
with Checkpoints.open(sys.argv[1]) as cp:
    cp.restore(sys.argv[2])
"""


def test_a_deep_restore_survives_emfile_when_its_bound_is_too_high(base: str) -> None:
    root, target, expected = deep_tree_gone(base)
    done = subprocess.run([sys.executable, "-c", _UNBOUNDED, root, target, str(NOFILE)],
                          env=h.env(), capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert h.tree_state(root) == expected
    h.tally("apply under RLIMIT_NOFILE", injected=1, completed=1)
