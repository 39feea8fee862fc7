"""Which operating systems ckpt runs on, checked before the library is imported.

ckpt supports Linux and macOS. The library relies on POSIX at import time (`fcntl` file locks in
`lock.py` and `objstore/packfile.py`; `os.O_NOFOLLOW`, `os.O_DIRECTORY` and `os.O_CLOEXEC` in
`dirlisting.py`, `ignore.py` and `restore/apply.py`) and at run time (`os.pread`, `os.fchmod`,
`os.uname`, `dir_fd` arguments). On Windows those are missing, so `check_platform` refuses it
with one line instead of letting an ImportError surface from deep inside. Other POSIX systems
are not refused: they have what ckpt calls, though nobody tests them.

Must not import anything but `errors` and the standard library: it runs before everything else.
"""

from __future__ import annotations

import sys

from ckpt.checkpoints.errors import UnsupportedPlatform

REFUSED = frozenset({"win32"})


def check_platform(platform: str | None = None) -> None:
    """Raise `UnsupportedPlatform` on a system ckpt cannot run on (default: `sys.platform`)."""
    name = sys.platform if platform is None else platform
    if name in REFUSED:
        raise UnsupportedPlatform(name)
