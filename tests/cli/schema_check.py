"""Validate what a `ckpt ... --json` run printed against the schema its command ships with.

The `ckpt_in` / `ckpt_proc` fixtures of tests/cli/conftest.py return their runner through
`validating`, so each `--json` stdout any CLI test produces is validated. The schema is chosen
from the command line through `ckpt.schemas.USED_BY` (`diff --patch` -> `diff-patch`); a
command that takes `--json` but has no schema there fails the run. `schema NAME --json` prints
a schema: it must be a valid Draft 2020-12 schema and the shipped file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, TypeVar

import click
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from ckpt import schemas
from ckpt.cli.main import cli

# Options that end a run before the command does anything (their stdout is not a result).
EARLY_EXIT = frozenset({"-h", "--help", "--version"})


class Output(Protocol):
    code: int
    stdout: str


R = TypeVar("R", bound=Output)


@dataclass(frozen=True)
class Invocation:
    """A command line as click would split it: the command path, the names of the options
    given to that command, and its positional arguments."""

    path: tuple[str, ...]
    options: frozenset[str]
    arguments: tuple[str, ...]
    command: click.Command | None


def _takes_value(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not param.is_flag and not param.count


def _option(command: click.Command, token: str) -> click.Parameter | None:
    name = token.split("=", 1)[0]
    return next((p for p in command.params
                 if isinstance(p, click.Option) and name in (*p.opts, *p.secondary_opts)), None)


def parse(args: Sequence[str]) -> Invocation:
    """Split `args` into the command path, its options (by parameter name) and arguments."""
    command: click.Command = cli
    path: list[str] = []
    options: set[str] = set()
    arguments: list[str] = []
    tokens = list(args)
    while tokens:
        token = tokens.pop(0)
        if token == "--":
            arguments.extend(tokens)
            break
        if token.startswith("-") and token != "-":
            param = _option(command, token)
            if param is not None and param.name:
                options.add(param.name)
                if _takes_value(param) and "=" not in token and tokens:
                    tokens.pop(0)
            continue
        if isinstance(command, click.Group) and not arguments:
            sub = command.commands.get(token)
            if sub is None:
                return Invocation((*path, token), frozenset(options), (), None)
            command = sub
            path.append(token)
            options = set()  # the group's own options end here
            continue
        arguments.append(token)
    return Invocation(tuple(path), frozenset(options), tuple(arguments), command)


def takes_json(command: click.Command) -> bool:
    return any(p.name == "as_json" for p in command.params)


def schema_for(inv: Invocation) -> str | None:
    """The schema of this invocation's stdout: the `USED_BY` entry of its command whose extra
    options are all given, the most specific first; None when no entry names the command."""
    best: tuple[int, str] | None = None
    for name, uses in schemas.USED_BY.items():
        for use in uses:
            words = use.split()
            path = tuple(w for w in words if not w.startswith("-"))
            needed = [w for w in words if w.startswith("-")]
            if path != inv.path or inv.command is None:
                continue
            given = [_option(inv.command, flag) for flag in needed]
            matches = all(p is not None and p.name in inv.options for p in given)
            if matches and (best is None or len(needed) > best[0]):
                best = (len(needed), name)
    return best[1] if best else None


@cache
def registry() -> Registry[Any]:
    """Every shipped schema under its `$id`, so relative `$ref`s resolve offline."""
    resources = [(schemas.load(n)["$id"], Resource.from_contents(schemas.load(n), DRAFT202012))
                 for n in schemas.names()]
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schemas.load(name), registry=registry())


def validate(name: str, value: Any) -> None:
    """AssertionError listing every way `value` breaks schema `name`, or, valid, the first
    object whose keys are not in the order its schema lists them (the documented order)."""
    errors = sorted(validator(name).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
                 for e in errors[:10]]
        raise AssertionError(f"output does not match schema {name!r}:\n" + "\n".join(lines))
    resolver = registry().resolver(base_uri=schemas.load(name)["$id"])
    check_order(schemas.load(name), value, resolver, "")


def check_order(schema: Any, value: Any, resolver: Any, where: str) -> None:
    """Walk a valid `value` with its schema: each object's keys come in `properties` order."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        found = resolver.lookup(schema["$ref"])
        check_order(found.contents, value, found.resolver, where)
    for key in ("oneOf", "anyOf"):
        for branch in schema.get(key, ()):
            if Draft202012Validator(branch, registry=registry(), _resolver=resolver).is_valid(value):
                check_order(branch, value, resolver, where)
    if isinstance(value, dict) and "properties" in schema:
        keys = [k for k in schema["properties"] if k in value]
        assert list(value) == keys, f"at {where or '(top)'}: keys {list(value)}, not {keys}"
        for key, sub in schema["properties"].items():
            if key in value:
                check_order(sub, value[key], resolver, f"{where}/{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            check_order(schema["items"], item, resolver, f"{where}/{index}")


def check_output(args: Sequence[str], code: int, stdout: str) -> str | None:
    """Validate the stdout of `ckpt ARGS` when it is a `--json` result; return the schema
    name used (None: nothing to check). A `--json` command without a schema fails."""
    inv = parse(args)
    if inv.command is None or "as_json" not in inv.options or EARLY_EXIT.intersection(args):
        return None
    if not stdout.strip():
        return None  # an error: nothing on stdout
    if inv.path == ("schema",) and inv.arguments:
        Draft202012Validator.check_schema(json.loads(stdout))
        assert json.loads(stdout) == schemas.load(inv.arguments[0])
        return "(meta-schema)"
    name = schema_for(inv)
    assert name is not None, (f"'ckpt {' '.join(inv.path)} --json' has no schema: add one to "
                              "ckpt/schemas and to ckpt.schemas.USED_BY")
    lines_of = name == "event"  # `events --follow --json`: one event a line
    try:
        docs = [json.loads(line) for line in stdout.splitlines()] if lines_of else [json.loads(stdout)]
    except json.JSONDecodeError:
        if code != 0:  # a stream cut short by an error (`cat --json` on a corrupt object)
            return None
        raise
    for doc in docs:
        validate(name, doc)
    return name


def checked(args: Sequence[str], run: R) -> R:
    """`run` (a conftest `Run`) after validating its stdout."""
    check_output(args, run.code, run.stdout)
    return run


def validating(runner: Callable[..., R]) -> Callable[..., R]:
    """A fixture's `run(*args, **options)` that validates each run's stdout (both fixtures
    of tests/cli/conftest.py return their runner through this)."""
    def run(*args: str, **options: Any) -> R:
        return checked(args, runner(*args, **options))

    return run
