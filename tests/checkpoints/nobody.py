"""Run a job as the unprivileged user "nobody" (uid/gid 65534), for tests about permissions.

Root reads mode-000 files regardless, so unreadability can only be real for another user.
Shared by the snapshot and the fault tests (tests/checkpoints and tests/faults are both on
pytest's `pythonpath`, so this imports by name).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

NOBODY = 65534


def run_as_nobody(job: Callable[[], Any]) -> Any:
    """Run `job` in a forked child that dropped root for uid/gid 65534; return its JSON result.

    A fork (not a new interpreter) because the interpreter lives under /root, which only root
    may enter; everything the job needs is imported already.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = {"result": job()}
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            payload = {"error": repr(exc)}
        finally:
            try:
                os.write(write_end, json.dumps(payload).encode())
            finally:
                os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    answer = json.loads(b"".join(chunks) or b"{}")
    assert os.waitstatus_to_exitcode(status) == 0, answer
    return answer["result"]
