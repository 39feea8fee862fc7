"""A Ctrl-C that Python wraps in another error is reported as a Ctrl-C (exit 130).

Python 3.11 turns an exception raised by `__set_name__` while a class is created (a SIGINT
landing there while ckpt imports a module) into `RuntimeError(...) from exc`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from ckpt.cli import errors


class _Interrupting:
    def __set_name__(self, owner: type, name: str) -> None:
        raise KeyboardInterrupt


def _wrapped() -> BaseException:
    try:
        @dataclass
        class _Victim:
            field = _Interrupting()
    except BaseException as exc:  # noqa: BLE001 - the error under test
        return exc
    raise AssertionError("the class was created")


def test_an_interrupt_wrapped_by_set_name_exits_130() -> None:
    exc = _wrapped()
    assert not isinstance(exc, KeyboardInterrupt)  # Python wrapped it
    out = io.StringIO()
    assert errors.report(exc, debug=False, stream=out) == errors.INTERRUPTED
    assert out.getvalue() == "ckpt: error: interrupted\n"


def test_an_error_without_an_interrupt_stays_internal() -> None:
    out = io.StringIO()
    assert errors.report(RuntimeError("boom"), debug=False, stream=out) == errors.USER_ERROR
    assert "internal error" in out.getvalue()
