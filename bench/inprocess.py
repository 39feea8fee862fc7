"""The in-process side of the peer comparison: ckpt's Python API as a harness calls it.

``python bench/inprocess.py`` is a worker that ``bench.compare`` starts once per round (tool
``ckpt-api``), as a script, so that ckpt comes from the install under test and never from the
checkout beside it. It imports the library (``preload()`` included, as a harness
that wants no import on its first restore calls it), says it is ready, then serves one JSON
request per stdin line and answers one JSON line on stdout, like a long-lived agent harness:
the store is opened once (``Checkpoints.open``) and every step is one call on that open
service. Each step is timed here with ``time.perf_counter`` around the call alone, so
interpreter start-up, imports and the protocol are left out, which is the point of this mode.
A call returns once its work is done and durable, and finishes its bookkeeping (the stat
cache's save, freeing what a restore replaced) on a thread: the worker then waits for that
(``settle()``) before it answers, so nothing of a step runs while the driver checks the tree or
measures the store, and reports both times.

Requests (one object per line; ``op`` names it):
  {"op": "init", "root": R, "store": S}  ``Checkpoints.init(R, S)`` + close, like ``ckpt init``
  {"op": "open", "root": R, "store": S}  ``Checkpoints.open(R, S)``, kept open for the steps
                                          that follow (once per round, as a harness does)
  {"op": "create", "label": L}            ``create(label=L)``
  {"op": "restore", "ref": ID}            ``restore(ID)``: the default, pre-restore save included
  {"op": "close"}                         close the service and exit
Answers: {"seconds", "settled_seconds", "max_rss_kib", "id"?, "report"?} (``seconds`` until
the call returned, ``settled_seconds`` until its bookkeeping was done), or {"error", "traceback"} on any
exception (the worker keeps serving; the driver treats it as a failed step). Before the first
request it says {"ready": true, "pid", "max_rss_kib", "ckpt_module"}: the last is
``ckpt.checkpoints.__file__``, so the driver can check which install it imported.

``max_rss_kib`` is ``getrusage(RUSAGE_SELF).ru_maxrss`` after the step: the worker's high-water
mark so far, so it is cumulative (never below any earlier step's, nor the import floor that
the ready line reports).

Owns: the protocol and the in-process timing. Must not: print anything else on stdout.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from ckpt import checkpoints
from ckpt.checkpoints.service import Checkpoints, preload


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


class Worker:
    def __init__(self) -> None:
        self.service: Checkpoints | None = None

    def _open(self) -> Checkpoints:
        if self.service is None:
            raise RuntimeError("no store open: send init first")
        return self.service

    def init(self, root: str, store: str) -> dict[str, Any]:
        Checkpoints.init(root, store).close()
        return {}

    def open(self, root: str, store: str) -> dict[str, Any]:
        self.close()
        self.service = Checkpoints.open(root, store)
        return {}

    def create(self, label: str) -> dict[str, Any]:
        record = self._open().create(label=label)
        stats = record.to_json()["stats"]
        return {"id": record.id, "report": {**stats, "hashed": record.stats.hashed}}

    def restore(self, ref: str) -> dict[str, Any]:
        return {"report": self._open().restore(ref).to_json()}

    def settle(self) -> None:
        if self.service is not None:
            self.service.settle()

    def close(self) -> dict[str, Any]:
        if self.service is not None:
            service, self.service = self.service, None
            service.close()
        return {}


def serve(requests: IO[str], answers: IO[str]) -> None:
    worker = Worker()
    ops: dict[str, Callable[..., dict[str, Any]]] = {
        "init": worker.init, "open": worker.open, "create": worker.create,
        "restore": worker.restore, "close": worker.close}

    def answer(value: dict[str, Any]) -> None:
        answers.write(json.dumps(value) + "\n")
        answers.flush()

    # ckpt_module: where ckpt was imported from, which the driver checks (``--install venv``).
    answer({"ready": True, "pid": os.getpid(), "max_rss_kib": peak_rss_kib(),
            "ckpt_module": checkpoints.__file__})
    for line in requests:
        request = json.loads(line)
        op = request.pop("op")
        try:
            start = time.perf_counter()
            result = ops[op](**request)
            seconds = time.perf_counter() - start
            worker.settle()
            settled = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 (any failure is the driver's to report)
            answer({"error": f"{op}: {type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()})
            continue
        answer({"seconds": seconds, "settled_seconds": settled, "max_rss_kib": peak_rss_kib(),
                **result})
        if op == "close":
            return


def main() -> None:
    # The protocol gets its own copy of stdout; anything else that writes to fd 1 (a library
    # print, a C extension) lands on stderr instead of corrupting an answer.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    preload()
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
